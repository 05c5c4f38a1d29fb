"""compare: change in %, Welch's t-test, directions from the case contract (by name only for
FlagPerf's folders), the tolerance, profiles kept apart, and run folders left untouched."""

import hashlib
import json
import subprocess
import sys

import pytest
from scipy import stats as scipy_stats

from flagperf_ansible.results.compare import compare_runs
from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.flagperf_import import figure_direction
from flagperf_ansible.results.summary import build_summary
from run_outputs import CASE, CPU_PROFILE, FLAGPERF_CASE, INFERENCE, flagperf_log, make_run, \
    make_suite_run

BASE = [10.0, 10.2, 9.9, 10.1, 10.0]


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "flagperf_ansible", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("figure, sign", [
    ("p_whole", 1), ("training_sequences_per_second", 1), ("mfu", 1), ("e2e_time", -1),
    ("raw_train_time", -1), ("final_acc1", 1), ("final_mlm_accuracy", 1), ("final_map", 1),
    ("final_loss", -1), ("final_wer", -1), ("final_perplexity", -1), ("latency_p99", -1),
    ("target_acc1", 0), ("num_trained_samples", 0), ("final_something", 0),
    ("something_else", 0),
])
def test_figure_names_of_flagperf_logs(figure, sign):
    assert figure_direction(figure) == sign


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


def test_one_round_gets_the_tolerance_verdict_unconfirmed(tmp_path, project):
    make_run(tmp_path / "a", [10.0])
    make_run(tmp_path / "b", [20.0])                            # half the throughput
    make_run(tmp_path / "c", [10.2])                            # 2 % less
    result = compare_runs(tmp_path / "a", tmp_path / "b")
    rows = {r["figure"]: r for r in result["rows"]}
    assert rows["p_whole"]["p_value"] is None and rows["p_whole"]["confirmed"] is False
    assert rows["p_whole"]["verdict"] == "regression"
    assert result["regressions"] == 0 and result["unconfirmed_regressions"] >= 1
    rows = {r["figure"]: r for r in compare_runs(tmp_path / "a", tmp_path / "c")["rows"]}
    assert rows["p_whole"]["verdict"] == "within tolerance"
    done = run("compare", tmp_path / "a", tmp_path / "b", "--markdown", tmp_path / "c.md",
               "--html", tmp_path / "c.html", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr      # unconfirmed: no failure
    assert "regression (unconfirmed)" in done.stdout
    assert "0 regression(s) beyond 5 %" in done.stdout and "more unconfirmed" in done.stdout
    markdown = (tmp_path / "c.md").read_text()
    assert "| p_whole |" in markdown and "regression (unconfirmed)" in markdown
    assert "regression (unconfirmed)" in (tmp_path / "c.html").read_text()


def test_the_answer_counts_figures_and_lists_cases_only_one_run_has(tmp_path, project):
    make_run(tmp_path / "a", BASE)
    make_run(tmp_path / "b2", BASE)
    # A third run with the case and one more, as its summary.json says.
    summary = build_summary(tmp_path / "a")
    other = {**summary["cases"][0], "case_id": "other-pytorch-cpux1x1"}
    (tmp_path / "b3").mkdir()
    (tmp_path / "b3" / "summary.json").write_text(
        json.dumps({**summary, "cases": summary["cases"] + [other]}))
    result = compare_runs(tmp_path / "a", tmp_path / "b3")
    assert result["only_in_a"] == [] and result["only_in_b"] == ["other-pytorch-cpux1x1"]
    assert compare_runs(tmp_path / "b3", tmp_path / "a")["only_in_a"] == ["other-pytorch-cpux1x1"]
    done = run("compare", tmp_path / "a", tmp_path / "b3", "--json", tmp_path / "c.json",
               cwd=project)
    assert "only in B (1): other-pytorch-cpux1x1" in done.stdout, done.stdout
    assert json.loads((tmp_path / "c.json").read_text())["only_in_b"] == ["other-pytorch-cpux1x1"]

    result = compare_runs(tmp_path / "a", tmp_path / "b2")
    assert result["only_in_a"] == result["only_in_b"] == []
    assert result["judged"] == sum(r["direction"] != 0 for r in result["rows"]) > 0
    assert result["not_judged"] >= 1                            # target_acc1
    assert result["counts"].get("not significant", 0) == result["judged"]
    done = run("compare", tmp_path / "a", tmp_path / "b2", cwd=project)
    # Nothing changed: no table of rows, the counts say what was judged.
    assert done.returncode == 0 and ": 100 -> " not in done.stdout, done.stdout
    assert f"{result['judged']} figure(s) judged: {result['judged']} not significant" \
        in done.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path, project):
    make_run(tmp_path / "a", BASE)
    for args in (("compare", tmp_path / "a", tmp_path / "nope"),
                 ("compare", tmp_path / "a", tmp_path / "a", "--tolerance", -1),
                 ("summarize", tmp_path)):
        done = run(*args, cwd=project)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def wer_run(folder, wers, profile=None):
    """An inference case of 5 rounds with these word error rates (lower is better)."""
    return make_suite_run(folder, INFERENCE, [
        {"e2e_time": 10.0, "p_inference_whole": 50.0 + i, "p_inference_core": 80.0 + i,
         "num_queries": 500,
         "final_wer": wer, "target_wer": 12.0, "warmup_time": wer / 4}
        for i, wer in enumerate(wers)], profile)


def test_a_lower_is_better_metric_is_judged_from_the_contract(tmp_path):
    wer_run(tmp_path / "a", [8.0, 8.1, 7.9, 8.05, 7.95])
    wer_run(tmp_path / "b", [10.0, 10.1, 9.9, 10.05, 9.95])      # the error rate rose 25 %
    wer_run(tmp_path / "c", [6.0, 6.1, 5.9, 6.05, 5.95])         # ...or fell 25 %
    worse = {r["figure"]: r for r in compare_runs(tmp_path / "a", tmp_path / "b")["rows"]}
    assert worse["final_wer"]["direction"] == -1 and worse["final_wer"]["unit"] == "%"
    assert worse["final_wer"]["verdict"] == "regression"
    better = {r["figure"]: r for r in compare_runs(tmp_path / "a", tmp_path / "c")["rows"]}
    assert better["final_wer"]["verdict"] == "improvement"
    # Figures the inference case does not declare are shown, not judged: no guess by name.
    assert worse["num_queries"]["verdict"] == worse["warmup_time"]["verdict"] == "not judged"
    assert figure_direction("warmup_time") == -1        # what a guess by name would have said
    assert worse["p_inference_core"]["unit"] == "queries/s"


def test_a_profile_is_never_compared_with_the_standard_configuration(tmp_path, project):
    make_run(tmp_path / "cpu", BASE, profile=CPU_PROFILE)
    make_run(tmp_path / "standard", BASE)
    with pytest.raises(ConfigError, match="A ran profile cpu, B ran the standard configuration"):
        compare_runs(tmp_path / "cpu", tmp_path / "standard")
    done = run("compare", tmp_path / "standard", tmp_path / "cpu", cwd=project)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "not comparable: A ran the standard configuration, B ran profile cpu" in done.stderr
    # The same profile on both sides compares, and says which profile it is.
    make_run(tmp_path / "cpu2", BASE, profile=CPU_PROFILE)
    result = compare_runs(tmp_path / "cpu", tmp_path / "cpu2")
    assert result["cases"][0]["comparable"] and result["rows"]
    assert result["cases"][0]["profile"] == ("profile: cpu, not the standard configuration "
                                             "(reduced: image size, data set, epochs)")
    done = run("compare", tmp_path / "cpu", tmp_path / "cpu2", "--all", cwd=project)
    assert done.returncode == 0 and "profile: cpu, not the standard configuration" in done.stdout
    # Each row says its case ran the profile.
    assert f"{CASE} (profile cpu) p_whole: " in done.stdout.replace("\n", " "), done.stdout


def snapshot(folder):
    """Every file under ``folder`` with its content's hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_compare_leaves_both_run_folders_byte_identical(tmp_path, project):
    flagperf = tmp_path / "flagperf"
    for number, rate in ((1, 2810.5), (2, 2795.0), (3, 2831.25)):
        flagperf_log(flagperf / FLAGPERF_CASE / f"round{number}" / "10.1.2.2_noderank0"
                     / "rank0.out.log", 0, rate, 0.7215)
    ours = make_run(tmp_path / "ours", BASE)                    # round.json files, no summary
    before = {"flagperf": snapshot(flagperf), "ours": snapshot(ours)}
    assert not (ours / "summary.json").exists()
    done = run("compare", flagperf, flagperf, "--json", tmp_path / "c.json", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["figure"]: r for r in json.loads((tmp_path / "c.json").read_text())["rows"]}
    assert rows["final_mlm_accuracy"]["direction"] == 1 and rows["final_loss"]["direction"] == -1
    compare_runs(ours, ours)
    assert {"flagperf": snapshot(flagperf), "ours": snapshot(ours)} == before
