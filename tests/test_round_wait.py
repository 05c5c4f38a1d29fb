"""When a round's wait is over and how each node ended, from async_status results as Ansible
returns them (command: rc; docker_container: status; async_wrapper at its time limit) and from
node_job.py's wait (a docker_container module run's result)."""

import pytest

from flagperf_ansible.results import round_status
from flagperf_ansible.round_wait import node_outcome, round_over

RUNNING = {"started": 1, "finished": 0, "ansible_job_id": "j1"}
DONE = {"finished": 1, "rc": 0, "stdout": "ok"}
CRASHED = {"finished": 1, "rc": 3, "failed": True, "stderr": "boom"}
CONTAINER_CRASHED = {"finished": 1, "status": 2, "failed": True, "container": {"Output": "x"}}
KILLED_AT_LIMIT = {"finished": 1, "failed": True, "msg": "Timeout exceeded", "child_pid": 42}
# node_job.py wait on a docker_container module run (--result): the module exits 0 whatever
# the container's status; a module that failed before the container ran exits 1, no status.
SUPERVISED_CONTAINER_CRASHED = {"finished": 1, "rc": 0, "timed_out": False, "msg": "",
                                "result": {"failed": True, "status": 2, "container": {"Output": "x"}}}
SUPERVISED_MODULE_FAILED = {"finished": 1, "rc": 1, "timed_out": False, "msg": "",
                            "result": {"failed": True, "msg": "Error creating container"}}
HOSTS = ["a", "b"]


@pytest.mark.parametrize("polls, active, deadline, over", [
    ({"a": DONE, "b": DONE}, HOSTS, 2e12, True),                 # all ended
    ({"a": DONE, "b": RUNNING}, HOSTS, 2e12, False),             # one still runs
    ({"a": CRASHED, "b": RUNNING}, HOSTS, 2e12, True),           # a failure ends it for all
    ({"a": CONTAINER_CRASHED, "b": RUNNING}, HOSTS, 2e12, True),
    ({"a": KILLED_AT_LIMIT, "b": RUNNING}, HOSTS, 2e12, True),
    ({"a": SUPERVISED_CONTAINER_CRASHED, "b": RUNNING}, HOSTS, 2e12, True),
    ({"a": RUNNING, "b": RUNNING}, ["a"], 2e12, True),           # b left the play
    ({"a": RUNNING, "b": RUNNING}, HOSTS, 1000, True),           # past the deadline
    ({"a": {"skipped": True, "finished": 1}, "b": DONE}, HOSTS, 2e12, False),
], ids=["all-done", "one-running", "one-crashed", "container-crashed", "killed-at-limit",
        "supervised-container-crashed", "host-gone", "deadline", "skipped-is-not-done"])
def test_round_over(polls, active, deadline, over):
    assert round_over(HOSTS, polls, active, deadline, now_ms=1_800_000_000_000) is over


def test_node_outcomes():
    assert node_outcome(DONE) == {"rc": 0, "timed_out": False, "stopped": False, "output": "ok"}
    assert node_outcome(CRASHED)["rc"] == 3
    assert node_outcome(CONTAINER_CRASHED)["rc"] == 2
    assert node_outcome(SUPERVISED_CONTAINER_CRASHED)["rc"] == 2
    assert node_outcome(SUPERVISED_MODULE_FAILED)["rc"] == 1
    assert node_outcome({**SUPERVISED_CONTAINER_CRASHED, "result": {"status": 0}})["rc"] == 0
    killed = node_outcome(KILLED_AT_LIMIT)
    assert killed["timed_out"] and killed["rc"] is None and not killed["stopped"]
    stopped = node_outcome(RUNNING)
    assert stopped["stopped"] and stopped["rc"] is None and not stopped["timed_out"]
    assert node_outcome(RUNNING, deadline_passed=True)["timed_out"]
    assert node_outcome({})["stopped"]                     # never started (an earlier task failed)


def test_round_status_names_the_failed_node_first_then_the_stopped_ones():
    hosts = [{"host": "a", "rc": None, "timed_out": False, "stopped": True},
             {"host": "b", "rc": 3, "timed_out": False}]
    assert round_status(hosts, None) == ("failed", "launch failed on b (exit 3); stopped a")
    lost = [{"host": "a", "rc": None, "stopped": True}, {"host": "b", "rc": None, "lost": True}]
    assert round_status(lost, None) == ("failed", "host lost during the round: b")
    timed_out = [{"host": "a", "rc": None, "timed_out": True}]
    assert round_status(timed_out, None)[0] == "timeout"
    assert round_status(hosts, None, interrupted=True)[0] == "interrupted"
