"""compare: change in %, Welch's t-test, the direction table and the tolerance."""

import json
import subprocess
import sys

import pytest
from scipy import stats as scipy_stats

from flagperf_ansible.compare import compare_runs, direction
from run_outputs import make_run

BASE = [10.0, 10.2, 9.9, 10.1, 10.0]


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "flagperf_ansible", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("figure, sign", [
    ("p_whole", 1), ("training_sequences_per_second", 1), ("mfu", 1), ("e2e_time", -1),
    ("raw_train_time", -1), ("final_acc1", 1), ("final_loss", -1), ("target_acc1", 0),
    ("num_trained_samples", 0), ("something_else", 0),
])
def test_direction_table(figure, sign):
    assert direction(figure) == sign


def test_slower_run_is_a_significant_regression(tmp_path, project):
    make_run(tmp_path / "a", BASE)
    make_run(tmp_path / "b", [s * 1.2 for s in BASE])         # 20 % longer training
    result = compare_runs(tmp_path / "a", tmp_path / "b", tolerance_pct=5)
    rows = {r["figure"]: r for r in result["rows"]}
    assert rows["p_whole"]["change_pct"] == pytest.approx((1 / 1.2 - 1) * 100)
    a = [1000 / s for s in BASE]
    b = [1000 / (s * 1.2) for s in BASE]
    assert rows["p_whole"]["p_value"] == pytest.approx(
        scipy_stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert rows["p_whole"]["verdict"] == "regression"
    assert rows["raw_train_time"]["verdict"] == "regression"     # lower is better, it rose
    assert rows["target_acc1"]["verdict"] == "not judged"

    done = run("compare", tmp_path / "a", tmp_path / "b", "--tolerance", 5, cwd=project)
    assert done.returncode == 1 and "regression" in done.stdout
    done = run("compare", tmp_path / "a", tmp_path / "b", "--tolerance", 25, cwd=project)
    assert done.returncode == 0, done.stdout


def test_faster_run_is_an_improvement(tmp_path):
    make_run(tmp_path / "a", BASE)
    make_run(tmp_path / "b", [s * 0.8 for s in BASE])
    rows = {r["figure"]: r for r in compare_runs(tmp_path / "a", tmp_path / "b")["rows"]}
    assert rows["p_whole"]["verdict"] == "improvement"


def test_noise_is_not_significant(tmp_path):
    make_run(tmp_path / "a", BASE)
    make_run(tmp_path / "b", [10.1, 9.9, 10.2, 9.95, 10.05])
    rows = {r["figure"]: r for r in compare_runs(tmp_path / "a", tmp_path / "b")["rows"]}
    assert rows["p_whole"]["verdict"] == "not significant"
    assert rows["p_whole"]["p_value"] > 0.05


def test_one_round_is_too_few_to_judge(tmp_path):
    make_run(tmp_path / "a", [10.0])
    make_run(tmp_path / "b", [20.0])
    rows = {r["figure"]: r for r in compare_runs(tmp_path / "a", tmp_path / "b")["rows"]}
    assert rows["p_whole"]["verdict"] == "too few rounds" and rows["p_whole"]["p_value"] is None


def test_bad_input_is_one_line_and_exit_2(tmp_path, project):
    make_run(tmp_path / "a", BASE)
    for args in (("compare", tmp_path / "a", tmp_path / "nope"),
                 ("compare", tmp_path / "a", tmp_path / "a", "--tolerance", -1),
                 ("summarize", tmp_path)):
        done = run(*args, cwd=project)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
