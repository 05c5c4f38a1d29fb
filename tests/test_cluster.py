"""Two hosts for real: sshd on 127.0.0.2-3, a Docker engine, the cpu vendor's image, a
non-root ssh user; the image's rebuild, the container role on its own (as its README shows) and
ansible.cfg's remote_tmp on these hosts. (efficientnet across both hosts, 1 process each over gloo,
as the README's guide sets them up: tests/test_cluster_guide.py; faults and the wrapper on this
cluster: tests/test_faults.py.)"""

import json
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path

import loopback_cluster
import psutil
import yaml

from flagperf_ansible.run.launch import image_tag
from flagperf_ansible.run.plan import build_plan


def left_behind(run_id: str) -> tuple[list[str], list[int]]:
    """Containers and monitor processes of ``run_id`` still on the (shared) machine."""
    names = subprocess.run(["docker", "ps", "-a", "--filter", f"name=flagperf-{run_id}",
                            "--format", "{{.Names}}"], capture_output=True, text=True,
                           check=True).stdout.split()
    monitors = [p.pid for p in psutil.process_iter(["cmdline"])
                if any("sys_monitor" in a for a in p.info["cmdline"] or [])
                and any(run_id in a for a in p.info["cmdline"] or [])]
    return names, monitors


def check_two_host_round(results: Path) -> dict:
    (run_dir,) = [p for p in results.iterdir() if p.name.startswith("run")]
    round_dir = run_dir / "efficientnet-pytorch-cpux2x1" / "round1"
    document = json.loads((round_dir / "round.json").read_text())
    assert document["status"] == "passed", document["reason"]
    assert document["finished"]["converged"] is True
    assert document["finished"]["world_size"] == 2
    for rank, node in enumerate(("node1_noderank0", "node2_noderank1")):
        log = (round_dir / node / f"rank{rank}.out.log").read_text()
        assert '"event": "FINISHED"' in log
        samples = (round_dir / node / "sys_monitor.csv").read_text().splitlines()
        assert len(samples) > 10
        # The module run that started the container left its result to the controller only
        # (it holds the container's environment); its messages are launcher.log.
        assert not (round_dir / node / "job_result.json").exists()
        assert (round_dir / node / "launcher.log").exists()
        assert (round_dir / node / "container.log").is_file()     # the container's own output
    assert set(document["ranks"]) == {"0", "1"}
    assert left_behind(run_dir.name) == ([], [])
    # No async job: nothing in ~/.ansible_async names the run.
    async_dir = Path(pwd.getpwnam(loopback_cluster.USER).pw_dir) / ".ansible_async"
    kept = [f.name for f in async_dir.glob("*") if run_dir.name in f.read_text(errors="replace")]
    assert kept == []
    return document


def test_image_is_rebuilt_only_when_its_inputs_change(cluster, project, tmp_path, venv_env):
    """A second prepare finds the image by its content-hash tag and builds nothing; a changed
    definition file or base image gives another tag (so it would be built)."""
    def images():
        listed = subprocess.run(["docker", "images", "flagperf-cpu-pytorch", "--format",
                                 "{{.Tag}} {{.ID}} {{.CreatedAt}}"],
                                capture_output=True, text=True, check=True).stdout
        return sorted(listed.splitlines())

    def prepare():
        done = subprocess.run(["ansible-playbook", "playbooks/prepare.yml", "-i",
                               str(cluster.inventory), "-e", f"flagperf_run_id={run_id}"],
                              cwd=project, capture_output=True, text=True, env=venv_env,
                              timeout=1800)
        assert done.returncode == 0, done.stdout[-4000:]
        return done.stdout

    # The preflight pins the hosts' keys (ssh_trust) that prepare's connections check, and
    # writes the run's plan that prepare follows.
    run_id = time.strftime("run%Y%m%d%H%M%S")
    done = subprocess.run(["ansible-playbook", "playbooks/preflight.yml", "-i",
                           str(cluster.inventory), "-e", f"flagperf_run_id={run_id}"],
                          cwd=project, capture_output=True, text=True, env=venv_env, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:]
    prepare()                                    # builds it if no earlier test did
    before = images()
    output = prepare()
    assert images() == before and len(before) >= 1
    assert "skipping: [node1]" in output.split("TASK [image_build : Build it]")[1].split("TASK")[0]
    # The second prepare changes nothing on any host (deploy unpacks nothing, no image is
    # built) but the run's host description, which prepare writes for the run it follows.
    recap = re.findall(r"^(node\d+)\s+: ok=\d+\s+changed=(\d+)", output, re.MULTILINE)
    changed = [task.split("]")[0] for task in output.split("\nTASK [")[1:]
               if "\nchanged:" in task]
    assert changed == ["sys_info : Describe the host into sys_info.json"], changed
    assert sorted(recap) == [("node1", "1"), ("node2", "1")], recap

    vendor = tmp_path / "vendors/cpu/docker_image/pytorch"
    vendor.mkdir(parents=True)
    for path in (project / "vendors/cpu/docker_image/pytorch").iterdir():
        (vendor / path.name).write_bytes(path.read_bytes())
    inputs = {"base_image": "flagperf-base:bookworm", "wheels": []}
    tag = image_tag(tmp_path, "cpu", "pytorch", inputs)
    assert image_tag(tmp_path, "cpu", "pytorch", inputs) == tag
    (vendor / "requirements.txt").write_text((vendor / "requirements.txt").read_text() + "tqdm\n")
    changed = image_tag(tmp_path, "cpu", "pytorch", inputs)
    assert changed != tag
    assert image_tag(tmp_path, "cpu", "pytorch", {**inputs, "base_image": "debian:12"}) != changed


# Extra vars name the two nodes (`ending`, `hanging`): the roles' own variables are set by each
# play, as extra vars would override them in both.
CONTAINER_ROLE_PLAYS = """
- name: A node of a round with the container role alone, as its README shows
  hosts: node1
  gather_facts: false
  vars: &node
    container_round: "{{ node.round }}"
    container_name: "{{ node.name }}"
    container_image: "{{ node.image }}"
    container_root: "{{ node.root }}"
    container_output_dir: "{{ node.output_dir }}"
    container_env: "{{ node.env }}"
    container_options: "{{ node.options }}"
    container_wait_slice: 2
    node: "{{ ending }}"
  tasks:
    - name: Learn the ssh user's uid and gid
      ansible.builtin.setup:
        gather_subset: ["!all", "!min", user]

    - name: Run the node in its container
      ansible.builtin.include_role:
        name: container
      vars:
        container_user: "{{ ansible_facts.user_uid }}:{{ ansible_facts.user_gid }}"

    - name: Keep how the container ended
      ansible.builtin.copy:
        content: "{{ container_result | to_json }}"
        dest: "{{ container_output_dir }}/container_result.json"
        mode: "0644"

- name: A node that does not end, stopped as a multi-host caller stops it
  hosts: node1
  gather_facts: false
  vars:
    <<: *node
    node: "{{ hanging }}"
  tasks:
    - name: Start the node
      ansible.builtin.include_role:
        name: container
        tasks_from: start

    - name: Let its case run
      ansible.builtin.wait_for:
        path: "{{ container_output_dir }}/rank0.out.log"
        search_regex: STEP_END
        timeout: 120

    - name: End it (its log kept, the container removed)
      ansible.builtin.include_role:
        name: container
        tasks_from: end
"""


def test_the_container_role_alone_runs_or_stops_a_node_and_leaves_nothing(cluster, project,
                                                                           tmp_path, venv_env):
    """The container role's own flow (as an ops team's play would use it): the
    docker_container module run supervised on the host and waited for, then the log kept and
    the container removed;
    and a node stopped before it ended (tasks_from start, end), its log kept. Neither leaves a
    container, a process of its module run or the module's result behind."""
    run_id = time.strftime("run%Y%m%d%H%M%S")    # preflight's plan, which prepare follows
    for playbook in ("playbooks/preflight.yml", "playbooks/prepare.yml"):   # the image, the code
        done = subprocess.run(["ansible-playbook", playbook, "-i", str(cluster.inventory),
                               "-e", f"flagperf_run_id={run_id}"],
                              cwd=project, capture_output=True, text=True, env=venv_env,
                              timeout=1800)
        assert done.returncode == 0, done.stdout[-4000:]
    settings = yaml.safe_load((project / "roles/flagperf/defaults/main.yml").read_text())
    settings |= yaml.safe_load((cluster.inventory / "group_vars/all.yml").read_text())
    settings["flagperf_cases"] = ["sleep:pytorch:cpu:1:1:1"]
    plan = build_plan(settings, {}, ["node1"], {"node1": cluster.hosts["node1"]}, project)
    (round_,) = plan["rounds"]
    image = plan["images"]["pytorch"]
    name = f"flagperf-role-alone-{tmp_path.name}"
    folder = Path(settings["flagperf_workdir"]) / name
    output, hanging_output = folder / "node1_noderank0", folder / "hanging_noderank0"
    (tmp_path / "plays.yml").write_text(CONTAINER_ROLE_PLAYS)
    ending = {"round": round_, "name": name, "image": f"{image['name']}:{image['tag']}",
              "root": settings["flagperf_root"], "output_dir": str(output),
              "env": settings["flagperf_env"], "options": plan["container"]}
    hanging = ending | {"round": round_ | {"config": round_["config"] | {"hang": True}},
                        "name": f"{name}-hanging", "output_dir": str(hanging_output)}
    (tmp_path / "vars.json").write_text(json.dumps({"ending": ending, "hanging": hanging}))
    user = pwd.getpwnam(loopback_cluster.USER)
    try:
        done = subprocess.run(["ansible-playbook", str(tmp_path / "plays.yml"), "-i",
                               str(cluster.inventory), "-e", f"@{tmp_path / 'vars.json'}"],
                              cwd=project, capture_output=True, text=True, env=venv_env,
                              timeout=600)
        assert done.returncode == 0, done.stdout[-4000:]
        # The node's job is the docker_container module run: its result holds the container's.
        result = json.loads((output / "container_result.json").read_text())["result"]
        assert result["status"] == 0, result
        assert '"event": "FINISHED"' in (output / "rank0.out.log").read_text()
        assert yaml.safe_load((output / "config.yaml").read_text()) == round_["config"]
        # The container's own output, as the module kept it before removing the container (the
        # case writes its rank logs; what the launcher printed, if anything, is here).
        assert (output / "container.log").read_text() == result["container"]["Output"]
        assert {(p.stat().st_uid, p.stat().st_gid) for p in output.iterdir()} == {
            (user.pw_uid, user.pw_gid)}
        assert not (output / "job_result.json").exists()
        # The hanging node ran until it was stopped: its container's log is kept.
        end = done.stdout.rsplit("TASK [container : Keep the container's log and remove it]", 1)[1]
        assert end.split("PLAY RECAP")[0].strip("* \n") == "changed: [node1]", end[:500]
        assert (hanging_output / "container.log").is_file()
        assert not (hanging_output / "job_result.json").exists()
        left = subprocess.run(["docker", "ps", "-a", "--filter", f"name={name}", "--format",
                               "{{.Names}}"], capture_output=True, text=True, check=True).stdout
        assert left == ""
        supervisors = [p.pid for p in psutil.process_iter(["cmdline"])
                       if any(str(folder) in a for a in p.info["cmdline"] or [])]
        assert supervisors == []
    finally:
        for container in (name, f"{name}-hanging"):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_task_that_copies_to_the_host_costs_no_exchange_to_learn_its_home(cluster, venv_env,
                                                                             tmp_path):
    """ansible.cfg's remote_tmp ($HOME/.ansible/tmp): a task that copies a file to the host (as
    an async start does) makes its temporary folder without first asking the host what ~ is,
    which Ansible's default (~/.ansible/tmp) costs: one ssh exchange per such task and host."""

    # The host's key, as preflight's ssh_trust would record it (this test does not run it).
    known_hosts = tmp_path / "known_hosts"
    key = (cluster.state / "node1_host_ed25519.pub").read_text().split()[:2]
    known_hosts.write_text(f"[{cluster.hosts['node1']}]:{loopback_cluster.PORT} {' '.join(key)}\n")

    def exchanges(number: int, **env: str) -> int:
        done = subprocess.run(
            ["ansible", "node1", "-i", str(cluster.inventory), "-vvv", "-m", "ansible.builtin.copy",
             "-a", f"content={number} dest=~/remote-tmp-probe-{tmp_path.name} mode=0600",
             "-e", f"ansible_ssh_common_args='-o UserKnownHostsFile={known_hosts}'"],
            capture_output=True, text=True, env={**venv_env, **env}, timeout=120)
        assert done.returncode == 0 and "CHANGED" in done.stdout, done.stdout[-2000:]
        return done.stdout.count("SSH: EXEC")

    try:
        ours = exchanges(1)
        default = exchanges(2, ANSIBLE_REMOTE_TMP="~/.ansible/tmp")
    finally:
        home = Path(pwd.getpwnam(loopback_cluster.USER).pw_dir)
        (home / f"remote-tmp-probe-{tmp_path.name}").unlink(missing_ok=True)
    assert ours == default - 1, (ours, default)
