#!/usr/bin/env python3
"""Measure the monitor's own cost: CPU use (% of one core) and sampling jitter, per interval.

    python bench/monitor_overhead.py [--intervals 1 0.1] [--duration 30] [--warmup 3]

For each interval, three processes run side by side on the same schedule for ``--duration`` s:

* ``baseline``: a Python loop that imports psutil, wakes on the same absolute schedule and writes
  one timestamp row per tick (the floor any Python sampler pays);
* ``monitor``: ``flagperf_host.sys_monitor`` (host streams: CPU total and per core,
  memory, load, disk, network, host power where readable);
* ``monitor+cpu``: the same with the ``cpu`` vendor plugin (``vendors/cpu/monitor.py``).

CPU use = (CPU time of the process over the measured span) / (wall time of the span) x 100, read
from ``/proc/<pid>/task/*/schedstat`` (ns) where present, else ``psutil`` (10 ms ticks). Startup
(imports, probing) is excluded by ``--warmup`` and printed apart. Jitter: for consecutive samples
in the span, ``|dt - interval|`` in ms (mean, p95, max); ``timestamp_ms`` has 1 ms resolution.
It prints figures only: nothing is asserted (timings depend on the host and its load).
Reference: upstream FlagPerf's ``sys_monitor.py`` costs 0.73 % of one core at its 5 s interval.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The monitor as the host runs it: python -m of the host package (src/ on the path).
MONITOR = [sys.executable, "-m", "flagperf_host.sys_monitor"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
CPU_PLUGIN = ROOT / "vendors/cpu/monitor.py"

BASELINE = """
import sys, time, psutil
interval, path = float(sys.argv[1]), sys.argv[2]
with open(path, "w") as out:
    out.write("timestamp_ms\\n")
    next_at = time.monotonic()
    while True:
        next_at += interval
        time.sleep(max(next_at - time.monotonic(), 0))
        out.write(f"{int(time.time() * 1000)}\\n")
        out.flush()
"""


def cpu_seconds(pid: int) -> float:
    """CPU time (s) of every thread of ``pid`` so far."""
    tasks = Path(f"/proc/{pid}/task")
    if tasks.is_dir():
        try:
            return sum(int((t / "schedstat").read_text().split()[0])
                       for t in tasks.iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def jitter_ms(csv_path: Path, interval: float, start_ms: float, end_ms: float) -> dict:
    with open(csv_path, newline="") as handle:
        stamps = [int(r["timestamp_ms"]) for r in csv.DictReader(handle)]
    stamps = [t for t in stamps if start_ms <= t <= end_ms]
    deviations = sorted(abs((b - a) - interval * 1000) for a, b in zip(stamps, stamps[1:]))
    if not deviations:
        return {"samples": len(stamps), "mean": None, "p95": None, "max": None}
    return {"samples": len(stamps), "mean": statistics.fmean(deviations),
            "p95": deviations[min(len(deviations) - 1, int(0.95 * len(deviations)))],
            "max": deviations[-1]}


def start_monitor(folder: Path, interval: float, plugin: bool) -> int:
    argv = [*MONITOR, "start", "--output-dir", str(folder),
            "--interval", str(interval)]
    if plugin:
        argv += ["--vendor-plugin", str(CPU_PLUGIN)]
    subprocess.run(argv, check=True, capture_output=True, timeout=60, env=ENV)
    return int((folder / "sys_monitor.pid").read_text().split()[0])     # "PID START_TIME"


def measure(interval: float, duration: float, warmup: float, scratch: Path) -> list[dict]:
    folders = {name: scratch / f"{name}-{interval}" for name in ("baseline", "monitor",
                                                                  "monitor+cpu")}
    for folder in folders.values():
        folder.mkdir()
    baseline = subprocess.Popen([sys.executable, "-c", BASELINE, str(interval),
                                 str(folders["baseline"] / "sys_monitor.csv")])
    pids = {"baseline": baseline.pid,
            "monitor": start_monitor(folders["monitor"], interval, plugin=False),
            "monitor+cpu": start_monitor(folders["monitor+cpu"], interval, plugin=True)}
    try:
        time.sleep(warmup)
        begin_ms, begin = time.time() * 1000, time.monotonic()
        startup = {name: cpu_seconds(pid) for name, pid in pids.items()}
        time.sleep(duration)
        end = {name: cpu_seconds(pid) for name, pid in pids.items()}
        wall, end_ms = time.monotonic() - begin, time.time() * 1000
    finally:
        baseline.terminate()
        baseline.wait()
        for name in ("monitor", "monitor+cpu"):
            subprocess.run([*MONITOR, "stop", "--output-dir", str(folders[name])],
                           capture_output=True, timeout=60, env=ENV)
    return [{"name": name, "interval": interval, "startup_cpu_ms": startup[name] * 1000,
             "cpu_percent": (end[name] - startup[name]) / wall * 100.0,
             "jitter": jitter_ms(folders[name] / "sys_monitor.csv", interval, begin_ms, end_ms)}
            for name in pids]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=float, nargs="+", default=[1.0, 0.1])
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds each")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds excluded at start")
    args = parser.parse_args()
    print(f"host: {os.cpu_count()} logical CPUs, load {os.getloadavg()[0]:.2f}; "
          f"{args.duration:g} s measured per interval after {args.warmup:g} s warm-up")
    header = (f"{'process':<12} {'interval s':>10} {'CPU % of 1 core':>16} "
              f"{'startup CPU ms':>15} {'samples':>8} {'jitter ms mean/p95/max':>24}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="monitor-overhead-") as scratch:
        for interval in args.intervals:
            for row in measure(interval, args.duration, args.warmup, Path(scratch)):
                jit = row["jitter"]
                spread = ("n/a" if jit["mean"] is None else
                          f"{jit['mean']:.1f}/{jit['p95']:.0f}/{jit['max']:.0f}")
                print(f"{row['name']:<12} {row['interval']:>10g} {row['cpu_percent']:>16.3f} "
                      f"{row['startup_cpu_ms']:>15.0f} {jit['samples']:>8} {spread:>24}")
    print("reference: upstream FlagPerf sys_monitor.py, 0.73 % of one core at 5 s (DESIGN.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
