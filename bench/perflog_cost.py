#!/usr/bin/env python3
"""Measure what one PerfLog event costs the rank that writes it: the driver's emitter
(``benchmarks/driver/perflog.py``: one ``sys._getframe`` for the caller's file and line) against
its former self, reproduced here as the baseline (``inspect.stack(context=0)[1]`` for the same
two fields, then the same JSON line), in the same run, on the same stream.

    python bench/perflog_cost.py [--events 20000] [--repeat 5] [--depths 2 30]

Both write a STEP_END event with a trainer's usual figures to a real file opened as a rank's
``rank<R>.out.log`` is (line-buffered text, flushed at every event), so each figure includes
the ``write`` system call. Each logger is called ``--events`` times from a stack ``depth``
frames deep (``inspect.stack`` walks every frame, so its cost grows with the depth of the caller;
a rank logs from inside ``main()`` -> trainer -> loop, under pytest or a debugger deeper still).
Figures: microseconds per event, the median of ``--repeat`` timed batches (loggers alternate,
after one unmeasured batch of each); ``ratio`` = baseline / new. Beside them, the caller lookup
alone (no JSON, no write). It prints figures only: nothing is asserted. Goal: below 20 us an
event with the new emitter.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from driver import perflog  # noqa: E402

VALUE = {"epoch": 3, "global_steps": 1200, "loss": 1.2345678, "learning_rate": 0.0123,
         "num_trained_samples": 38400}


class InspectStackLogger:
    """The emitter as it was before (commit 8513f15): ``inspect.stack`` at every event."""

    def __init__(self, rank: int, stream) -> None:
        self.rank = rank
        self.stream = stream

    def log(self, event: str, value: dict | None = None) -> dict:
        if event not in perflog.EVENTS:
            raise ValueError(f"unknown PerfLog event {event!r}")
        caller = inspect.stack(context=0)[1]
        record: dict = {"event": event}
        if value is not None:
            record["value"] = perflog._plain(value)
        record["metadata"] = {"file": caller.filename, "lineno": caller.lineno,
                              "time_ms": int(time.time() * 1000), "rank": self.rank}
        self.stream.write(f"{perflog.PREFIX} {json.dumps(record, sort_keys=False)}\n")
        self.stream.flush()
        return record


def at_depth(depth: int, work):
    """Run ``work()`` with ``depth`` more frames on the stack."""
    if depth <= 0:
        return work()
    return at_depth(depth - 1, work)


def seconds_for(events: int, call) -> float:
    start = time.perf_counter()
    for _ in range(events):
        call()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 30])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "rank0.out.log"
        with open(log_path, "a", buffering=1, encoding="utf-8") as stream:
            new = perflog.PerfLogger(rank=0, stream=stream)
            old = InspectStackLogger(rank=0, stream=stream)
            # The baseline is hundreds of times slower: fewer of its events fill a batch.
            old_events = max(200, args.events // 100)
            cases = {
                "event, new": (args.events, lambda: new.log(perflog.STEP_END, VALUE)),
                "event, baseline": (old_events, lambda: old.log(perflog.STEP_END, VALUE)),
                "lookup, new": (args.events, lambda: sys._getframe(1).f_lineno),
                "lookup, baseline": (old_events, lambda: inspect.stack(context=0)[1].lineno),
            }
            print(f"PerfLog cost per event (us), median of {args.repeat} batches; "
                  f"python {sys.version.split()[0]}; lines to {log_path.name} (line-buffered "
                  "file)")
            print(f"{'depth':>5} {'what':<8} {'new':>9} {'baseline':>10} {'ratio':>8}")
            for depth in args.depths:
                per_event: dict[str, list[float]] = {name: [] for name in cases}
                for round_ in range(args.repeat + 1):
                    for name, (count, call) in cases.items():
                        seconds = at_depth(depth, lambda: seconds_for(count, call))
                        if round_:  # the first round warms up
                            per_event[name].append(seconds / count * 1e6)
                        stream.seek(0)
                        stream.truncate()
                medians = {name: statistics.median(v) for name, v in per_event.items()}
                for what in ("event", "lookup"):
                    fresh, base = medians[f"{what}, new"], medians[f"{what}, baseline"]
                    print(f"{depth:>5} {what:<8} {fresh:>9.2f} {base:>10.2f} "
                          f"{base / fresh:>7.0f}x")
            # One line as written, to show the format is unchanged.
            new.log(perflog.STEP_END, VALUE)
        print("line:", log_path.read_text().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
