"""One minimal case of each suite (training, inference, base), written into a scratch checkout,
through `validate` and one real local round each: each round is judged by its suite's own pass
rule and reported with its suite's columns and the case's units."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from checkout_copy import copy_checkout, write_local_inventory

ROOT = Path(__file__).resolve().parents[1]

#: The entry of every minimal case: its suite's monitoring window, then FINISHED with the figures
#: its configuration names (the driver package is on the launch's PYTHONPATH).
ENTRY = '''"""A minimal case: its suite's PerfLog window, then FINISHED with the configured figures."""
import sys
import time

from driver import perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output
from driver.dist import dist_info


def main() -> int:
    start = time.time()
    args = parse_case_args("minimal case")
    info = dist_info()
    redirect_rank_output(args.output_dir, info.rank)
    config = load_config(args.config)
    log = perflog.PerfLogger(rank=info.rank)
    log.log(perflog.INIT_START)
    log.log(perflog.INIT_END)
    log.log(config["window_start"])
    time.sleep(float(config["seconds"]))
    log.log(config["window_end"])
    log.log(perflog.FINISHED, {**config["figures"], "e2e_time": time.time() - start})
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

SUITE_CASES = {
    "training": {
        "case": {"metrics": {"final_acc1": {"direction": "higher", "unit": "%"}},
                 "target": {"metric": "final_acc1", "comparison": ">=",
                            "config_key": "target_acc1"},
                 "throughput": {"figure": "p_train", "unit": "samples",
                                "count": "num_trained_samples"}},
        "window": ("TRAIN_START", "TRAIN_END"),
        "figures": {"converged": True, "final_acc1": 95.0, "target_acc1": 90.0, "p_whole": 100.0,
                    "p_train": 110.0, "p_core": 120.0, "raw_train_time": 1.0,
                    "num_trained_samples": 100},
        "params": {"target_acc1": 90.0},
    },
    "inference": {
        "case": {"metrics": {"final_top1": {"direction": "higher", "unit": "%"},
                             "final_latency_ms": {"direction": "lower", "unit": "ms"}},
                 "target": {"metric": "final_top1", "comparison": ">=",
                            "config_key": "target_top1"},
                 "throughput": {"figure": "p_inference_core", "unit": "queries",
                                "count": "num_queries"}},
        "window": ("INFERENCE_START", "INFERENCE_END"),
        "figures": {"final_top1": 76.1, "target_top1": 75.0, "final_latency_ms": 2.5,
                    "p_inference_whole": 500.0, "p_inference_core": 900.0, "num_queries": 500},
        "params": {"target_top1": 75.0},
    },
    "base": {
        "case": {"metrics": {"bandwidth": {"direction": "higher", "unit": "GB/s"}},
                 "throughput": {"figure": "bandwidth", "unit": "bytes", "count": "bytes_moved"}},
        "window": ("BENCHMARK_START", "BENCHMARK_END"),
        "figures": {"bandwidth": 12.5, "bytes_moved": 12500000000},
        "params": {},
    },
}


def write_case(project: Path, suite: str, model: str, figures: dict) -> None:
    spec = SUITE_CASES[suite]
    folder = project / "benchmarks" / ("" if suite == "training" else suite) / model / "pytorch"
    (folder / "config").mkdir(parents=True)
    (folder / "run.py").write_text(ENTRY)
    (folder / "case.yml").write_text(yaml.safe_dump({
        "suite": suite, "description": f"minimal {suite} case", "launcher": "python",
        "entry": "run.py", "timeout": 120, **spec["case"]}))
    params = {**spec["params"], "seconds": 1.0, "window_start": spec["window"][0],
              "window_end": spec["window"][1], "figures": figures}
    if suite == "inference":    # seed 004's two files (flagperf_ansible.config.inference_config)
        (folder / "config/configurations.yaml").write_text(yaml.safe_dump({
            "batch_size": 1, "flops": "2*1e9", "fp16": False, "compiler": None,
            "num_workers": 0, "log_freq": 1, "repeat": 1, "no_validation": False,
            "exist_onnx_path": None, "exist_compiler_path": None}))
        (folder / "config/parameters.yaml").write_text(yaml.safe_dump(params))
        return
    (folder / "config/standard.yaml").write_text(yaml.safe_dump({"params": params}))


def spec(model: str, suite: str) -> dict:
    return {"model": model, "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
            "nproc_per_node": 1, "repeat": 1, **({} if suite == "training" else {"suite": suite})}


@pytest.fixture(scope="module")
def suites_run(ansible_playbook, tmp_path_factory):
    """validate, then one run of the four cases (one inference case misses its bound)."""
    base = tmp_path_factory.mktemp("suites")
    project = copy_checkout(base / "project")
    for suite, entry in SUITE_CASES.items():
        write_case(project, suite, "mini", entry["figures"])
    write_case(project, "inference", "mini_low", {**SUITE_CASES["inference"]["figures"],
                                                   "final_top1": 70.2})
    inventory = write_local_inventory(project / "inventories/suites", {
        "flagperf_vendor": "cpu", "flagperf_container_runtime": "none",
        "flagperf_root": str(project), "flagperf_python": sys.executable,
        "flagperf_workdir": str(base / "work"), "flagperf_results_dir": str(base / "results"),
        "flagperf_cases": [spec("mini", "training"), spec("mini", "inference"),
                           spec("mini", "base"), spec("mini_low", "inference")]})
    env = {**os.environ, "FLAGPERF_PROJECT_DIR": str(project),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    validate = subprocess.run([sys.executable, "-m", "flagperf_ansible", "validate", "-i",
                               str(inventory)], capture_output=True, text=True, env=env, timeout=120)
    run = subprocess.run([sys.executable, "-m", "flagperf_ansible", "run", "-i", str(inventory)],
                         capture_output=True, text=True, env=env, timeout=900, cwd=project)
    (run_dir,) = (base / "results").glob("run*")
    return validate, run, run_dir


def test_validate_names_every_suite_case(suites_run):
    validate, _, _ = suites_run
    assert validate.returncode == 0, validate.stderr
    for case_id in ("mini-pytorch-cpux1x1", "mini-pytorch-inference-cpux1x1",
                    "mini-pytorch-base-cpux1x1", "mini_low-pytorch-inference-cpux1x1"):
        assert case_id in validate.stdout


def test_each_round_is_judged_by_its_suite_rule(suites_run):
    _, run, run_dir = suites_run
    summary = json.loads((run_dir / "summary.json").read_text())
    cases = {c["case_id"]: c for c in summary["cases"]}
    assert cases["mini-pytorch-cpux1x1"]["suite"] == "training"
    assert cases["mini-pytorch-inference-cpux1x1"]["suite"] == "inference"
    assert cases["mini-pytorch-base-cpux1x1"]["suite"] == "base"
    for case_id in ("mini-pytorch-cpux1x1", "mini-pytorch-inference-cpux1x1",
                    "mini-pytorch-base-cpux1x1"):
        assert cases[case_id]["passed"] is True, cases[case_id]
    low = cases["mini_low-pytorch-inference-cpux1x1"]
    assert low["passed"] is False
    document = json.loads((run_dir / "mini_low-pytorch-inference-cpux1x1/round1/round.json")
                          .read_text())
    assert document["suite"] == "inference" and document["status"] == "failed"
    assert "final_top1" in document["reason"]
    # A base round is not held to convergence it never claims.
    base = json.loads((run_dir / "mini-pytorch-base-cpux1x1/round1/round.json").read_text())
    assert base["status"] == "passed" and "converged" not in base["finished"]
    assert run.returncode == 1, run.stdout[-2000:]     # the low case failed the run


def test_reports_show_each_suite_with_its_columns_and_units(suites_run):
    _, _, run_dir = suites_run
    report = (run_dir / "summary.md").read_text()
    sections = {}
    for part in report.split("\n## ")[1:]:
        sections[part.splitlines()[0].split()[0]] = part
    inference = sections["mini-pytorch-inference-cpux1x1"]
    assert "queries/s" in inference and "final_top1" in inference and "ms" in inference
    assert "p_train" not in inference
    base = sections["mini-pytorch-base-cpux1x1"]
    assert "bandwidth" in base and "GB/s" in base and "p_whole" not in base
    training = sections["mini-pytorch-cpux1x1"]
    assert "p_train" in training and "samples/s" in training
