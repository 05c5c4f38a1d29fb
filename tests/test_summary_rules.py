"""Case pass rule, statistics and MFU on rounds the real driver wrote, through finalize_round."""

import json

import pytest

from flagperf_ansible.results import build_summary, write_summary
from run_outputs import CASE, make_run


def test_one_non_converged_round_of_five_passes_the_case(tmp_path):
    make_run(tmp_path, [10, 10, 10, 10, 10], converged=[True, True, False, True, True])
    summary = build_summary(tmp_path)
    case = summary["cases"][0]
    assert [r["status"] for r in case["rounds"]].count("failed") == 1
    assert case["status"] == "passed" and summary["status"] == "passed"
    assert case["rounds_converged"] == 4 and case["rounds_ran_to_finish"] == 5
    assert "MLPerf" in case["pass_rule"]
    assert case["stats"]["p_whole"]["n"] == 4          # statistics over converged rounds


def test_two_non_converged_rounds_fail_the_case(tmp_path):
    make_run(tmp_path, [10] * 5, converged=[True, False, False, True, True])
    assert build_summary(tmp_path)["status"] == "failed"


def test_a_crashed_round_is_not_forgiven(tmp_path):
    make_run(tmp_path, [10] * 5, rcs=[0, 0, 1, 0, 0])
    case = build_summary(tmp_path)["cases"][0]
    assert case["status"] == "failed" and case["rounds_ran_to_finish"] == 4


def test_fewer_than_five_rounds_need_all_converged(tmp_path):
    make_run(tmp_path, [10, 10, 10], converged=[True, False, True])
    assert build_summary(tmp_path)["status"] == "failed"


def test_statistics_of_every_numeric_figure(tmp_path):
    seconds = [10.0, 8.0, 12.5, 9.0, 11.0]
    make_run(tmp_path, seconds)
    stats = build_summary(tmp_path)["cases"][0]["stats"]
    p_whole = sorted(1000 / s for s in seconds)
    assert stats["p_whole"]["olympic_mean"] == pytest.approx(sum(p_whole[1:-1]) / 3)
    assert stats["raw_train_time"]["mean"] == pytest.approx(sum(seconds) / 5)
    assert {"e2e_time", "p_train", "p_core", "final_acc1", "num_trained_samples"} <= set(stats)
    assert "converged" not in stats                     # booleans are not figures


def test_mfu_is_computed_when_both_sides_are_declared(tmp_path):
    basis = {"flops_per_sample": 2.0e9, "flops_source": "declared", "precision": "bf16",
             "peak_flops_per_device": 1.0e12, "peak_source": "datasheet", "devices": 2,
             "throughput": "p_train", "reason": ""}
    make_run(tmp_path, [10.0, 10.0], mfu_basis=basis)
    document = json.loads((tmp_path / f"{CASE}/round1/round.json").read_text())
    p_train = document["finished"]["p_train"]
    assert document["mfu"]["value"] == pytest.approx(p_train * 2.0e9 / 2.0e12)
    assert document["mfu"]["computed_by"] == "controller"
    summary = write_summary(tmp_path)
    assert summary["cases"][0]["stats"]["mfu"]["mean"] == pytest.approx(p_train * 1e-3)
    assert "MFU = p_train x 2e+09 FLOPs/sample (declared)" in (tmp_path / "summary.md").read_text()


def test_mfu_is_absent_without_a_peak(tmp_path):
    basis = {"flops_per_sample": 2.0e9, "flops_source": "declared", "precision": "fp32",
             "peak_flops_per_device": None, "peak_source": None, "devices": 1,
             "throughput": "p_train", "reason": "the vendor declares no fp32 peak for cpu"}
    make_run(tmp_path, [10.0], mfu_basis=basis)
    summary = write_summary(tmp_path)
    assert summary["cases"][0]["rounds"][0]["mfu"]["value"] is None
    assert "mfu" not in summary["cases"][0]["stats"]
    assert "no fp32 peak for cpu" in (tmp_path / "summary.md").read_text()
