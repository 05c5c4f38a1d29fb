"""Runtime docker keeps the container's own output (its stdout and stderr: the launcher's
lines, torchrun's) in the node folder as ``container.log``, beside ``launch.json`` and
``launcher.log`` (the docker_container module run's, which the launch role's supervisor runs),
whether the container ended by itself, was stopped, or ended as it was being stopped.

For real, with no ssh and no molecule: the container role on this machine (``ansible_connection:
local``), its Docker engine and the loopback cluster's base image (``flagperf-base:bookworm``,
``tests/loopback_cluster.py``), running a ``binary`` case entry that prints a line on each
stream. The round-level check is ``tests/test_cluster.py``'s two-host round.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

import host_side
from unavailable import unavailable

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "flagperf-base:bookworm"

ENTRY = """#!/bin/sh
echo "launcher says hello"
echo "torchrun warns" >&2
if [ "$FLAGPERF_HANG" = 1 ]; then echo started > "$4/hanging"; exec sleep 600; fi
exit 3
"""

PLAYS = """
- name: A node that ends by itself (the role's main)
  hosts: localhost
  gather_facts: false
  vars: &node
    container_round: "{{ round }}"
    container_image: "{{ image }}"
    container_root: "{{ root }}"
    container_python: "{{ python }}"
    container_wait_slice: 1
    container_name: "{{ names.ending }}"
    container_output_dir: "{{ folders.ending }}"
  roles:
    - role: container

- name: A node stopped before it ended (tasks_from start, then end)
  hosts: localhost
  gather_facts: false
  vars:
    <<: *node
    container_name: "{{ names.hanging }}"
    container_output_dir: "{{ folders.hanging }}"
    container_env: {FLAGPERF_HANG: "1"}
  tasks:
    - name: Start the node
      ansible.builtin.include_role:
        name: container
        tasks_from: start

    - name: Let it print
      ansible.builtin.wait_for:
        path: "{{ container_output_dir }}/hanging"
        timeout: 60

    - name: End it
      ansible.builtin.include_role:
        name: container
        tasks_from: end
"""


def engine_problem() -> str:
    """Why this machine cannot run the containers ("" when it can)."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError:
        return "no Docker SDK for Python"
    try:
        docker.from_env().images.get(IMAGE)
    except ImageNotFound:
        return f"no {IMAGE} image (tests/loopback_cluster.py builds it)"
    except DockerException as err:
        return f"no Docker engine: {err}"
    return ""


@pytest.fixture(scope="module")
def engine(base_image):
    """The Docker engine, through the SDK, and the base image the containers run."""
    problem = engine_problem()
    if problem:
        unavailable(problem + " (.ci/run starts dockerd)")


def containers(prefix: str) -> list[str]:
    import docker

    return [c.name for c in docker.from_env().containers.list(all=True, filters={"name": prefix})]


def test_the_node_folder_keeps_the_containers_output(engine, tmp_path):
    root = tmp_path / "root"
    (root / "case").mkdir(parents=True)
    (root / "case/run.sh").write_text(ENTRY)
    (root / "case/run.sh").chmod(0o755)
    prefix = f"flagperf-log-{os.getpid()}-{tmp_path.name}"
    names = {"ending": f"{prefix}-ending", "hanging": f"{prefix}-hanging"}
    folders = {key: str(tmp_path / f"{key}_noderank0") for key in names}
    round_ = {"launcher": "binary", "entry": "case/run.sh", "nnodes": 1, "nproc_per_node": 1,
              "master_addr": "127.0.0.1", "vendor_dir": "vendors/cpu", "env": {},
              "config": {"steps": 1}, "timeout": 120, "data_dir": "", "python": "python3"}
    (tmp_path / "plays.yml").write_text(PLAYS)
    (tmp_path / "vars.json").write_text(json.dumps({
        "round": round_, "image": IMAGE, "root": str(root), "python": sys.executable,
        "names": names, "folders": folders}))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    try:
        done = subprocess.run(["ansible-playbook", str(tmp_path / "plays.yml"), "-i",
                               str(tmp_path / "hosts.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        for key in names:
            node = Path(folders[key])
            # The container's two streams, in container.log alone.
            log = (node / "container.log").read_text()
            assert "launcher says hello\n" in log and "torchrun warns\n" in log, (key, log)
            # The module run's end and its own messages (none), by the launch role's supervisor.
            status = json.loads((node / "launch.json").read_text())
            assert status["finished"] == 1, status
            assert (node / "launcher.log").read_text() == ""
            assert not (node / "job_result.json").exists()      # it holds the environment
        ended = json.loads((Path(folders["ending"]) / "launch.json").read_text())
        assert ended["rc"] == 0 and not ended["timed_out"]   # the module run's, not the case's
        assert containers(prefix) == []
    finally:
        for name in containers(prefix):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def end_step(out: Path, name: str) -> dict:
    """The role's end step on ``out`` (run as its ``piped_script`` step runs it)."""
    done = host_side.run_step("container_end", "--name", name, "--output-dir", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_container_its_module_run_removed_as_the_node_ended_keeps_its_output(engine,
                                                                                tmp_path):
    """The container ended and its module run removed it just before the end step looked:
    the engine has no such container, and the module's result (written as its run ends) has
    the output."""
    out = tmp_path / "node1_noderank0"
    out.mkdir()

    def module_run_ends() -> None:
        time.sleep(1)
        # The module's result as docker_container returns it (detach: false, cleanup: true).
        (out / "job_result.json").write_text(json.dumps({
            "changed": True, "status": 0,
            "container": {"Output": "launcher says hello\ntorchrun warns\n"}}))
        (out / "launch.json").write_text(json.dumps({"finished": 1, "rc": 0}))

    writer = threading.Thread(target=module_run_ends)
    writer.start()
    try:
        said = end_step(out, f"flagperf-log-gone-{os.getpid()}")
    finally:
        writer.join()
    assert said == {"changed": False, "msg": "ended by itself: its output kept"}
    assert (out / "container.log").read_text() == "launcher says hello\ntorchrun warns\n"


def test_no_container_log_when_no_container_ran(engine, tmp_path):
    """The module refused (an image it could not find): no container, so no container.log;
    the module's words are in its result, which the round's record reads."""
    out = tmp_path / "node1_noderank0"
    out.mkdir()
    (out / "job_result.json").write_text(json.dumps({
        "failed": True, "msg": "Error pulling image flagperf-none:0 - not found"}))
    (out / "launch.json").write_text(json.dumps({"finished": 1, "rc": 1}))
    assert end_step(out, f"flagperf-log-never-{os.getpid()}")["msg"] == "no such container"
    assert not (out / "container.log").exists()
