"""round.json and summary files from real rank logs written by the driver."""

import io
import json

import pytest

from driver import perflog
from driver.finished import RoundClock
from flagperf_ansible.results.layout import keep_attempt, write_run
from flagperf_ansible.results.rounds import finalize_round, refinalize_round, reparse_rounds, round_status
from flagperf_ansible.results.report import write_summary
from flagperf_ansible.results.summary import build_summary
from run_outputs import CASE, CPU_PROFILE, TRAINING, emit_round, finalize, make_run, \
    write_planned_run


def write_rank_log(node_dir, rank, converged=True, finish=True, p_whole=100.0):
    node_dir.mkdir(parents=True, exist_ok=True)
    stream = io.StringIO()
    log = perflog.PerfLogger(rank=rank, stream=stream)
    log.log(perflog.INIT_START)
    log.log(perflog.TRAIN_START)
    if finish:
        log.log(perflog.FINISHED, {"e2e_time": 10.0, "p_whole": p_whole, "p_core": 2 * p_whole,
                                   "converged": converged, "final_acc1": 93.0,
                                   "target_acc1": 90.0})
    (node_dir / f"rank{rank}.out.log").write_text(stream.getvalue())


def record(run_dir, number, rc=0, timed_out=False, **extra):
    return {"run_dir": str(run_dir), "key": f"c-pytorch-cpux1x1/round{number}",
            "case_id": "c-pytorch-cpux1x1", "round": number, "metric": "acc1",
            "hosts": [{"host": "h1", "noderank": 0, "rc": rc, "timed_out": timed_out}],
            "config": {"lr": 0.1}, "overrides": {}, "started_ms": 1000, "ended_ms": 31000, **extra}


@pytest.mark.parametrize("hosts, finished, expected", [
    ([{"host": "a", "rc": 0}], {"converged": True}, "passed"),
    ([{"host": "a", "rc": 0}], {"converged": False}, "failed"),
    ([{"host": "a", "rc": 0}], None, "failed"),
    ([{"host": "a", "rc": 0}, {"host": "b", "rc": 1}], {"converged": True}, "failed"),
    ([{"host": "a", "rc": None}], {"converged": True}, "failed"),
    ([{"host": "a", "rc": None, "timed_out": True}], None, "timeout"),
])
def test_round_status(hosts, finished, expected):
    status, reason = round_status(hosts, finished)
    assert status == expected
    assert (reason == "") == (expected == "passed")


def test_interrupted_round_is_marked():
    assert round_status([{"host": "a", "rc": 0}], {"converged": True}, interrupted=True)[0] \
        == "interrupted"


def test_finalize_round_writes_round_json(tmp_path):
    write_rank_log(tmp_path / "c-pytorch-cpux1x1/round1/h1_noderank0", 0)
    write_rank_log(tmp_path / "c-pytorch-cpux1x1/round1/h1_noderank0", 1, p_whole=90.0)
    document = finalize_round(record(tmp_path, 1))
    on_disk = json.loads((tmp_path / "c-pytorch-cpux1x1/round1/round.json").read_text())
    assert on_disk == document
    assert document["status"] == "passed" and document["converged"] is True
    # No plan here: judged as a training round by its converged claim, no contract, no profile.
    assert (document["suite"], document["passed"], document["contract"], document["profile"]) \
        == ("training", True, None, None)
    assert document["finished"]["p_whole"] == 100.0           # rank 0 speaks for the round
    assert document["ranks"]["1"]["p_whole"] == 90.0
    assert document["wall_time"] == 30.0
    assert document["nodes"][0]["files"] == ["rank0.out.log", "rank1.out.log"]
    assert document["config"] == {"lr": 0.1}


def test_crashed_rank_gives_a_failed_round_that_keeps_its_logs(tmp_path):
    node = tmp_path / "c-pytorch-cpux1x1/round1/h1_noderank0"
    write_rank_log(node, 0, finish=False)
    document = finalize_round(record(tmp_path, 1, rc=1))
    assert document["status"] == "failed" and "h1 (exit 1)" in document["reason"]
    assert document["failed_hosts"] == ["h1"]
    assert (node / "rank0.out.log").is_file()


def test_summary_over_rounds(tmp_path):
    plan = {"vendor": "cpu", "runtime": "none", "cases": [
        {"case_id": "c-pytorch-cpux1x1", "metric": "acc1", "diagnostic": False,
         "spec": {"repeat": 3}}]}
    write_run(tmp_path, plan, {})
    for number, p_whole in ((1, 100.0), (2, 110.0)):
        write_rank_log(tmp_path / f"c-pytorch-cpux1x1/round{number}/h1_noderank0", 0,
                       p_whole=p_whole)
        finalize_round(record(tmp_path, number))
    summary = build_summary(tmp_path)
    case = summary["cases"][0]
    assert case["missing_rounds"] == [3]                     # planned but never ran
    assert summary["status"] == "failed" and case["status"] == "failed"
    assert case["stats"]["p_whole"] == pytest.approx(
        {"n": 2, "mean": 105.0, "std": 7.0710678, "cv": 7.0710678 / 105.0, "min": 100.0,
         "max": 110.0, "olympic_mean": None})

    write_rank_log(tmp_path / "c-pytorch-cpux1x1/round3/h1_noderank0", 0, p_whole=105.0)
    finalize_round(record(tmp_path, 3))
    summary = write_summary(tmp_path)
    assert summary["status"] == "passed"
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    markdown = (tmp_path / "summary.md").read_text()
    # No contract: the metric by name, the training suite's figures in samples/s.
    assert ("| round | status | final_acc1 | p_whole samples/s | p_train samples/s | "
            "p_core samples/s | MFU | train s | e2e s |") in markdown
    assert "| 3 | passed | 93 | 105 | - | 210 | - | - | 10 |" in markdown
    assert "| mean |  | 93 | 105 | - | 210 | - | - | 10 |" in markdown


def test_round_clock_figures():
    clock = RoundClock()
    clock.train_start, clock.train_end = 100.0, 110.0
    clock.eval_time, clock.compute_time = 2.0, 5.0
    figures = clock.finished(400, True, final_acc1=91.0)
    assert figures["raw_train_time"] == 10.0 and figures["train_no_eval_time"] == 8.0
    assert (figures["p_whole"], figures["p_train"], figures["p_core"]) == (40.0, 50.0, 80.0)
    assert figures["converged"] is True and figures["final_acc1"] == 91.0


def test_round_json_records_the_plans_suite_contract_and_profile(tmp_path):
    write_planned_run(tmp_path, 2, TRAINING, CPU_PROFILE)
    emit_round(tmp_path / f"{CASE}/round1/h1_noderank0")
    # Claims converged, but its final_acc1 is below its target: the contract's rule decides.
    emit_round(tmp_path / f"{CASE}/round2/h1_noderank0", extra={"final_acc1": 80.0})
    first, second = finalize(tmp_path, 1), finalize(tmp_path, 2)
    assert (first["suite"], first["profile"], first["contract"]) == ("training", CPU_PROFILE,
                                                                     TRAINING)
    assert first["passed"] and first["monitor"]["window"]["events"] == ["TRAIN_START",
                                                                        "TRAIN_END"]
    assert (second["status"], second["passed"], second["converged"]) == ("failed", False, True)
    assert "final_acc1 80.0 is not >= its target" in second["reason"]
    record = json.loads((tmp_path / f"{CASE}/round1/round_record.json").read_text())
    assert record["contract"] == TRAINING and record["profile"] == CPU_PROFILE
    # Parsed again without the plan, the round keeps what its record says.
    (tmp_path / "plan.json").unlink()
    assert reparse_rounds(tmp_path) == 0                    # no round_start.json: none to redo
    assert refinalize_round(tmp_path / f"{CASE}/round1")["profile"] == CPU_PROFILE


def test_summarize_parses_rounds_again_from_raw_artifacts(tmp_path):
    run_dir = make_run(tmp_path / "run", [10.0, 12.0], rcs=[0, 1])
    first = json.loads((run_dir / CASE / "round1/round.json").read_text())
    (run_dir / CASE / "round1/round.json").unlink()
    (run_dir / CASE / "round1/round_start.json").write_text('{"started_ms": 1000}')
    (run_dir / CASE / "round2/round_start.json").write_text('{"started_ms": 1000}')
    # A round cut off before anything was handed over: only its start is known.
    (run_dir / CASE / "round3").mkdir()
    (run_dir / CASE / "round3/round_start.json").write_text('{"started_ms": 1000}')
    assert reparse_rounds(run_dir) == 3
    again = json.loads((run_dir / CASE / "round1/round.json").read_text())
    assert again["finished"] == first["finished"] and again["status"] == "passed"
    assert json.loads((run_dir / CASE / "round3/round.json").read_text())["status"] == "interrupted"

    # The failed round 2 is kept as attempt 1 before it runs again.
    assert keep_attempt(run_dir, f"{CASE}/round2") == 1
    assert not (run_dir / CASE / "round2/round.json").exists()
    assert (run_dir / CASE / "round2/attempts/1/round.json").is_file()
    summary = write_summary(run_dir, reparse=True)
    assert [r["round"] for r in summary["cases"][0]["rounds"]] == [1, 3]
