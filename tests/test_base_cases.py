"""The base micro-benchmark cases (benchmarks/base/, harness benchmarks/driver/torch/microbench.py):
each case's entry run for real on the CPU with its cpu profile shrunk further, its FINISHED
checked against the contract the controller relies on, and every case read through
flagperf_ansible.config.cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from driver.torch.microbench import sweep_sizes
from flagperf_ansible.config import cases
from flagperf_ansible.results.perflog import parse_rank_log

# The cases' entries run as a launch runs them, under torchrun for two ranks.
pytestmark = pytest.mark.usefixtures("torchrun")

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "benchmarks" / "base"
CASES = ("computation", "main_memory-bandwidth", "main_memory-capacity", "interconnect-h2d",
         "interconnect-d2h", "interconnect-P2P_intraserver", "interconnect-all_reduce")
SMALL_SWEEP = {"min_bytes": 4096, "max_bytes": 1 << 20, "factor": 4, "warmup": 1,
               "iterations": 3}


def run_case(case: str, tmp_path: Path, nproc: int = 1, **overrides) -> tuple[
        subprocess.CompletedProcess, Path]:
    """Run ``case``'s entry with standard < cpu profile < ``overrides``; returns the process
    and its output folder."""
    folder = BASE / case / "pytorch"
    params = yaml.safe_load((folder / "config" / "standard.yaml").read_text())["params"]
    params.update(yaml.safe_load((folder / "config" / "cpu.yaml").read_text())["params"])
    params.update(overrides)
    config, output = tmp_path / "config.yaml", tmp_path / "out"
    config.write_text(yaml.safe_dump(params))
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                str(nproc)] if nproc > 1 else []
    env = {**os.environ, "PYTHONPATH": str(ROOT / "benchmarks")}  # as the launch's (case_path)
    done = subprocess.run([sys.executable, *launcher, str(folder / "main.py"), "--config",
                           str(config), "--output_dir", str(output)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    return done, output


def finished(output: Path) -> dict:
    """Rank 0's FINISHED value."""
    events = [e for e in parse_rank_log(output / "rank0.out.log").events
              if e["event"] == "FINISHED"]
    assert len(events) == 1
    return events[0]["value"]


def declared(case: str) -> dict:
    return yaml.safe_load((BASE / case / "pytorch" / "case.yml").read_text())["metrics"]


def check_figures(case: str, value: dict) -> None:
    """Every declared metric is a positive number or not measured, with a reason."""
    for metric in declared(case):
        if metric in value:
            assert isinstance(value[metric], float) and value[metric] > 0, metric
            assert metric not in value["not_measured"]
        else:
            assert value["not_measured"][metric].strip(), metric
    assert value["device"].startswith("cpu: ")
    assert value["benchmark_time"] > 0 and value["e2e_time"] >= value["benchmark_time"]


def check_sweep(value: dict, max_bytes: int, columns: tuple[str, ...]) -> list[dict]:
    rows = value["sweep"]
    sizes = [row["bytes"] for row in rows]
    assert sizes == sorted(set(sizes)) and sizes[-1] == max_bytes
    for column in columns:
        assert value[column] == rows[-1][column]  # the headline is the largest size's
    return rows


def test_sweep_sizes_end_at_the_maximum_and_round_to_the_multiple():
    assert sweep_sizes(8, 100, 2) == [8, 16, 32, 64, 100]
    assert sweep_sizes(4096, 4096, 2) == [4096]
    assert sweep_sizes(4, 100, 4, multiple=8) == [8, 16, 64, 96]
    with pytest.raises(ValueError, match="factor"):
        sweep_sizes(8, 100, 1)


def test_computation_reports_each_precision_and_tf32_not_measured_on_cpu(tmp_path):
    done, output = run_case("computation", tmp_path, m=256, n=256, k=256, warmup=1,
                            iterations={p: 5 for p in ("fp64", "fp32", "tf32", "fp16", "bf16",
                                                       "int8")},
                            precisions=["fp64", "fp32", "tf32", "bf16", "int8"])
    assert done.returncode == 0, done.stderr[-2000:]
    value = finished(output)
    check_figures("computation", value)
    assert "TF32" in value["not_measured"]["tflops_tf32"]
    assert value["not_measured"]["tflops_fp16"] == "not in this configuration's precisions"
    assert {"tflops_fp64", "tflops_fp32", "tflops_bf16", "tops_int8"} <= set(value)


def test_memory_bandwidth(tmp_path):
    done, output = run_case("main_memory-bandwidth", tmp_path, size_mib=4, iterations=5)
    assert done.returncode == 0, done.stderr[-2000:]
    check_figures("main_memory-bandwidth", finished(output))


def test_memory_capacity_on_cpu_stops_at_the_limit_and_says_so(tmp_path):
    done, output = run_case("main_memory-capacity", tmp_path, init_mib=64, limit_gib=0.125)
    assert done.returncode == 0, done.stderr[-2000:]
    value = finished(output)
    check_figures("main_memory-capacity", value)
    assert value["capacity_gib"] == 0.125 and value["limit_reached"] is True
    assert value["capacity"] == pytest.approx(128 * 2 ** 20 / 1e9)


def test_per_device_figures_are_the_mean_over_ranks_with_each_rank_s(tmp_path):
    done, output = run_case("main_memory-capacity", tmp_path, nproc=2, init_mib=64,
                            limit_gib=0.0625)
    assert done.returncode == 0, done.stderr[-2000:]
    value = finished(output)
    check_figures("main_memory-capacity", value)
    assert value["world_size"] == 2 and value["limit_reached"] is True
    assert value["per_rank"]["capacity_gib"] == [0.0625, 0.0625]
    assert value["capacity"] == pytest.approx(sum(value["per_rank"]["capacity"]) / 2)


@pytest.mark.parametrize("case", ["interconnect-h2d", "interconnect-d2h"])
def test_host_link_sweep(case, tmp_path):
    done, output = run_case(case, tmp_path, **SMALL_SWEEP)
    assert done.returncode == 0, done.stderr[-2000:]
    value = finished(output)
    check_figures(case, value)
    for row in check_sweep(value, 1 << 20, ("bandwidth",)):
        assert row["bandwidth"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)


def test_p2p_between_two_ranks(tmp_path):
    done, output = run_case("interconnect-P2P_intraserver", tmp_path, nproc=2, **SMALL_SWEEP)
    assert done.returncode == 0, done.stderr[-2000:]
    value = finished(output)
    check_figures("interconnect-P2P_intraserver", value)
    assert value["world_size"] == 2
    for row in check_sweep(value, 1 << 20, ("bandwidth",)):
        assert row["bandwidth"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)


def test_all_reduce_busbw_is_algbw_times_2_n_minus_1_over_n(tmp_path):
    done, output = run_case("interconnect-all_reduce", tmp_path, nproc=2, **SMALL_SWEEP)
    assert done.returncode == 0, done.stderr[-2000:]
    value = finished(output)
    check_figures("interconnect-all_reduce", value)
    for row in check_sweep(value, 1 << 20, ("algbw", "busbw")):
        assert row["algbw"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)
        assert row["busbw"] == pytest.approx(row["algbw"] * 2 * (2 - 1) / 2)
        assert row["bytes"] % (4 * 2) == 0


@pytest.mark.parametrize("case", ["interconnect-P2P_intraserver", "interconnect-all_reduce"])
def test_a_pair_case_on_one_rank_fails_with_one_clear_line(case, tmp_path):
    done, output = run_case(case, tmp_path, **SMALL_SWEEP)
    assert done.returncode == 2
    log = (output / "rank0.out.log").read_text()
    errors = [line for line in log.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "at least 2 ranks" in errors[0]
    assert "Traceback" not in log and "FINISHED" not in log


def test_a_bad_sweep_under_torchrun_stops_every_rank_with_one_line(tmp_path):
    """Through the real launcher, with the process group up: each rank of the all-reduce stops
    on the bad sweep with its one line, and torchrun ends failed instead of waiting."""
    done, output = run_case("interconnect-all_reduce", tmp_path, nproc=2,
                            **{**SMALL_SWEEP, "factor": 1})
    assert done.returncode != 0
    for rank in (0, 1):
        log = (output / f"rank{rank}.out.log").read_text()
        errors = [line for line in log.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "factor 1" in errors[0], log[-2000:]
        assert "Traceback" not in log and "FINISHED" not in log


def test_a_fault_ends_the_rank_with_its_traceback(tmp_path):
    done, output = run_case("main_memory-bandwidth", tmp_path, size_mib=-1)
    assert done.returncode == 1
    log = (output / "rank0.out.log").read_text()
    assert "Traceback" in log and "FINISHED" not in log


def test_every_base_case_passes_the_contract(project):
    listed = {c.model for c in cases.list_cases(project) if c.suite == "base"}
    assert set(CASES) <= listed
    for case in CASES:
        spec = cases.load_case(project, case, "pytorch", "base")
        assert spec.spec.suite == "base" and spec.spec.launcher == "torchrun"
        for key, metric in spec.spec.metrics.items():
            assert metric.direction == "higher" and "=" in metric.description, (case, key)
            # every figure but algbw has its datasheet entry (flagperf_ansible.config.datasheet)
            assert bool(metric.datasheet) == (key != "algbw"), (case, key)
        label, _ = cases.profile_of(project, spec, "cpu")
        assert label["description"]
    assert cases.load_case(project, "interconnect-all_reduce", "pytorch", "base").spec \
        .metrics["busbw"].datasheet_across_nodes == "network_bandwidth"
