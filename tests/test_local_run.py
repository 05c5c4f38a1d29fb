"""The main job for real, as the quickstart runs it: resnet50 on the digits data, local
inventory, through the wrapper. (site.yml trains for real in tests/test_cluster.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_data(project):
    """`data/digits` in the checkout, as the README's quickstart prepares it."""
    done = subprocess.run([sys.executable, "-m", "flagperf_ansible", "data", "prepare", "digits",
                           "data/digits"], cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return project / "data/digits"


def only_run_dir(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.name.startswith("run")]
    assert len(runs) == 1, runs
    return runs[0]


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
    assert finished["final_acc1"] >= finished["target_acc1"] >= 90.0
    assert finished["p_whole"] > 0 and finished["p_core"] >= finished["p_whole"]
    node = round_dir / "localhost_noderank0"
    log = (node / "rank0.out.log").read_text()
    assert '[PerfLog] {"event": "FINISHED"' in log
    samples = (node / "sys_monitor.csv").read_text().splitlines()
    assert samples[0].startswith("timestamp_ms,cpu_percent")
    assert len(samples) - 1 >= finished["e2e_time"] * 0.5      # ~1 sample a second
    assert (node / "config.yaml").is_file()
    return document


def test_wrapper_runs_two_resnet50_rounds(project, local_data, tmp_path, venv_env):
    done = subprocess.run(
        [sys.executable, "-m", "flagperf_ansible", "run", "-i", "inventories/local",
         "--results-dir", str(tmp_path)],
        cwd=project, capture_output=True, text=True, env=venv_env, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_dir = only_run_dir(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "passed"
    (case,) = summary["cases"]
    assert case["case_id"] == "resnet50-pytorch-cpux1x1"
    assert [r["status"] for r in case["rounds"]] == ["passed", "passed"]
    for number in (1, 2):
        check_round(run_dir, case["case_id"], number)
    assert case["stats"]["p_whole"]["n"] == 2
    assert "| mean |" in (run_dir / "summary.md").read_text()
    assert "resnet50-pytorch-cpux1x1: passed" in done.stdout     # the printed table
    assert json.loads((run_dir / "run.json").read_text())["cases"][0]["spec"]["repeat"] == 2
    assert monitors_left(run_dir.name) == []
