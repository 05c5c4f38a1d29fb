#!/usr/bin/env python3
"""What the PyTorch trainer (``benchmarks/driver/torch/trainer.py``) adds to each training step
beyond a plain loop with the same data path, on a tiny model on the CPU.

    python bench/trainer_step_cost.py [--steps 2000] [--warmup 50] [--repeat 5] [--clock cpu]

Both sides train the same tiny MLP (``--width``, ``--batch``) with SGD on the same synthetic
``TensorDataset`` through the same ``DataLoader`` (random sampler, whole batches, no workers,
no pinning: the trainer's settings on the CPU). The plain loop is what a user writes: for each
batch, forward, cross-entropy, backward, optimizer step, gradients zeroed. The harness side is
``Trainer.fit`` on a ``TrainingCase``: clock, autocast, vendor hooks, PerfLog events (written to
a line-buffered file, as a rank's ``rank<R>.out.log``), STEP_END every ``--log-freq`` steps,
one evaluation at the end of the epoch.

Both record, per step, when the step's compute window opens and closes (``RoundClock.compute``
on the harness side, the same two clock reads around the plain loop's step). The clock is the
main thread's CPU time (``--clock cpu``, ``time.thread_time``: everything runs in that thread,
and time the scheduler gives other processes is not counted, so a busy machine still measures
the work) or wall time (``--clock wall``, ``time.perf_counter``). The
first ``--warmup`` steps are left out. Figures (microseconds per step, each the median over
``--repeat`` runs, the sides alternating: plain, harness, harness, plain, ...):

* ``step``: the median interval from one step's window opening to the next's (data loading,
  the step and all the bookkeeping between steps);
* ``step mean``: the same intervals' mean (it keeps the periodic STEP_END events a median hides);
* ``window``: the median time inside the compute window (what p_core divides by).

``harness - plain`` is the harness's cost per step: the median over runs of each pair's
difference, with their range; ``best - best``, the difference of each side's fastest run, is the
figure least moved by other load on the machine. ``calls`` counts the Python functions and
built-ins called a step (``sys.setprofile``, in one more run of each side, over ``2 x
--log-freq`` steps after the warm-up): it does not depend on the load, so a change to the
trainer that adds work to the step shows there first. It prints figures only: nothing is
asserted. Goal: below 50 us a step. The cores are shared with whatever else runs (the load
average is printed), so read the spread beside the medians.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.pop("FLAGPERF_VENDOR_DIR", None)  # the default hooks: no vendor adapter

import torch  # noqa: E402

from driver import perflog  # noqa: E402
from driver.convergence import Target  # noqa: E402
from driver.finished import RoundClock  # noqa: E402
from driver.torch.trainer import Trainer, TrainingCase  # noqa: E402


#: ``--clock`` -> the function the steps are timed with (s).
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


class StepRecorder:
    """Each step's window: when it opened and when it closed (``now``'s seconds)."""

    def __init__(self, now) -> None:
        self.now = now  # type: ignore[method-assign]
        self.opened: list[float] = []
        self.closed: list[float] = []

    def figures(self, warmup: int) -> dict[str, float]:
        """``step``, ``step mean`` and ``window`` in us over the steps after ``warmup``."""
        opened, closed = self.opened[warmup:], self.closed[warmup:]
        steps = [b - a for a, b in zip(opened, opened[1:])]
        windows = [b - a for a, b in zip(opened, closed)]
        return {"step": statistics.median(steps) * 1e6,
                "step mean": statistics.fmean(steps) * 1e6,
                "window": statistics.median(windows) * 1e6}


class CallCounter(StepRecorder):
    """A recorder that counts the Python functions and built-ins called (``sys.setprofile``)
    from the window opening after ``warmup`` steps to the one ``counted`` steps later: a
    figure that the machine's load does not move."""

    def __init__(self, warmup: int, counted: int) -> None:
        super().__init__(self._now)
        self.first, self.last = warmup, warmup + counted
        self.counted = counted
        self.calls = 0

    def _profile(self, frame, event, arg) -> None:
        if event in ("call", "c_call"):
            self.calls += 1

    def _now(self) -> float:  # called as the window opens and as it closes
        if len(self.opened) == self.first and len(self.closed) == self.first:
            sys.setprofile(self._profile)
        elif len(self.opened) == self.last and len(self.closed) == self.last:
            sys.setprofile(None)
        return time.perf_counter()

    def per_step(self) -> float:
        return self.calls / self.counted


class RecordingClock(RoundClock):
    """The trainer's clock, recording each compute window as the plain loop does."""

    def __init__(self, recorder: StepRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    @contextmanager
    def compute(self) -> Iterator[None]:
        self.recorder.opened.append(self.recorder.now())
        with super().compute():
            yield
        self.recorder.closed.append(self.recorder.now())


def data(args) -> torch.utils.data.TensorDataset:
    generator = torch.Generator().manual_seed(0)
    samples = args.steps * args.batch
    return torch.utils.data.TensorDataset(
        torch.randn(samples, args.width, generator=generator),
        torch.randint(0, 10, (samples,), generator=generator))


def build_model(width: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 10))


def plain(args, train_set, recorder: StepRecorder) -> StepRecorder:
    """The plain loop over one epoch of ``train_set``."""
    model = build_model(args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        train_set, batch_size=args.batch, sampler=torch.utils.data.RandomSampler(train_set),
        num_workers=0, drop_last=True, pin_memory=False)
    device = torch.device("cpu")
    model.train()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        recorder.opened.append(recorder.now())
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        recorder.closed.append(recorder.now())
    return recorder


def harness(args, train_set, log_path: Path, recorder: StepRecorder) -> StepRecorder:
    """``Trainer.fit`` over one epoch of ``train_set`` (PerfLog to ``log_path``)."""
    config = {"train_batch_size": args.batch, "eval_batch_size": args.batch, "epochs": 1,
              "log_freq": args.log_freq, "stop_at_target": False}
    val_set = torch.utils.data.TensorDataset(torch.zeros(args.batch, args.width),
                                             torch.zeros(args.batch, dtype=torch.long))
    with open(log_path, "w", buffering=1, encoding="utf-8") as stream:
        trainer = Trainer(config, model="tiny", log=perflog.PerfLogger(rank=0, stream=stream),
                          clock=RecordingClock(recorder))
        case = TrainingCase(
            train_set=train_set, val_set=val_set, build_model=lambda: build_model(args.width),
            create_optimizer=lambda model, ctx: torch.optim.SGD(model.parameters(), lr=0.01,
                                                                momentum=0.9),
            train_loss=lambda model, batch: torch.nn.functional.cross_entropy(
                model(batch[0]), batch[1]),
            eval_sum_names=("correct", "counted"),
            eval_sums=lambda model, batch: {
                "correct": float((model(batch[0]).argmax(1) == batch[1]).sum()),
                "counted": float(len(batch[1]))},
            eval_metric=lambda sums: 100.0 * sums["correct"] / max(sums["counted"], 1.0),
            target=Target("acc1", 100.0))
        trainer.fit(case)
    return recorder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--log-freq", type=int, default=50)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args()
    if args.steps < args.warmup + 2:
        parser.error("--steps must exceed --warmup by 2 or more")
    torch.set_num_threads(1)  # one thread: the step's own time varies less
    train_set = data(args)
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "harness": []}
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "rank0.out.log"
        stdout = sys.stdout
        clock = CLOCKS[args.clock]
        sides = {"plain": lambda recorder: plain(args, train_set, recorder),
                 "harness": lambda recorder: harness(args, train_set, log_path, recorder)}
        for repeat in range(args.repeat):
            # plain, harness, harness, plain, ...: neither side always runs first.
            for side in sorted(sides, reverse=repeat % 2 == 0):
                sys.stdout = io.StringIO()  # the trainer's own prints, if any, stay out
                try:
                    runs[side].append(sides[side](StepRecorder(clock)).figures(args.warmup))
                finally:
                    sys.stdout = stdout
        counted = min(args.log_freq * 2, args.steps - args.warmup - 1)
        calls = {"plain": plain(args, train_set, CallCounter(args.warmup, counted)).per_step()}
        sys.stdout = io.StringIO()
        try:
            calls["harness"] = harness(args, train_set, log_path,
                                       CallCounter(args.warmup, counted)).per_step()
        finally:
            sys.stdout = stdout
        events = sum(1 for line in log_path.read_text().splitlines()
                     if line.startswith(perflog.PREFIX))
    print(f"Trainer cost per step (us) beyond a plain loop with the same DataLoader; tiny MLP "
          f"(width {args.width}, batch {args.batch}) on 1 CPU thread, {args.clock} time; "
          f"{args.steps} steps a run, "
          f"the first {args.warmup} left out; median of {args.repeat} runs [min..max]; "
          f"{events} PerfLog events a harness run; torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'figure':<10} {'plain':>9} {'harness':>9} {'harness - plain':>16} "
          f"{'spread':>20} {'best - best':>12}")
    for figure in ("step", "step mean", "window"):
        base = [run[figure] for run in runs["plain"]]
        mine = [run[figure] for run in runs["harness"]]
        costs = [m - b for m, b in zip(mine, base)]
        print(f"{figure:<10} {statistics.median(base):>9.1f} {statistics.median(mine):>9.1f} "
              f"{statistics.median(costs):>16.1f} "
              f"{f'[{min(costs):.1f}..{max(costs):.1f}]':>20} {min(mine) - min(base):>12.1f}")
    print(f"{'calls':<10} {calls['plain']:>9.1f} {calls['harness']:>9.1f} "
          f"{calls['harness'] - calls['plain']:>16.1f}   (Python calls a step, over "
          f"{counted} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
