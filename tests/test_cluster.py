"""Two hosts for real: sshd on 127.0.0.2-3, a Docker engine, the cpu vendor's image, a
non-root ssh user; resnet50 across both hosts (1 process each, gloo) through site.yml; the
image's rebuild and ansible.cfg's remote_tmp on these hosts. (The wrapper on this cluster:
tests/test_faults.py.)"""

import json
import pwd
import re
import subprocess
from pathlib import Path

import loopback_cluster
import psutil
import pytest

from flagperf_ansible.launch import image_tag

pytestmark = pytest.mark.slow


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
    round_dir = run_dir / "resnet50-pytorch-cpux2x1" / "round1"
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
    assert set(document["ranks"]) == {"0", "1"}
    assert left_behind(run_dir.name) == ([], [])
    # No async job: nothing in ~/.ansible_async names the run.
    async_dir = Path(pwd.getpwnam(loopback_cluster.USER).pw_dir) / ".ansible_async"
    kept = [f.name for f in async_dir.glob("*") if run_dir.name in f.read_text(errors="replace")]
    assert kept == []
    return document


def test_two_host_round_through_site_yml(cluster, project, tmp_path, venv_env):
    done = subprocess.run(["ansible-playbook", "site.yml", "-i", str(cluster.inventory),
                           "-e", f"flagperf_results_dir={tmp_path}"],
                          cwd=project, capture_output=True, text=True, env=venv_env, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:]
    document = check_two_host_round(tmp_path)
    print(f"site.yml: 2-host round wall {document['wall_time']:.1f} s, "
          f"e2e_time {document['finished']['e2e_time']:.1f} s")


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
                               str(cluster.inventory)], cwd=project, capture_output=True,
                              text=True, env=venv_env, timeout=1800)
        assert done.returncode == 0, done.stdout[-4000:]
        return done.stdout

    prepare()                                    # builds it if no earlier test did
    before = images()
    output = prepare()
    assert images() == before and len(before) >= 1
    assert "skipping: [node1]" in output.split("TASK [image_build : Build it]")[1].split("TASK")[0]
    # The second prepare changes nothing on any host: deploy copies nothing, no image is built.
    recap = re.findall(r"^(node\d+)\s+: ok=\d+\s+changed=(\d+)", output, re.MULTILINE)
    assert sorted(recap) == [("node1", "0"), ("node2", "0")], output[-2000:]

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
