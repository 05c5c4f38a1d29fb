"""Case pass rule by suite, statistics, MFU, report columns and profile labels on rounds the
real driver wrote, through finalize_round."""

import io
import json

import pytest
from rich.console import Console

from flagperf_ansible.results.report import case_table, fmt, print_summary
from flagperf_ansible.results.report import write_summary
from flagperf_ansible.results.layout import mark_interrupted
from flagperf_ansible.results.summary import build_summary
from filter_plugins_loader import load_plugin
from run_outputs import BASE, CASE, CPU_PROFILE, INFERENCE, TRAINING, make_run, make_suite_run

PROFILE_LABEL = ("profile: cpu, not the standard configuration "
                 "(reduced: image size, data set, epochs)")


def inference(wer, **extra):
    return {"e2e_time": 10.0, "p_inference_whole": 50.0, "p_inference_core": 80.0, "num_queries": 500,
            "final_wer": wer, "target_wer": 12.0, **extra}


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


def test_an_interrupted_run_calls_the_cases_it_cut_short_interrupted(tmp_path):
    # Three rounds planned, two ran and passed, then Ctrl-C.
    make_run(tmp_path, [10, 10, 10])
    (tmp_path / CASE / "round3" / "round.json").unlink()
    summary = build_summary(tmp_path)
    assert summary["status"] == summary["cases"][0]["status"] == "failed"     # no mark: missing
    mark_interrupted(tmp_path, "prepare")
    mark_interrupted(tmp_path, "report")                   # the first mark stays
    summary = build_summary(tmp_path)
    case = summary["cases"][0]
    assert summary["status"] == case["status"] == "interrupted" and case["missing_rounds"] == [3]
    assert json.loads((tmp_path / "interrupted.json").read_text())["phase"] == "prepare"
    print_summary(summary, Console(record=True, width=200))


def test_a_case_that_failed_before_the_interrupt_stays_failed(tmp_path):
    make_run(tmp_path, [10, 10, 10], rcs=[0, 1, 0])
    (tmp_path / CASE / "round3" / "round.json").unlink()
    mark_interrupted(tmp_path, f"{CASE} round 3/3")
    summary = build_summary(tmp_path)
    assert summary["cases"][0]["status"] == "failed" and summary["status"] == "interrupted"


def test_an_interrupted_report_changes_no_status(tmp_path):
    # Every round ran (one failed); Ctrl-C came while the report was written.
    make_run(tmp_path, [10, 10, 10], rcs=[0, 1, 0])
    mark_interrupted(tmp_path, "report")
    summary = build_summary(tmp_path)
    assert summary["cases"][0]["status"] == summary["status"] == "failed"


def test_an_interrupt_while_the_html_is_drawn_keeps_json_and_md(tmp_path, monkeypatch):
    make_run(tmp_path, [10, 10])
    (tmp_path / "summary.html").write_text("an earlier report's")
    module = load_plugin("plugins/callback/flagperf_results.py")

    def interrupted(*_args):
        raise KeyboardInterrupt
    monkeypatch.setattr(module, "summary_html", interrupted)
    callback = module.CallbackModule()
    callback._phase = "report"
    with pytest.raises(KeyboardInterrupt):
        callback._write_summary(tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "passed"
    assert (tmp_path / "summary.md").is_file() and not (tmp_path / "summary.html").exists()
    assert json.loads((tmp_path / "interrupted.json").read_text())["phase"] == "report"
    # At exit: nothing written again (the json and md are there).
    (tmp_path / "summary.md").unlink()
    callback._at_exit()
    assert not (tmp_path / "summary.md").exists()


@pytest.mark.parametrize("wrapped", [False, True])
def test_an_interrupt_between_rounds_marks_the_run_and_writes_the_summary(tmp_path, monkeypatch,
                                                                          wrapped):
    make_run(tmp_path, [10, 10, 10])
    (tmp_path / CASE / "round3" / "round.json").unlink()
    module = load_plugin("plugins/callback/flagperf_results.py")
    if wrapped:
        monkeypatch.setenv(module.REPORT_STEP_FOLLOWS_ENV, "1")
    else:
        monkeypatch.delenv(module.REPORT_STEP_FOLLOWS_ENV, raising=False)
    callback = module.CallbackModule()
    callback._run_dir, callback._phase, callback._interrupted = tmp_path, "rounds", True
    callback._at_exit()
    assert json.loads((tmp_path / "interrupted.json").read_text())["phase"] == "between rounds"
    if wrapped:     # the wrapper's report step writes it
        assert not (tmp_path / "summary.json").exists()
    else:
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["status"] == summary["cases"][0]["status"] == "interrupted"
        assert (tmp_path / "summary.html").is_file()


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
    basis = {"flops_per_unit": 2.0e9, "flops_source": "declared", "precision": "bf16",
             "peak_flops_per_device": 1.0e12, "peak_source": "datasheet", "devices": 2,
             "throughput": "p_train", "reason": ""}
    make_run(tmp_path, [10.0, 10.0], mfu_basis=basis)
    document = json.loads((tmp_path / f"{CASE}/round1/round.json").read_text())
    p_train = document["finished"]["p_train"]
    assert document["mfu"]["value"] == pytest.approx(p_train * 2.0e9 / 2.0e12)
    assert document["mfu"]["computed_by"] == "controller"
    summary = write_summary(tmp_path)
    assert summary["cases"][0]["stats"]["mfu"]["mean"] == pytest.approx(p_train * 1e-3)
    assert "MFU = p_train x 2e+09 FLOPs per unit (declared)" in (tmp_path / "summary.md").read_text()


def test_mfu_is_absent_without_a_peak(tmp_path):
    basis = {"flops_per_unit": 2.0e9, "flops_source": "declared", "precision": "fp32",
             "peak_flops_per_device": None, "peak_source": None, "devices": 1,
             "throughput": "p_train", "reason": "the vendor declares no fp32 peak for cpu"}
    make_run(tmp_path, [10.0], mfu_basis=basis)
    summary = write_summary(tmp_path)
    assert summary["cases"][0]["rounds"][0]["mfu"]["value"] is None
    assert "mfu" not in summary["cases"][0]["stats"]
    assert "no fp32 peak for cpu" in (tmp_path / "summary.md").read_text()


def test_an_inference_round_passes_within_its_bound_and_fails_outside_it(tmp_path):
    make_suite_run(tmp_path, INFERENCE, [inference(8.5), inference(12.5), inference(12.0)])
    rounds = [json.loads((tmp_path / f"{CASE}/round{n}/round.json").read_text())
              for n in (1, 2, 3)]
    assert [(r["suite"], r["status"], r["passed"]) for r in rounds] == [
        ("inference", "passed", True), ("inference", "failed", False),
        ("inference", "passed", True)]                  # at the bound is within it (<=)
    assert rounds[1]["reason"] == "final_wer outside its bound (<= target)"
    assert rounds[0]["monitor"]["window"]["events"] == ["INFERENCE_START", "INFERENCE_END"]
    case = build_summary(tmp_path)["cases"][0]
    assert case["status"] == "failed" and case["rounds_passed"] == 2
    assert case["pass_rule"] == "every round ran, engine accuracy within its bound of the framework's"
    assert case["stats"]["final_wer"]["n"] == 2


def test_a_target_met_without_learning_fails_the_round(tmp_path):
    """A profile's baselines in FINISHED: a round converged to a target that the untrained
    model, or a predictor blind to the input, already meets is a failed round, saying which."""
    def trained(**baselines):
        return {"e2e_time": 10.0, "converged": True, "final_acc1": 91.0, "target_acc1": 90.0,
                **baselines}

    make_suite_run(tmp_path, TRAINING, [
        trained(untrained_acc1=10.3, blind_acc1=10.6), trained(untrained_acc1=90.0),
        trained(untrained_acc1=10.3, blind_acc1=92.5), trained()])
    rounds = [json.loads((tmp_path / f"{CASE}/round{n}/round.json").read_text())
              for n in (1, 2, 3, 4)]
    assert [(r["status"], r["reason"]) for r in rounds] == [
        ("passed", ""),
        ("failed", "the target is met without learning: the untrained model scores acc1 90 "
                   "(target >= 90)"),
        ("failed", "the target is met without learning: an input-blind predictor scores acc1 "
                   "92.5 (target >= 90)"),
        ("passed", "")]                    # a standard configuration scores no baselines


def test_a_further_target_must_be_met_and_learning_shown_on_one_target_at_least(tmp_path):
    """A case's ``also_targets`` (here a validation loss beside the accuracy), in effect where
    the round had it (``target_loss`` in FINISHED): the round passes only with both met, and is
    met without learning only when a baseline meets both."""
    contract = {**TRAINING,
                "metrics": {**TRAINING["metrics"],
                            "final_loss": {"direction": "lower", "unit": "nats",
                                           "description": "validation loss"}},
                "also_targets": [{"metric": "final_loss", "comparison": "<=",
                                  "config_key": "target_loss"}]}

    def trained(loss, **baselines):
        return {"e2e_time": 10.0, "converged": True, "final_acc1": 91.0, "target_acc1": 90.0,
                **({"final_loss": loss, "target_loss": 2.0} if loss is not None else {}),
                **baselines}

    make_suite_run(tmp_path, contract, [
        trained(1.5, untrained_acc1=95.0, untrained_loss=7.6, blind_acc1=50.0, blind_loss=6.4),
        trained(2.5), trained(None, untrained_acc1=95.0),
        trained(1.5, untrained_acc1=95.0, untrained_loss=1.9)])
    rounds = [json.loads((tmp_path / f"{CASE}/round{n}/round.json").read_text())
              for n in (1, 2, 3, 4)]
    assert [(r["status"], r["reason"]) for r in rounds] == [
        ("passed", ""),
        ("failed", "claims converged, but final_loss 2.5 is not <= its target"),
        # without target_loss the round had the accuracy's target alone
        ("failed", "the target is met without learning: the untrained model scores acc1 95 "
                   "(target >= 90)"),
        ("failed", "the target is met without learning: the untrained model scores acc1 95 "
                   "(target >= 90), loss 1.9 (target <= 2)")]


def test_an_inference_round_whose_outputs_were_not_compared_fails(tmp_path):
    make_suite_run(tmp_path, INFERENCE, [inference(8.5, target_output_rel_error=0.05),
                                         inference(8.5, target_output_rel_error=0.05,
                                                   output_rel_error=0.001)])
    rounds = [json.loads((tmp_path / f"{CASE}/round{n}/round.json").read_text()) for n in (1, 2)]
    assert [(r["status"], r["reason"]) for r in rounds] == [
        ("failed", "the engine's outputs could not be compared with the framework's (FINISHED "
                   "has no output_rel_error)"), ("passed", "")]


def test_an_inference_round_without_its_metric_fails(tmp_path):
    finished = inference(8.0)
    del finished["final_wer"]
    make_suite_run(tmp_path, INFERENCE, [finished])
    document = json.loads((tmp_path / f"{CASE}/round1/round.json").read_text())
    assert document["status"] == "failed" and "lacks final_wer" in document["reason"]


def test_a_base_round_missing_a_declared_metric_fails(tmp_path):
    make_suite_run(tmp_path, BASE, [{"e2e_time": 2.0, "bandwidth": 900.0, "bytes_moved": 8e9},
                                    {"e2e_time": 2.0, "bytes_moved": 8e9},
                                    None])
    case = write_summary(tmp_path)["cases"][0]
    assert [(r["status"], r["reason"]) for r in case["rounds"]] == [
        ("passed", ""),
        ("failed", "FINISHED lacks bandwidth (neither a number nor not_measured with a reason)"),
        ("failed", "rank 0 wrote no FINISHED event")]
    assert case["suite"] == "base" and case["status"] == "failed"
    header, _ = case_table(case)
    assert header == ["round", "status", "bandwidth GB/s", "e2e s"]


def test_report_columns_and_units_of_an_inference_case(tmp_path):
    make_suite_run(tmp_path, INFERENCE, [inference(8.0), inference(9.0)])
    summary = write_summary(tmp_path)
    case = summary["cases"][0]
    header, rows = case_table(case)
    assert header == ["round", "status", "final_wer %", "inference whole queries/s",
                      "inference core queries/s", "validation whole queries/s",
                      "validation core queries/s", "p50 ms", "p99 ms", "MFU", "foo_time s", "e2e s"]
    assert rows[0] == ["1", "passed", "8", "50", "80", "-", "-", "-", "-", "-", "-", "10"]
    assert case["figures"]["final_wer"] == {"direction": -1, "unit": "%",
                                            "header": "final_wer %"}
    markdown = (tmp_path / "summary.md").read_text()
    assert ("| round | status | final_wer % | inference whole queries/s | inference core "
            "queries/s |") in markdown
    assert ("Units: final_wer in %; p_inference_whole, p_inference_core, p_validation_whole, "
            "p_validation_core in queries/s; inference_latency_p50, inference_latency_p99 in ms; "
            "foo_time, e2e_time in s") in markdown
    assert "Suite: inference." in markdown and "converged" not in markdown
    assert "samples" not in markdown
    page = (tmp_path / "summary.html").read_text()
    # The throughput plot (no monitor files here: no timelines), in the case's own units.
    assert page.count('<img alt="throughput per round"') == 1 and "<img" not in page.replace(
        '<img alt="throughput per round"', "")


def test_a_profile_is_labelled_in_round_json_summaries_and_the_console(tmp_path):
    make_run(tmp_path, [10.0, 11.0], profile=CPU_PROFILE)
    assert json.loads((tmp_path / f"{CASE}/round1/round.json").read_text())["profile"] \
        == CPU_PROFILE
    summary = write_summary(tmp_path)
    assert summary["cases"][0]["profile"] == CPU_PROFILE
    for name in ("summary.md", "summary.html"):
        assert PROFILE_LABEL in (tmp_path / name).read_text(), name
    console = Console(record=True, width=300)
    print_summary(summary, console)
    text = console.export_text()
    assert f"{CASE}: passed (profile cpu);" in text
    assert "profile: cpu, not the standard configuration: 1 case(s)" in text
    # The standard configuration carries no such label.
    write_summary(make_run(tmp_path / "standard", [10.0]))
    assert "not the standard configuration" not in (tmp_path / "standard/summary.md").read_text()


def test_the_overview_comes_first_with_counts_figures_targets_and_links(tmp_path):
    make_run(tmp_path, [10.0, 11.0], profile=CPU_PROFILE)
    summary = write_summary(tmp_path)
    (row,) = summary["overview"]["rows"]
    assert summary["overview"]["counts"] == {"training": {"passed": 1, "cases": 1}}
    means = {k: summary["cases"][0]["stats"][k]["mean"]
             for k in ("p_train", "final_acc1", "target_acc1", "raw_train_time")}
    assert (row["figure"], row["value"], row["unit"]) == ("p_train", means["p_train"],
                                                         "images/s")
    assert (row["metric"], row["metric_value"], row["comparison"], row["target"]) == (
        "final_acc1", means["final_acc1"], ">=", means["target_acc1"])
    assert (row["time_figure"], row["time_s"]) == ("raw_train_time", means["raw_train_time"])
    assert summary["overview"]["duration_s"] is not None and summary["overview"]["hosts"]
    markdown = (tmp_path / "summary.md").read_text()
    # The overview before the case's section, its row linking there.
    assert markdown.index("## Overview") < markdown.index(f"## {CASE} (passed)")
    assert "**1/1 passed: training 1/1**" in markdown
    assert f"[{CASE} (profile cpu)](#case-{CASE})" in markdown
    assert f'<a id="case-{CASE}"></a>' in markdown
    modes = {name: (tmp_path / name).stat().st_mode & 0o777
             for name in ("summary.json", "summary.md", "summary.html")}
    assert len(set(modes.values())) == 1, modes            # summary.json was 0600
    page = (tmp_path / "summary.html").read_text()
    assert page.index("<h2>Overview</h2>") < page.index(f'<h2 id="case-{CASE}">')
    assert f'<a href="#case-{CASE}">' in page


def test_a_failed_round_shows_how_far_it_got(tmp_path):
    """No round passed: the overview shows the last round's metric against its target, and
    says whose it is, on the console and in summary.md."""
    make_run(tmp_path, [10.0], converged=[False], profile=CPU_PROFILE)
    summary = write_summary(tmp_path)
    (row,) = summary["overview"]["rows"]
    finished = summary["cases"][0]["rounds"][0]["finished"]
    assert row["status"] == "failed" and row["metric_of"] == "round 1 failed"
    assert (row["metric_value"], row["target"]) == (finished["final_acc1"],
                                                    finished["target_acc1"])
    shown = (f"final_acc1 {fmt(row['metric_value'])} (target >= {fmt(row['target'])}) "
             "in round 1 failed")
    assert shown in (tmp_path / "summary.md").read_text()
    console = Console(record=True, width=200, file=io.StringIO())
    print_summary(summary, console)
    assert shown in console.export_text()
    # A passed round's means carry no such note.
    make_run(tmp_path / "passed", [10.0])
    assert write_summary(tmp_path / "passed")["overview"]["rows"][0]["metric_of"] is None


def test_one_round_shows_no_statistics_that_need_two(tmp_path):
    make_run(tmp_path, [10.0])
    case = build_summary(tmp_path)["cases"][0]
    header, rows = case_table(case)
    assert [r[0] for r in rows] == ["1"]                  # no mean/std/cv rows repeating it
    from flagperf_ansible.results.report import case_facts, stats_table, summary_html

    header, rows = stats_table(case)
    by_name = {r[0]: dict(zip(header, r)) for r in rows}
    assert by_name["p_whole"]["std"] == by_name["p_whole"]["cv"] == "n/a"
    assert by_name["p_whole"]["olympic_mean"] == "n/a"
    # The target is a fact of the case, said once, not a statistic.
    assert "target_acc1" not in by_name and "world_size" not in by_name
    assert case_facts(case).startswith("Case facts: target_acc1 ")
    # Nor a throughput plot of one dot per figure.
    assert 'alt="throughput per round"' not in summary_html(tmp_path, build_summary(tmp_path))
    make_run(tmp_path / "two", [10.0, 12.0])
    two = build_summary(tmp_path / "two")
    rows = case_table(two["cases"][0])[1]
    assert [r[0] for r in rows][:3] == ["1", "2", "mean"]
    assert 'alt="throughput per round"' in summary_html(tmp_path / "two", two)


def test_figures_measured_on_a_busy_host_carry_the_label_everywhere(tmp_path):
    make_run(tmp_path, [10.0, 11.0])
    path = tmp_path / CASE / "round2" / "round.json"
    document = json.loads(path.read_text())
    document["monitor"] = {"overall": {"busy_hosts": ["h1_noderank0: load 4.6 on 2 cores"],
                                       "device_util_percent_mean": 90.0,
                                       "device_mem_used_peak_bytes": 3_000_000_000,
                                       "energy_unit": "image", "cpu_percent_mean": 95.0}}
    path.write_text(json.dumps(document))
    summary = write_summary(tmp_path)
    case = summary["cases"][0]
    assert case["busy_hosts"] == ["round 2: h1_noderank0: load 4.6 on 2 cores"]
    assert summary["overview"]["rows"][0]["busy"] is True
    assert case["monitor"]["device_util_percent_mean"] == 90.0
    label = "measured on a busy host: round 2: h1_noderank0: load 4.6 on 2 cores"
    for name in ("summary.md", "summary.html"):
        assert label in (tmp_path / name).read_text(), name
    markdown = (tmp_path / "summary.md").read_text()
    assert "| passed (measured on a busy host) |" in markdown
    assert ("Monitors (means over the passed rounds): device utilisation 90 %, peak device "
            "memory 3 GB, device power n/a, energy per image n/a, host CPU 95 %.") in markdown
    assert label in _console_text(summary, 120)


def _console_text(summary: dict, width: int) -> str:
    console = Console(record=True, width=width, file=io.StringIO())
    print_summary(summary, console)
    return console.export_text()


def test_the_console_summary_fits_80_and_120_columns_and_cuts_nothing(tmp_path):
    """A run of every suite: the words at 80 and 120 columns are those printed unwrapped (none
    cut or ended with an ellipsis), and no line is wider than the console."""
    make_run(tmp_path / "t", [10.0, 11.0], profile=CPU_PROFILE)
    make_suite_run(tmp_path / "i", INFERENCE, [inference(0.1)])
    make_suite_run(tmp_path / "b", BASE, [{"bandwidth": 20.0, "e2e_time": 1.0}])
    summaries = [write_summary(tmp_path / name) for name in ("t", "i", "b")]
    summary = {**summaries[0], "cases": [c for s in summaries for c in s["cases"]]}
    summary.pop("overview")
    whole = _console_text(summary, 1000)
    assert "…" not in whole
    for width in (80, 120):
        text = _console_text(summary, width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert text.split() == whole.split(), width


def test_a_case_counting_mel_frames_keeps_samples_in_samples():
    from flagperf_ansible.results.report import stats_table

    case = {"suite": "training", "contract": {
        "metrics": {}, "throughput": {"figure": "p_train", "unit": "mel_frames",
                                      "count": "num_trained_mel_frames"}},
        "stats": {name: {"mean": 1.0} for name in (
            "p_train", "num_trained_mel_frames", "num_trained_samples", "p_train_samples")}}
    units = {row[0]: row[1] for row in stats_table(case)[1]}
    assert units == {"p_train": "mel_frames/s", "num_trained_mel_frames": "mel_frames",
                     "num_trained_samples": "samples", "p_train_samples": "samples/s"}
