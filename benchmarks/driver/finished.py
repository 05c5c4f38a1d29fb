"""Time keeping for one rank and the FINISHED figures derived from it.

Figures (seconds, samples/s), as FlagPerf's trainers define them:

* ``e2e_time``: process start to FINISHED; ``init_time``: INIT_START..INIT_END;
* ``raw_train_time``: TRAIN_START..TRAIN_END; ``train_no_eval_time``: that minus evaluation;
* ``pure_compute_time``: the sum of forward, backward and optimizer step, without data loading;
* ``num_trained_samples``: samples trained over all ranks;
* ``p_whole = num_trained_samples / raw_train_time``,
  ``p_train = num_trained_samples / train_no_eval_time``,
  ``p_core = num_trained_samples / pure_compute_time``.

Beyond FlagPerf, for comparing with a plain loop in steady state (``scripts/gpu_check.py``):
``core_step_ms_p50``, the median of the compute windows (one per micro-batch, ms) after the
first ``core_warmup_steps`` of them (``STEADY_SKIP``, at most half the windows), so that the
first steps' start-up (kernel selection, the loader's first prefetch) is left out. ``p_core``
keeps FlagPerf's meaning: every window counts. A clock that timed no window writes neither.

A case whose throughput is counted in another unit (tokens, mel frames, audio samples: its
``case.yml: throughput.unit``) passes ``units=(name, count)``: ``num_trained_<name>`` is then the
count over all ranks and the three ``p_*`` are in ``<name>``/s, as FlagPerf's language and
speech trainers report them; samples stay in ``num_trained_samples`` and
``p_train_samples = num_trained_samples / train_no_eval_time``.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

#: Compute windows left out of ``core_step_ms_p50`` (at most half of them).
STEADY_SKIP = 10


class RoundClock:
    """Accumulates one rank's phase times. ``sync`` waits for the device (e.g.
    ``torch.cuda.synchronize``) so asynchronous kernels are charged to the phase that ran them."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.process_start = time.time()
        self.sync = sync or (lambda: None)
        self.init_start = self.init_end = self.process_start
        self.train_start = self.train_end = 0.0
        self.eval_time = 0.0
        self.compute_time = 0.0
        self.compute_windows: list[float] = []

    def mark_init_start(self) -> None:
        self.init_start = time.time()

    def mark_init_end(self) -> None:
        self.init_end = time.time()

    def mark_train_start(self) -> None:
        self.sync()
        self.train_start = time.time()

    def mark_train_end(self) -> None:
        self.sync()
        self.train_end = time.time()

    @contextmanager
    def compute(self) -> Iterator[None]:
        """Charge the block (forward, backward, step) to pure compute time."""
        self.sync()
        start = time.perf_counter()
        yield
        self.sync()
        elapsed = time.perf_counter() - start
        self.compute_time += elapsed
        self.compute_windows.append(elapsed)

    @contextmanager
    def evaluation(self) -> Iterator[None]:
        """Charge the block to evaluation time (excluded from ``train_no_eval_time``)."""
        self.sync()
        start = time.perf_counter()
        yield
        self.sync()
        self.eval_time += time.perf_counter() - start

    def finished(self, num_trained_samples: int, converged: bool,
                 units: tuple[str, int] | None = None, **results: Any) -> dict[str, Any]:
        """The FINISHED event's value; ``units`` the throughput's unit and count when it is not
        samples; ``results`` adds ``final_<metric>``, ``target_<metric>``..."""
        raw = max(self.train_end - self.train_start, 1e-9)
        no_eval = max(raw - self.eval_time, 1e-9)
        compute = max(self.compute_time, 1e-9)
        work = num_trained_samples if units is None else units[1]
        figures = {
            "e2e_time": time.time() - self.process_start,
            "init_time": self.init_end - self.init_start,
            "raw_train_time": raw,
            "train_no_eval_time": no_eval,
            "pure_compute_time": compute,
            "num_trained_samples": num_trained_samples,
            "p_whole": work / raw,
            "p_train": work / no_eval,
            "p_core": work / compute,
            "converged": bool(converged),
        }
        if self.compute_windows:
            skip = min(STEADY_SKIP, len(self.compute_windows) // 2)
            figures["core_step_ms_p50"] = statistics.median(self.compute_windows[skip:]) * 1e3
            figures["core_warmup_steps"] = skip
        if units is not None:
            figures[f"num_trained_{units[0]}"] = units[1]
            figures["p_train_samples"] = num_trained_samples / no_eval
        figures.update(results)
        return figures
