#!/usr/bin/env python3
"""Measure how fast ``summarize`` reads a large rank log, and whether its memory grows with the
log: a FlagPerf results folder with one generated rank log, read the way ``summarize`` reads it
(``summary.read_summary``: the rounds parsed from their rank logs line by line, keeping the
monitoring window's events and FINISHED), against a plain read of the same file (every line,
nothing done with it) and against the former parser (every event decoded and kept: what
``parse_rank_log`` does without ``keep``), in the same run, on the same files.

    python bench/perflog_parse.py [--sizes 40 120] [--repeat 3]

The log is FlagPerf's layout (``<case>/round1/<ip>_noderank0/rank0.out.log``): a STEP_END
PerfLog line per step, as FlagPerf's trainers write it, a plain logging line after every
fourth, an EVALUATE every 500 steps and FINISHED at the end. Each reader runs in a fresh
process per size (so its peak resident memory, ``ru_maxrss``, is its own); the time is the
median of ``--repeat`` runs. Figures:

* MB/s at the margin: (size2 - size1) / (time2 - time1), which leaves out the fixed cost of
  starting (imports, the folder walk);
* memory growth: (peak RSS at size2 - peak RSS at size1) per 100 MB of log.

It prints figures only: nothing is asserted. Goal: at least 100 MB/s at the margin for
summarize, and memory that does not grow with the log.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASE = "bert:pytorch_1.8:A100:1:1:1"
TRAINER = "/workspace/flagperf/training/benchmarks/bert/pytorch/run_pretraining.py"

#: What each reader imports (not timed), then does (timed) in its child process.
READERS = {
    "plain read": ("", """
count = 0
with open(log, encoding="utf-8", errors="replace") as handle:
    for line in handle:
        count += 1
"""),
    "summarize": ("from flagperf_ansible.results.summary import read_summary", """
summary = read_summary(run)
assert summary["cases"][0]["rounds"][0]["status"] == "passed", summary["cases"][0]["rounds"]
"""),
    "former parser": ("from flagperf_ansible.results.perflog import parse_rank_log", """
assert parse_rank_log(log).finished is not None
"""),
}

CHILD = """
import resource, sys, time
from pathlib import Path
sys.path.insert(0, {src!r})
run = Path(sys.argv[1])
log = run / {relative!r}
{setup}
start = time.perf_counter()
{body}
seconds = time.perf_counter() - start
print(seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def write_log(path: Path, megabytes: float) -> int:
    """A FlagPerf rank log of about ``megabytes`` MB; returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    limit = int(megabytes * 1e6)
    start_ms = 1_668_400_000_000
    with open(path, "w", encoding="utf-8") as out:
        out.write("[INFO] 2022-11-14 15:00:16 init distributed\n")
        head = {"file": TRAINER, "lineno": 140, "time_ms": start_ms, "rank": 0}
        out.write("[PerfLog] " + json.dumps({"event": "TRAIN_START", "metadata": head}) + "\n")
        step = 0
        while out.tell() < limit:
            step += 1
            stamp = start_ms + 250 * step
            value = {"loss": 2.5 - step * 1e-7, "mlm_acc": 0.3 + step * 1e-8,
                     "learning_rate": 3.5e-4, "num_trained_samples": step * 96,
                     "global_steps": step}
            meta = {"file": TRAINER, "lineno": 174, "time_ms": stamp, "rank": 0}
            out.write("[PerfLog] " + json.dumps({"event": "STEP_END", "value": value,
                                                 "metadata": meta}) + "\n")
            if step % 4 == 0:
                out.write(f"[INFO] 2022-11-14 15:{step // 240 % 60:02d}:{step // 4 % 60:02d} "
                          f"step {step} loss {value['loss']:.6f} lr 3.5e-04\n")
            if step % 500 == 0:
                meta = {**meta, "lineno": 190}
                out.write("[PerfLog] " + json.dumps({"event": "EVALUATE", "value": {
                    "eval_mlm_accuracy": 0.5, "eval_loss": 2.0}, "metadata": meta}) + "\n")
        end = {"file": TRAINER, "lineno": 150, "time_ms": start_ms + 250 * step + 1, "rank": 0}
        out.write("[PerfLog] " + json.dumps({"event": "TRAIN_END", "metadata": end}) + "\n")
        out.write("[PerfLog] " + json.dumps({"event": "FINISHED", "value": {
            "e2e_time": 250 * step / 1000 + 40, "training_sequences_per_second": 384.0,
            "converged": True, "final_loss": 1.9, "final_mlm_accuracy": 0.72,
            "raw_train_time": 250 * step / 1000, "init_time": 40.0}, "metadata": end}) + "\n")
        return out.tell()


def measure(reader: str, run_dir: Path, relative: str) -> tuple[float, int]:
    """``(seconds, peak RSS bytes)`` of one reader on one run folder, in a fresh process."""
    setup, body = READERS[reader]
    code = CHILD.format(src=str(ROOT / "src"), relative=relative, setup=setup, body=body)
    done = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True,
                          text=True, check=True)
    seconds, rss = done.stdout.split()
    return float(seconds), int(rss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs=2, default=[40.0, 120.0], metavar="MB",
                        help="the two log sizes, in MB (default 40 120)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    relative = f"{CASE}/round1/10.1.2.2_noderank0/rank0.out.log"
    with tempfile.TemporaryDirectory() as tmp:
        runs, sizes = [], []
        for index, megabytes in enumerate(args.sizes):
            run_dir = Path(tmp) / f"run{index}"
            sizes.append(write_log(run_dir / relative, megabytes))
            runs.append(run_dir)
        print(f"rank logs: {', '.join(f'{s / 1e6:.1f} MB' for s in sizes)} (FlagPerf layout); "
              f"python {sys.version.split()[0]}; median of {args.repeat} runs, each reader in "
              "its own process")
        print(f"{'reader':<14} {'s @ size1':>10} {'s @ size2':>10} {'MB/s margin':>12} "
              f"{'RSS @ size1':>12} {'RSS @ size2':>12} {'MB per 100 MB':>14}")
        margins = {}
        for reader in READERS:
            seconds, rss = [], []
            for run_dir in runs:
                found = [measure(reader, run_dir, relative) for _ in range(args.repeat)]
                seconds.append(statistics.median(s for s, _ in found))
                rss.append(max(r for _, r in found))
            margin = (sizes[1] - sizes[0]) / 1e6 / (seconds[1] - seconds[0])
            growth = (rss[1] - rss[0]) / 1e6 / ((sizes[1] - sizes[0]) / 1e8)
            margins[reader] = margin
            print(f"{reader:<14} {seconds[0]:>10.3f} {seconds[1]:>10.3f} {margin:>12.1f} "
                  f"{rss[0] / 1e6:>10.1f}MB {rss[1] / 1e6:>10.1f}MB {growth:>12.1f}MB")
        print(f"summarize / plain read at the margin: "
              f"{margins['summarize'] / margins['plain read']:.2f}; summarize / former parser: "
              f"{margins['summarize'] / margins['former parser']:.2f}x")
    return 0


if __name__ == "__main__":
    start = time.perf_counter()
    status = main()
    print(f"took {time.perf_counter() - start:.0f} s")
    sys.exit(status)
