"""A failed step says why: each failed item's own message (a looped task's ``res.results``),
the output's last lines where a message only says that a command failed, and Ansible's whole
output of the step kept in the run folder (``<run_dir>/ansible/<step>.log``).

The events are real: a tiny playbook whose tasks fail (looped and not) run by ansible-runner,
as the wrapper runs its steps. The wrapper itself runs for real on a local host whose deploy
target holds stale folders where case files go: deploy's unpack fails, in tar's words.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkout_copy import write_local_inventory
from flagperf_ansible.run.runner import failure_lines

ROOT = Path(__file__).resolve().parents[1]

FAILING_TASKS = """
- name: Tasks that fail, each its own way
  hosts: localhost
  gather_facts: false
  tasks:
    - name: A looped command, two of three items exit non-zero
      ansible.builtin.command: "sh -c 'echo out-{{ item }}; echo err-{{ item }} >&2; exit {{ item }}'"
      loop: [0, 3, 4]
      ignore_errors: true

    - name: A looped assertion with its own message
      ansible.builtin.assert:
        that: item.size > 1
        fail_msg: "{{ item.name }} is too small"
      loop: [{name: small, size: 1}, {name: large, size: 2}]
      loop_control:
        label: "{{ item.name }}"
      ignore_errors: true

    - name: A command that writes several lines on stderr
      ansible.builtin.command: "sh -c 'for n in 1 2 3 4 5; do echo line-$n >&2; done; exit 2'"
      ignore_errors: true

    - name: A command that says why on stdout only
      ansible.builtin.command: "sh -c 'echo only-stdout; exit 1'"
      ignore_errors: true

    - name: A failure with its own words
      ansible.builtin.fail:
        msg: the data folder is missing
      ignore_errors: true
"""


@pytest.fixture(scope="module")
def failed_events(ansible_playbook, tmp_path_factory) -> dict[str, dict]:
    """``runner_on_failed`` event data of each task of FAILING_TASKS, by task name, as
    ansible-runner hands them to an event handler."""
    import ansible_runner

    base = tmp_path_factory.mktemp("events")
    (base / "failing.yml").write_text(FAILING_TASKS)
    (base / "ansible.cfg").write_text("[defaults]\n")       # not the project's callbacks
    (base / "private").mkdir()
    events: list[dict] = []
    with pytest.MonkeyPatch.context() as env:
        # ansible-runner finds ansible-playbook on PATH: the one beside this Python.
        env.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        runner = ansible_runner.run(
            private_data_dir=str(base / "private"), playbook=str(base / "failing.yml"),
            inventory=f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}",
            envvars={"ANSIBLE_CONFIG": str(base / "ansible.cfg")}, quiet=True,
            event_handler=lambda event: events.append(event) or True)
    assert runner.status == "successful", runner.stdout.read()
    return {e["event_data"]["task"]: e["event_data"] for e in events
            if e["event"] == "runner_on_failed"}


def test_a_looped_command_shows_each_failed_item_with_its_rc_and_stderr(failed_events):
    data = failed_events["A looped command, two of three items exit non-zero"]
    assert data["res"]["msg"] == "One or more items failed"       # what the wrapper showed
    assert failure_lines(data) == [
        "localhost: item 3: non-zero return code (rc 3): err-3",
        "localhost: item 4: non-zero return code (rc 4): err-4",
    ]


def test_a_looped_task_shows_each_failed_item_by_its_label_and_message(failed_events):
    data = failed_events["A looped assertion with its own message"]
    assert failure_lines(data) == ["localhost: item small: small is too small"]


def test_a_generic_message_is_followed_by_the_last_lines_of_the_output(failed_events):
    stderr = failed_events["A command that writes several lines on stderr"]
    assert failure_lines(stderr) == [
        "localhost: non-zero return code (rc 2): line-3\n    line-4\n    line-5"]
    stdout = failed_events["A command that says why on stdout only"]
    assert failure_lines(stdout) == ["localhost: non-zero return code (rc 1): only-stdout"]


def test_a_message_of_its_own_is_kept(failed_events):
    data = failed_events["A failure with its own words"]
    assert failure_lines(data) == ["localhost: the data folder is missing"]


def test_an_unreachable_host_says_why():
    """``runner_on_unreachable``'s shape: no items, the connection's message."""
    data = {"host": "node2", "res": {"unreachable": True, "changed": False,
                                     "msg": "Failed to connect to the host via ssh: timed out"}}
    assert failure_lines(data) == ["node2: Failed to connect to the host via ssh: timed out"]


def test_the_wrapper_shows_the_failed_task_with_its_reason_and_keeps_the_steps_output(
        ansible_playbook, tmp_path):
    """Stale folders where deploy puts case files (preflight checks the folders it makes, not
    what lies in them): its unpack fails, and the wrapper names the task and tar's reason."""
    root = tmp_path / "root"
    stale = ["benchmarks/sleep/pytorch/case.yml", "vendors/cpu/vendor.yml"]
    for name in stale:
        (root / name / "old").mkdir(parents=True)
    write_local_inventory(tmp_path / "inv", {
        "flagperf_vendor": "cpu", "flagperf_container_runtime": "none",
        "flagperf_root": str(root), "flagperf_workdir": str(tmp_path / "work"),
        "flagperf_python": sys.executable, "flagperf_clear_caches": False,
        "flagperf_cases": [{"model": "sleep", "framework": "pytorch", "hardware": "cpu",
                            "nnodes": 1, "nproc_per_node": 1, "repeat": 1}]})
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), COLUMNS="400")
    env.pop("FLAGPERF_PROJECT_DIR", None)
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "run", "-i", "inv",
                           "--results-dir", str(tmp_path / "results")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    (run_dir,) = (tmp_path / "results").glob("run*")
    log = run_dir / "ansible" / "prepare.log"
    lines = done.stdout.splitlines()
    assert "prepare: failed in Fail when the case code could not be unpacked" in lines, done.stdout
    # The reason in tar's words, not the module's "failed to unpack <tar> to <folder>".
    assert [x for x in lines if x.startswith("  localhost: ")] == [
        f"  localhost: could not unpack the case code into {root}: {stale[0]}: "
        "Cannot open: Is a directory (and 1 more)"], done.stdout
    assert "failed to unpack" not in done.stdout
    assert f"  Ansible's output of this step: {log}" in lines
    # The step's whole output, as ansible-playbook printed it, without colour codes.
    output = log.read_text()
    assert output.count("TASK [deploy : Unpack the tar where it changed]") == 1
    assert "failed to unpack" in output and "...ignoring" in output
    assert "PLAY RECAP" in output and "\x1b[" not in output
    # Stopped in prepare: no round ran.
    assert not list(run_dir.glob("sleep-pytorch-cpux1x1/round1/*_noderank0"))
