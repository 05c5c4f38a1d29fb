"""How each node of a round ended, from flagperf_host.node_job's wait (a case, or a docker_container module
run's result) and from async_status-shaped results; what a round's nodes tell each other on the
controller (RoundBoard); a round's status and who is to blame."""

import pytest

from flagperf_ansible.results.rounds import round_status
from filter_plugins_loader import load_plugin
from flagperf_ansible.run.round_wait import RoundBoard, job_status, node_outcome

RUNNING = {"started": 1, "finished": 0, "ansible_job_id": "j1"}
DONE = {"finished": 1, "rc": 0, "stdout": "ok"}
CRASHED = {"finished": 1, "rc": 3, "failed": True, "stderr": "boom"}
CONTAINER_CRASHED = {"finished": 1, "status": 2, "failed": True, "container": {"Output": "x"}}
KILLED_AT_LIMIT = {"finished": 1, "failed": True, "msg": "Timeout exceeded", "child_pid": 42}
# flagperf_host.node_job wait on a docker_container module run (--result): the module exits 0 whatever
# the container's status; a module that failed before the container ran exits 1, no status.
SUPERVISED_CONTAINER_CRASHED = {"finished": 1, "rc": 0, "timed_out": False, "msg": "",
                                "result": {"failed": True, "status": 2, "container": {"Output": "x"}}}
SUPERVISED_MODULE_FAILED = {"finished": 1, "rc": 1, "timed_out": False, "msg": "",
                            "result": {"failed": True, "msg": "Error creating container"}}


def test_the_board_tells_a_node_of_a_peer_that_failed_or_was_lost(tmp_path):
    board = RoundBoard(tmp_path, "sleep-pytorch-cpux2x1/round1@1700000000000")
    assert board.stopping_peer("a") is None                    # nothing said yet
    board.publish("a", "ended")
    assert board.stopping_peer("b") is None                    # a peer that ended is no reason
    board.publish("b", "failed")
    assert board.stopping_peer("a") == "b"
    assert board.stopping_peer("b") is None                    # its own failure is not a peer's
    lost = RoundBoard(tmp_path, "other/round1@1")
    lost.publish("c", "lost")
    assert lost.stopping_peer("a") == "c"
    # Another start of the same round (a retry) reads a board of its own.
    assert RoundBoard(tmp_path, "sleep-pytorch-cpux2x1/round1@1700000009999").stopping_peer("a") is None
    with pytest.raises(ValueError):
        board.publish("a", "bored")


def test_a_node_wait_result_is_read_as_its_node():
    waited = {"changed": False, "node": CRASHED, "slices": 7, "stopped_by": None}
    assert job_status(waited) == CRASHED
    assert node_outcome(waited)["rc"] == 3


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


def test_an_orchestration_error_fails_the_round_with_its_words_never_as_interrupted():
    hosts = [{"host": "a", "rc": None, "stopped": True, "error": ""},
             {"host": "b", "rc": None, "stopped": True,
              "error": "Start the system monitor and the node's case: python3: not found"}]
    status, reason = round_status(hosts, None)
    assert status == "failed"
    assert reason == ("orchestration error on b: Start the system monitor and the node's case: "
                      "python3: not found")
    # An error that stopped the whole run mid-round comes before an interrupt's word.
    assert round_status([], None, interrupted=False, error="maximum recursion depth exceeded") == (
        "failed", "orchestration error: maximum recursion depth exceeded")


def test_the_progress_line_says_where_rank_0_is_and_how_long_at_most_is_left():
    module = load_plugin("plugins/action/node_wait.py")
    line = module.progress_line
    assert line({}, 12, 8) == ""                              # no epoch or step written yet
    assert line({"event": "STEP_END", "global_steps": 7}, 12, None) == "step 7; 12 s in"
    # Epoch 3 evaluated after 90 s: 30 s an epoch, 5 of 8 planned epochs left.
    evaluated = {"event": "EVALUATE", "epoch": 3, "global_steps": 132,
                 "metrics": {"acc1": 49.444}}
    assert line(evaluated, 90, 8) == ("epoch 3/8, step 132, acc1 49.44; 1 min 30 s in, at most "
                                      "2 min 30 s left")
    # Inside epoch 4: three finished, the same estimate.
    assert line({**evaluated, "event": "STEP_END", "epoch": 4}, 90, 8).endswith(
        "at most 2 min 30 s left")
    assert module.planned_epochs({"config": {"epochs": 8}}) == 8
    assert module.planned_epochs({"config": {"max_steps": 100}}) is None


def test_the_wrapper_puts_the_progress_on_its_bar():
    import io

    from rich.console import Console
    from rich.progress import Progress

    from flagperf_ansible.run.runner import Wrapper

    wrapper = Wrapper(None, Console(file=io.StringIO()))
    with Progress(console=wrapper.console) as progress:
        wrapper._progress, wrapper._task = progress, progress.add_task("x", total=1)
        wrapper._label = "resnet50-pytorch-cpux1x1 round 1/1"
        wrapper._on_event({"event": "verbose",
                           "stdout": "flagperf-progress: node1: epoch 3/8, step 132; 1 min in"})
        shown = progress.tasks[0].description
    assert shown == "resnet50-pytorch-cpux1x1 round 1/1: node1: epoch 3/8, step 132; 1 min in"


# A Slurm job's report (flagperf_host.slurm_job): each node's record (flagperf_host.slurm_node).
def slurm_report(state, *records, **job):
    return {"job_id": "42", "state": state, "finished": 1, "started_ms": 1000, "ended_ms": 5000,
            "submitted_ms": 400, "queued_s": 0.6, "partition": "bench", "nodes": list(records), **job}


def test_a_slurm_rounds_hosts_are_its_nodes_and_how_each_ended():
    from flagperf_ansible.run.round_wait import slurm_job_record, slurm_round_error, slurm_round_hosts

    failed = {"noderank": 1, "host": "n2", "node": {"finished": 1, "rc": 3}, "stopped": False}
    # Stopped by srun's --kill-on-bad-exit: SIGTERM reached its case too (no exit of its own).
    stopped = {"noderank": 0, "host": "n1", "node": {"finished": 1, "rc": None}, "stopped": True,
               "errors": ["flagperf_host.node_job exited 1: ..."]}
    rows = slurm_round_hosts(slurm_report("FAILED", stopped, failed))
    assert [(r["host"], r["noderank"], r["rc"], r["stopped"], r["lost"], r["error"]) for r in rows] == [
        ("n1", 0, None, True, False, ""), ("n2", 1, 3, False, False, "")]
    assert round_status(rows, None) == ("failed", "launch failed on n2 (exit 3); stopped n1")
    # A case killed by the signal (rc -15) is stopped, not a failure of its own.
    signalled = {**stopped, "node": {"finished": 1, "rc": -15}}
    assert slurm_round_hosts(slurm_report("CANCELLED", signalled))[0]["stopped"] is True
    # So is one whose launcher exits 1 on the signal it got with the node (torchrun).
    (launcher,) = slurm_round_hosts(slurm_report("NODE_FAIL", {**stopped, "node": {
        "finished": 1, "rc": 1}}))
    assert (launcher["rc"], launcher["stopped"]) == (None, True)
    # The job's time limit (or the round's deadline) ended it: the stopped nodes timed out.
    (timed_out,) = slurm_round_hosts(slurm_report("TIMEOUT", stopped))
    assert timed_out["timed_out"] is True and timed_out["stopped"] is False
    # A node that left no end record: lost, named.
    gone = {"noderank": 1, "host": "n2", "lost": True}
    rows = slurm_round_hosts(slurm_report("NODE_FAIL", stopped, gone))
    assert round_status(rows, None) == ("failed", "host lost during the round: n2")
    # A start step that failed on a node is an orchestration error there.
    broken = {"noderank": 0, "host": "n1", "node": {"finished": 1, "rc": None}, "stopped": False,
              "errors": ["flagperf_host.sys_monitor exited 2: psutil is not installed"]}
    assert round_status(slurm_round_hosts(slurm_report("FAILED", broken)), None)[1] == (
        "orchestration error on n1: flagperf_host.sys_monitor exited 2: psutil is not installed")
    record = slurm_job_record(slurm_report("COMPLETED", failed, stopped))
    assert record["nodes"] == ["n1", "n2"] and record["queued_s"] == 0.6
    assert slurm_round_error(slurm_report("COMPLETED", failed)) == ""
    # The batch step failed before any node started (a Python missing on the nodes).
    assert "before any node started" in slurm_round_error(slurm_report("FAILED", exit_code="127:0"))
