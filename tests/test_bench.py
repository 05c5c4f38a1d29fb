"""Each platform benchmark (``bench/*.py``) runs once in a smoke mode: one repeat, the smallest
size. Its figures are printed, not asserted: the test keeps the scripts from rotting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Each script's smoke arguments: one repeat, the smallest size it accepts.
SMOKE = {
    "perflog_cost.py": ["--events", "200", "--repeat", "1", "--depths", "2"],
    "perflog_parse.py": ["--sizes", "0.1", "0.3", "--repeat", "1"],
    "results_ingest.py": ["--rounds", "2", "--repeat", "1"],
    "monitor_overhead.py": ["--intervals", "1.0", "--duration", "1", "--warmup", "0"],
    "container_start.py": ["--repeat", "1"],
    "round_overhead.py": ["--hosts", "2", "--runtimes", "none", "--repeat", "1"],
    "slurm_overhead.py": ["--repeat", "1", "--duration", "1"],
    "megatron_loop.py": ["--repeat", "1", "--steps", "8"],
    "trainer_step_cost.py": ["--steps", "120", "--warmup", "10", "--repeat", "1"],
}
#: The scripts that need no Docker engine, sshd or Slurm.
PLAIN = ("perflog_cost.py", "perflog_parse.py", "results_ingest.py", "monitor_overhead.py",
         "trainer_step_cost.py")


def smoke(script: str) -> str:
    """``bench/<script>``'s output in its smoke mode, once it exited 0."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *SMOKE[script]],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.strip(), done.stderr[-3000:]
    print(done.stdout)
    return done.stdout


def test_every_benchmark_has_a_smoke_mode():
    assert sorted(SMOKE) == sorted(p.name for p in (ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("script", PLAIN)
def test_a_benchmark_prints_its_figures(script):
    smoke(script)


def test_container_start_prints_its_figures(base_image):
    assert "wall" in smoke("container_start.py")


def test_round_overhead_prints_its_figures(loopback_machine):
    assert "overhead" in smoke("round_overhead.py")


def test_slurm_overhead_prints_its_figures(slurm_machine):
    assert "overhead (flagperf - bare)" in smoke("slurm_overhead.py")


def test_megatron_loop_prints_its_figures(torchrun):
    assert "harness / plain:" in smoke("megatron_loop.py")
