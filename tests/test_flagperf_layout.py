"""`summarize DIR` on a FlagPerf results folder: <case>/round<k>/<ip>_noderank<i>/rank<R>.out.log."""

import json
import subprocess
import sys

import jsonschema
import pytest

from run_outputs import FLAGPERF_CASE as CASE, flagperf_log


def test_summarize_a_flagperf_results_folder(tmp_path, project):
    rates = {1: 2810.5, 2: 2795.0, 3: 2831.25}
    for number, rate in rates.items():
        for node in (0, 1):
            flagperf_log(tmp_path / CASE / f"round{number}" / f"10.1.2.{node + 2}_noderank{node}"
                         / f"rank{node * 8}.out.log", node * 8, rate, 0.7215)
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "summarize", str(tmp_path)],
                          capture_output=True, text=True, cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    jsonschema.validate(summary, json.loads((project / "schemas/summary.schema.json").read_text()))
    assert summary["source"] == "flagperf" and summary["status"] == "passed"
    (case,) = summary["cases"]
    assert case["case_id"] == CASE and case["metric"] == "mlm_accuracy"
    stats = case["stats"]
    assert stats["p_whole"]["mean"] == pytest.approx(sum(rates.values()) / 3)  # alias mapped
    assert stats["training_sequences_per_second"]["n"] == 3              # original key kept
    assert stats["final_mlm_accuracy"]["mean"] == pytest.approx(0.7215)
    assert [n["dir"] for n in case["rounds"][0]["nodes"]] == ["10.1.2.2_noderank0",
                                                              "10.1.2.3_noderank1"]
    assert (tmp_path / "summary.md").is_file() and (tmp_path / "summary.html").is_file()
    # Read in memory: only the summaries are written into FlagPerf's folder.
    assert not list(tmp_path.glob("*/round*/*.json"))
    # FlagPerf's table is training; its rounds carry no contract, judged by name.
    assert (case["suite"], case["contract"], case["profile"]) == ("training", None, None)
    assert case["figures"]["final_mlm_accuracy"]["direction"] == 1
    assert "bert:pytorch_1.8:A100:1:8:1: passed" in done.stdout


def test_a_flagperf_round_that_did_not_converge_fails_the_case(tmp_path, project):
    for number in (1, 2):
        flagperf_log(tmp_path / CASE / f"round{number}" / "10.1.2.2_noderank0" / "rank0.out.log",
                     0, 2800.0, 0.70, converged=number == 1)
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "summarize", str(tmp_path)],
                          capture_output=True, text=True, cwd=project)
    assert done.returncode == 1
    case = json.loads((tmp_path / "summary.json").read_text())["cases"][0]
    assert [r["status"] for r in case["rounds"]] == ["passed", "failed"]
