"""The main job for real, as the quickstart runs it (conftest's ``local_run``, once per session):
the base micro-benchmarks on the cpu vendor, then FlagPerf's training catalog (16 models: vision
on the digits, detection on the coins, speech and language on their tiny data sets), then the
inference suite's four cases (PyTorch against onnxruntime on the exported model), one round
each on its cpu profile, local inventory, through the wrapper: one run, one prepare, every base
figure reported, every case of the catalog converging for real, every inference engine within
its accuracy bound. (Two hosts train for real in tests/test_cluster_guide.py.)"""

import io
import json
from pathlib import Path

import psutil
import pytest
import yaml

from case_model import case_config, case_model, case_module, torch_finished_keys
from flagperf_ansible.results.perflog import parse_rank_log
from local_job import only_run_dir, run_wrapper
from test_validation import BASE, CATALOG, FRAMEWORKS, INFERENCE, LLM, training_ids


def monitors_left(run_id: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["cmdline"])
            if any("sys_monitor" in a for a in p.info["cmdline"] or [])
            and any(run_id in a for a in p.info["cmdline"] or [])]


def check_round(run_dir: Path, case_id: str, number: int) -> dict:
    round_dir = run_dir / case_id / f"round{number}"
    document = json.loads((round_dir / "round.json").read_text())
    assert document["status"] == "passed", document["reason"]
    finished = document["finished"]
    assert finished["converged"] is True
    metric = document["metric"]       # acc1, mAP, val_loss: the case's target
    final, target = finished[f"final_{metric}"], finished[f"target_{metric}"]
    if document["contract"]["target"]["comparison"] == "<=":    # a loss
        assert final <= target
    else:
        assert final >= target > 0
    assert finished["p_whole"] > 0 and finished["p_core"] >= finished["p_whole"]
    node = round_dir / "localhost_noderank0"
    log = (node / "rank0.out.log").read_text()
    assert '[PerfLog] {"event": "FINISHED"' in log
    samples = (node / "sys_monitor.csv").read_text().splitlines()
    assert samples[0].startswith("timestamp_ms,cpu_percent")
    # The monitor's samples span training, to within one interval at either end.
    (sampled,) = document["monitor"]["nodes"].values()
    assert sampled["status"] == "ok" and sampled["covers_train"] is True
    assert (node / "config.yaml").is_file()
    return document


#: Items an inference round's validation counts on the local data: the digits' 360 val images
#: (repeat 1); bert_large's 68 chunks of 128 tokens (tests/test_inference_bert_case.py), twice.
INFERENCE_ITEMS = {"resnet50": 360, "vit_l_16": 360, "swin_transformer": 360, "bert_large": 136}


def check_inference_round(run_dir: Path, case: dict) -> None:
    """An inference round on the cpu vendor (the one whole round of each case's entry point):
    both paths ran (PyTorch, then onnxruntime on the exported model, which stays on the host)
    over every item, the engine's accuracy within its bound of the framework's and its outputs
    the framework's to float rounding, throughputs and latencies consistent, the vendor's
    configuration recorded."""
    assert [r["status"] for r in case["rounds"]] == ["passed"], case["rounds"][0]["reason"]
    document = json.loads((run_dir / case["case_id"] / "round1/round.json").read_text())
    finished = document["finished"]
    assert finished["paths_run"] == ["validation", "inference"]
    assert finished["compiler"] == "onnxruntime" and finished["precision"] == "fp32"
    assert finished["num_items"] == INFERENCE_ITEMS[case["spec"]["model"]]
    assert finished["final_acc_gap"] <= finished["target_acc_gap"]
    assert finished["final_acc_gap"] == abs(finished["val_average_acc"] - finished["infer_average_acc"])
    # onnxruntime computes the exported model: its outputs are the framework's (the bound is
    # 0.05; in fp32 they agree to float rounding).
    assert finished["output_rel_error"] <= finished["target_output_rel_error"] == 0.05
    assert finished["output_rel_error"] < 1e-3 and finished["top1_agreement"] > 0.99
    for path in ("validation", "inference"):
        assert finished[f"p_{path}_core"] >= finished[f"p_{path}_whole"] > 0
        assert 0 < finished[f"{path}_latency_p50"] <= finished[f"{path}_latency_p99"]
    assert document["vendor_config"]["changed"]["compiler"]["value"] == "onnxruntime"
    assert document["profile"]["name"] == "cpu"
    node = run_dir / case["case_id"] / "round1/localhost_noderank0"
    assert not list(node.glob("*.onnx*")), "the ONNX file is a large artifact: it stays on the host"
    assert document["monitor"]["overall"]["mem_used_peak_bytes"] > 0     # the memory peak
    unit = document["contract"]["throughput"]["unit"]
    print(f"  {case['case_id']}: top-1/acc {finished['val_average_acc']:.3f} vs "
          f"{finished['infer_average_acc']:.3f}, inference whole/core "
          f"{finished['p_inference_whole']:.4g}/{finished['p_inference_core']:.4g} {unit}/s, "
          f"p99 {finished['inference_latency_p99']:.3g} ms, export {finished['export_time']:.1f} s, "
          f"e2e {finished['e2e_time']:.1f} s")


def framework_round(run_dir: Path, case_id: str, optimizer: str = "SGD", metric: str = "acc1",
                    batch: int = 32) -> tuple[Path, list[dict], dict, dict]:
    """A one-process cpu round of a framework beside PyTorch: its node folder, PerfLog events,
    configuration and FINISHED value, once the checks every such round shares pass (the
    pytorch case's event order and FINISHED keys for ``metric``, the ``optimizer`` at the
    configured rate, ``batch`` samples an update)."""
    node = run_dir / f"{case_id}/round1/localhost_noderank0"
    log = parse_rank_log(node / "rank0.out.log").events
    names = [e["event"] for e in log]
    # The profile's baselines: the model as built, evaluated before training (step 0).
    assert names[:6] == ["INIT_START", "CONVERT_MODEL", "CREATE_OPTIMIZER", "INIT_END",
                         "EVALUATE", "TRAIN_START"]
    assert log[4]["value"]["untrained"] is True and log[4]["value"]["global_steps"] == 0
    assert names[-2:] == ["TRAIN_END", "FINISHED"]
    config = yaml.safe_load((node / "config.yaml").read_text())
    assert next(e["value"] for e in log if e["event"] == "CREATE_OPTIMIZER") == {
        "optimizer": optimizer, "learning_rate": config["learning_rate"]}
    finished = log[-1]["value"]
    assert set(finished) == torch_finished_keys(metric, baselines=True)
    assert finished["world_size"] == 1
    assert finished["num_trained_samples"] == batch * finished["global_steps"]
    assert 0 < finished["init_time"] < finished["e2e_time"]
    return node, log, config, finished


def check_tensorflow_round(run_dir: Path) -> None:
    """resnet50-tensorflow2's cpu round: Keras' ResNet-50 with a 10-class head, an update per
    32 of the 1437 training images and a top-1 over the 360 validation images at each epoch's
    end."""
    _, log, config, finished = framework_round(run_dir, "resnet50-tensorflow2-cpux1x1")
    assert next(e["value"] for e in log if e["event"] == "CONVERT_MODEL") == {
        "model": "resnet50", "num_labels": 10, "parameters": 23_608_202, "replicas": 1}
    assert finished["epochs"] <= config["epochs"]
    assert finished["global_steps"] == 1437 // 32 * finished["epochs"]
    evaluations = [e["value"]["acc1"] for e in log if e["event"] == "EVALUATE"]
    assert len(evaluations) == 1 + finished["epochs"] and evaluations[-1] == finished["final_acc1"]
    assert round(finished["final_acc1"] * 360 / 100, 6).is_integer()
    assert finished["blind_acc1"] == 10.0      # 36 of the 360 are the commonest training digit


def check_mindspore_round(run_dir: Path) -> None:
    """resnet50-mindspore's cpu round under msrun: mindcv's ResNet-50 (torchvision's count less
    the 1000-class head's 990 extra rows) on the CPU, one trainer (msrun's scheduler runs the
    entry too), and the learning rate after 10 of the 44 updates an epoch by the case's
    schedule."""
    node, log, config, _ = framework_round(run_dir, "resnet50-mindspore-cpux1x1")
    assert [e["event"] for e in log].count("INIT_START") == 1
    convert = next(e["value"] for e in log if e["event"] == "CONVERT_MODEL")
    assert convert["parameters"] == 25_557_032 - 2049 * 990
    assert convert["num_labels"] == 10 and convert["device_target"] == "CPU"
    schedule = case_module("resnet50", "schedule", "mindspore")
    step = next(e["value"] for e in log if e["event"] == "STEP_END")
    assert step["global_steps"] == 10
    assert step["learning_rate"] == pytest.approx(schedule.per_update(44, 88, config)[10])
    # the exit skips the interpreter's teardown: no Cell.__del__ noise in the rank's log
    assert "Exception ignored" not in (node / "rank0.out.log").read_text()


def check_paddle_round(run_dir: Path) -> None:
    """bert-paddle's cpu round (the pytorch bert case's shards and converted checkpoint on
    paddle): the pytorch case's events and FINISHED keys, paddle's AdamW at the profile's rate,
    the learning rate 16 updates into the profile's warmup (FlagPerf's LinearWarmupPolyDecay)
    and the MLM accuracy target reached, the profile's batch an update; the model the pytorch
    case's of the same configuration, parameter for parameter."""
    profile = case_config("bert", "cpu", "paddle")
    _, log, config, finished = framework_round(run_dir, "bert-paddle-cpux1x1", "AdamW",
                                               "mlm_accuracy", profile["train_batch_size"])
    convert = next(e["value"] for e in log if e["event"] == "CONVERT_MODEL")
    torch_model = case_model("bert").build_model(profile)
    assert convert["parameters"] == sum(p.numel() for p in torch_model.parameters())
    assert convert["train_samples"] == 1024
    step = next(e["value"] for e in log if e["event"] == "STEP_END")
    assert step["global_steps"] == 16 < config["warmup_steps"]
    assert step["learning_rate"] == pytest.approx(
        config["learning_rate"] * 16 / config["warmup_steps"])
    assert finished["converged"] is True
    assert finished["final_mlm_accuracy"] >= finished["target_mlm_accuracy"] == 0.07


SWEEPS = ("interconnect-h2d", "interconnect-d2h", "interconnect-P2P_intraserver",
          "interconnect-all_reduce")


def check_base_case(run_dir: Path, case: dict) -> None:
    """A base case's round on the cpu vendor: every declared figure measured or explained, no
    ratio to a datasheet the cpu vendor does not state, the sweep where the case has one."""
    assert [r["status"] for r in case["rounds"]] == ["passed"], case["rounds"][0]["reason"]
    finished = case["rounds"][0]["finished"]
    explained = finished.get("not_measured") or {}
    for key in case["contract"]["metrics"]:
        assert (finished.get(key) or 0) > 0 or explained.get(key), key
    for key, item in case["datasheet"].items():
        assert item["ratio"] is None and item["spec"] is None, key
        assert item["reason"].startswith(("vendors/cpu/vendor.yml states no", "not measured")), item
    model = case["spec"]["model"]
    assert (case["sweep"] is not None) == (model in SWEEPS)
    print(f"  {case['case_id']}: " + ", ".join(
        f"{k} {finished[k]:.4g} {m['unit']}" for k, m in case["contract"]["metrics"].items()
        if isinstance(finished.get(k), (int, float))))


#: How many run-to-run spreads a cpu profile's target must lie beyond both baselines.
SPREADS = 3


def baselines_target(document: dict) -> tuple[str, bool]:
    """The target a round's profile baselines are for: its metric as FINISHED names it
    (``loss`` for ``final_loss``) and whether higher is better; the case's target unless the
    baselines name another of its targets (``profile.baselines.target``, one of the case's
    ``also_targets``, e.g. cpm's validation loss)."""
    contract = document["contract"]
    named = document["profile"]["baselines"].get("target") or contract["target"]["metric"]
    (target,) = [t for t in [contract["target"], *contract.get("also_targets", [])]
                 if t["metric"] == named]
    return named.removeprefix("final_"), target["comparison"] == ">="


def check_baselines(documents: list[dict]) -> None:
    """Every training case's target beyond what it scores without learning: the model as
    built (``untrained_<metric>``, an EVALUATE at step 0) and the best predictor blind to the
    input (``blind_<metric>``), both scored by the round from the case's own code and data,
    by ``SPREADS`` times the profile's declared spread in the metric's direction
    (:func:`baselines_target`: the target the baselines are for); printed as a table."""
    print(f"  {'case':34} {'metric':18} {'untrained':>10} {'blind':>10} {'target':>9} "
          f"{'margin':>9} {'spread':>8}")
    short = []
    for document in documents:
        finished = document["finished"]
        metric, higher = baselines_target(document)
        untrained, blind = finished[f"untrained_{metric}"], finished[f"blind_{metric}"]
        target, spread = finished[f"target_{metric}"], document["profile"]["baselines"]["spread"]
        best = max(untrained, blind) if higher else min(untrained, blind)
        margin = target - best if higher else best - target
        print(f"  {document['case_id']:34} {metric:18} {untrained:10.4g} {blind:10.4g} "
              f"{target:9.4g} {margin:9.4g} {spread:8.3g}")
        if margin < SPREADS * spread:
            short.append(f"{document['case_id']}: margin {margin:.4g} < {SPREADS} x {spread:g}")
    assert not short, short


def check_console_widths(summary: dict) -> None:
    """The run's console summary at 80 and 120 columns: the words printed unwrapped, none cut
    or ended with an ellipsis, no line wider than the console."""
    from rich.console import Console

    from flagperf_ansible.results.report import print_summary

    def text(width: int) -> str:
        console = Console(record=True, width=width, file=io.StringIO())
        print_summary(summary, console)
        return console.export_text()

    whole = text(1000)
    # A line a case, and one more where its host was busy, and a few of the run's own.
    assert "…" not in whole and len(whole.splitlines()) <= 2 * len(summary["cases"]) + 8, whole
    for width in (80, 120):
        shown = text(width)
        assert max(len(line) for line in shown.splitlines()) <= width
        assert shown.split() == whole.split(), width


#: summary.html of this run before its overview and folds: 88,745 px tall at 1400 px, for
#: its 30 cases then.
PAGE_HEIGHT_BEFORE = 88_745
CASES_BEFORE = 30


def check_page_in_a_browser(run_dir: Path, scratch: Path, cases: int) -> None:
    """summary.html in headless Chromium at 1400 px: the overview first, under a fifth of the
    height it had, no table wider than the page, no monitor timeline unfolded; screenshots of
    its top kept beside the run."""
    from browser import page_metrics, screenshot

    metrics = page_metrics(run_dir / "summary.html", scratch)
    print(f"summary.html at 1400 px: {metrics['height']} px tall "
          f"({metrics['height'] / PAGE_HEIGHT_BEFORE:.1%} of {PAGE_HEIGHT_BEFORE}), widest table "
          f"ends at {metrics['widest_table_right']:.0f} px, {len(metrics['shown_images'])} "
          f"plots shown, {metrics['folded_images']} folded")
    assert metrics["h2"][0] == "Overview"
    # Per case: the page grows with the run's cases, not with what each one shows.
    assert metrics["height"] / cases < PAGE_HEIGHT_BEFORE / CASES_BEFORE / 5, metrics["height"]
    assert metrics["widest_table_right"] <= metrics["viewport"]
    assert not [alt for alt in metrics["shown_images"] if alt.startswith("monitor timeline")]
    assert metrics["folded_images"] >= len(CATALOG)
    print("screenshot: " + str(screenshot(run_dir / "summary.html", scratch / "summary-top.png")))


@pytest.fixture(scope="module")
def summary(local_run) -> dict:
    """The local run's summary.json, once its cases are those of the inventory in order."""
    summary = json.loads((local_run.run_dir / "summary.json").read_text())
    assert summary["status"] == "passed"
    base_ids = [f"{m}-pytorch-base-cpux1x{n}" for m, n in BASE.items()]
    inference_ids = [f"{m}-pytorch-inference-cpux1x1" for m in INFERENCE]
    assert [c["case_id"] for c in summary["cases"]] == base_ids + training_ids() + [
        f"{m}-megatron-cpux1x{n}" for m, n in LLM] + [
        f"{m}-{f}-cpux1x1" for m, f in FRAMEWORKS] + inference_ids
    return summary


def test_the_base_suite_reports_every_figure(local_run, summary):
    run_dir = local_run.run_dir
    print("\nbase micro-benchmarks on the cpu vendor, one round each:")
    for case in summary["cases"][:len(BASE)]:
        check_base_case(run_dir, case)
    text = (run_dir / "summary.md").read_text()
    assert "Message-size sweep" in text and "How each figure is derived:" in text
    assert (run_dir / "summary.html").read_text().count('alt="bandwidth vs message size"') == 4


def test_every_training_case_converges_beyond_its_baselines(local_run, summary):
    run_dir, done = local_run.run_dir, local_run.done
    print("\ncpu profiles, one round each (training time to target, p_whole):")
    trained = []
    first_framework = len(BASE) + len(training_ids()) + len(LLM)
    for case in (summary["cases"][len(BASE):len(BASE) + len(training_ids())]
                 + summary["cases"][first_framework:first_framework + len(FRAMEWORKS)]):
        assert [r["status"] for r in case["rounds"]] == ["passed"]
        document = check_round(run_dir, case["case_id"], 1)
        trained.append(document)
        assert document["profile"]["name"] == "cpu" and document["profile"]["reduced"]
        assert case["reference"] is None           # a profile is not FlagPerf's configuration
        assert f"{case['case_id']}: passed" in done.stdout     # the printed table
        finished = document["finished"]
        metric = document["metric"]
        unit = document["contract"]["throughput"]["unit"]
        print(f"  {case['case_id']}: {finished['raw_train_time']:.1f} s, "
              f"{finished['epochs']} epochs, {finished['global_steps']} steps, {metric} "
              f"{finished[f'final_{metric}']:.4g}, p_whole {finished['p_whole']:.4g} {unit}/s")
    print(f"each target against the untrained model and an input-blind predictor ({SPREADS} "
          "spreads needed):")
    check_baselines(trained)
    bit = json.loads((run_dir / "bigtransfer-pytorch-cpux1x1/round1/round.json").read_text())
    assert bit["profile"]["checkpoint"]["path"] == "BiT-R14x1-random.npz"


def test_the_llm_cases_follow_their_reference_curves_at_every_layout(local_run, summary):
    run_dir = local_run.run_dir
    print("\nLLM cases on megatron-core, cpu profiles, one round each:")
    start = len(BASE) + len(training_ids())
    for case in summary["cases"][start:start + len(LLM)]:
        assert [r["status"] for r in case["rounds"]] == ["passed"], case["rounds"][0]["reason"]
        document = check_round(run_dir, case["case_id"], 1)
        finished, config = document["finished"], document["config"]
        assert finished["steps_run"] == finished["train_iters"] == config["train_iters"]
        # Upstream's rule against the plain megatron-core loop's curve, and learning for real.
        assert finished["final_loss_curve_error"] <= config["target_loss_curve_error"] == 0.02
        curve = json.loads((run_dir / case["case_id"] / "round1" / document["nodes"][0]["dir"]
                            / "loss_curve.json").read_text())
        assert curve["loss"][0] > 7.0 > 6.0 > finished["final_loss"] == curve["loss"][-1]
        world = int(case["case_id"][-1])
        assert finished["world_size"] == world and curve["layout"]["world"] == world
        assert finished["tokens_per_chip_per_second"] * world == pytest.approx(finished["p_train"])
        assert finished["num_trained_tokens"] == (
            (config["train_iters"] - config["speed_warmup_steps"]) * curve["layout"]["global_batch"]
            * config["seq_length"])
        print(f"  {case['case_id']}: TP{config['tensor_model_parallel_size']} "
              f"PP{config['pipeline_model_parallel_size']}, loss {curve['loss'][0]:.3f} -> "
              f"{finished['final_loss']:.3f}, curve error {finished['final_loss_curve_error']:.2e}, "
              f"{finished['tokens_per_chip_per_second']:.0f} tokens/s per process")
    # The seed's index beside gpt's rounds (tests/test_speed_index.py checks it field by field).
    index = json.loads((run_dir / "gpt-megatron-cpux1x2/round1/nlp_gpt_mp_bs4_fp32_2_speed")
                       .read_text())
    assert index["JOB_FAIL_FLAG"] == 0 and index["FINAL_RESULT"] > 0


def test_resnet50_holds_its_target_with_two_processes_as_with_one(local_run, summary):
    """resnet50's cpu profile at 1x2 (two processes on this host, gloo): its scaling's 1x2
    settings, 16 images a process, hold the same target in the same updates as 1x1."""
    run_dir = local_run.run_dir
    one, two = (check_round(run_dir, f"resnet50-pytorch-cpux1x{n}", 1) for n in (1, 2))
    assert one["finished"]["world_size"] == 1 and two["finished"]["world_size"] == 2
    assert one["finished"]["target_acc1"] == two["finished"]["target_acc1"] == 90.0
    assert two["finished"]["final_acc1"] >= two["finished"]["target_acc1"]
    assert two["finished"]["global_steps"] == one["finished"]["global_steps"]
    config = yaml.safe_load((run_dir / "resnet50-pytorch-cpux1x2/round1/localhost_noderank0/"
                                       "config.yaml").read_text())
    assert config["train_batch_size"] == 16
    assert two["profile"]["scaling"]["applied"]["train_batch_size"] == 16
    print(f"\nresnet50 cpu profile: final_acc1 {one['finished']['final_acc1']:.2f} at 1x1, "
          f"{two['finished']['final_acc1']:.2f} at 1x2")


def test_the_other_frameworks_train_side_by_side_with_pytorch(local_run, summary):
    run_dir = local_run.run_dir
    check_tensorflow_round(run_dir)
    check_mindspore_round(run_dir)
    check_paddle_round(run_dir)
    # resnet50 on PyTorch, TensorFlow 2 and MindSpore side by side: the same figures in one table.
    (resnet50,) = [g for g in summary["frameworks"] if g["model"] == "resnet50"]
    assert [r["framework"] for r in resnet50["rows"]] == ["pytorch", "tensorflow2", "mindspore"]
    assert {"final_acc1", "p_whole", "p_train", "p_core", "e2e_time"} <= set(resnet50["figures"])
    for row in resnet50["rows"]:
        assert row["status"] == "passed" and row["means"]["final_acc1"] > 0, row
        assert row["means"]["p_core"] >= row["means"]["p_whole"] > 0, row
    text = (run_dir / "summary.md").read_text()
    assert "## Frameworks side by side: resnet50 (training, cpux1x1, cpu profile)" in text
    print("\nresnet50 across frameworks (means): " + "; ".join(
        f"{r['framework']} final_acc1 {r['means']['final_acc1']:.4g} %, "
        f"p_train {r['means']['p_train']:.4g} images/s" for r in resnet50["rows"]))


def test_every_inference_engine_is_within_its_bound(local_run, summary):
    print("\ninference, cpu profiles through onnxruntime, one round each:")
    for case in summary["cases"][-len(INFERENCE):]:
        check_inference_round(local_run.run_dir, case)


def test_the_report_reads_in_a_console_and_a_browser(local_run, summary, chromium, tmp_path):
    run_dir = local_run.run_dir
    markdown = (run_dir / "summary.md").read_text()
    # One round each: the statistics table, no mean/std rows repeating the round.
    assert "Statistics over the passed rounds:" in markdown
    assert not [line for line in markdown.splitlines() if line.startswith("| mean |")]
    assert markdown.index("## Overview") < markdown.index("## computation-pytorch-base")
    total = len(summary["cases"])
    assert f"**{total}/{total} passed: base {len(BASE)}/{len(BASE)}, " in markdown
    check_console_widths(summary)
    check_page_in_a_browser(run_dir, tmp_path, total)


def test_no_monitor_is_left_running(local_run):
    assert monitors_left(local_run.run_dir.name) == []


def test_run_takes_one_case_with_its_data_from_the_command_line(project, tmp_path, venv_env):
    """``run --case SPEC=DATA_DIR`` in the suite form that ``cases`` lists: that case alone,
    on that data, instead of the inventory's 30 (a base case: the local run has every round's
    figures)."""
    done = run_wrapper("-i", "inventories/local", "--case",
                       "main_memory-bandwidth:pytorch:base:cpu:1:1:1=data/digits",
                       "--results-dir", str(tmp_path), cwd=project, env=venv_env, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [c["case_id"] for c in summary["cases"]] == [
        "main_memory-bandwidth-pytorch-base-cpux1x1"]
    (case,) = summary["cases"]
    assert case["status"] == "passed" and case["spec"]["data_dir"] == "data/digits"
    assert "main_memory-bandwidth-pytorch-base-cpux1x1: passed (profile cpu);" in done.stdout
