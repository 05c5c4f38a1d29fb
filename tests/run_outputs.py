"""Round outputs written by the real driver (PerfLog emitter and RoundClock) and finalize_round,
for tests that need many rounds with chosen figures without training."""

from __future__ import annotations

import io
import time
from pathlib import Path

from driver import perflog
from driver.finished import RoundClock
from flagperf_ansible.results import finalize_round, write_run

CASE = "c-pytorch-cpux1x1"


def emit_round(node_dir: Path, rank: int = 0, seconds: float = 10.0, samples: int = 1000,
               converged: bool = True, finish: bool = True, extra: dict | None = None) -> None:
    """A rank log as a case writes it: ``samples`` trained in ``seconds`` of training."""
    node_dir.mkdir(parents=True, exist_ok=True)
    stream = io.StringIO()
    log = perflog.PerfLogger(rank=rank, stream=stream)
    clock = RoundClock()
    log.log(perflog.INIT_START)
    log.log(perflog.TRAIN_START)
    clock.train_start, clock.train_end = 100.0, 100.0 + seconds
    # e2e_time is measured from process_start: pin it so it follows ``seconds``, not the wall clock
    clock.process_start = time.time() - (seconds + 1.0)
    clock.compute_time = seconds * 0.8
    if finish:
        log.log(perflog.TRAIN_END)
        log.log(perflog.FINISHED, clock.finished(samples, converged, final_acc1=91.0,
                                                 target_acc1=90.0, **(extra or {})))
    (node_dir / f"rank{rank}.out.log").write_text(stream.getvalue())


def make_run(run_dir: Path, seconds: list[float], converged: list[bool] | None = None,
             rcs: list[int] | None = None, mfu_basis: dict | None = None) -> Path:
    """A run of one case with a round per entry of ``seconds`` (training time of that round)."""
    repeat = len(seconds)
    write_run(run_dir, {"vendor": "cpu", "runtime": "none", "hosts": [], "cases": [
        {"case_id": CASE, "metric": "acc1", "diagnostic": False, "spec": {"repeat": repeat}}]},
        {})
    for index, duration in enumerate(seconds):
        number = index + 1
        ok = True if converged is None else converged[index]
        rc = 0 if rcs is None else rcs[index]
        emit_round(run_dir / f"{CASE}/round{number}/h1_noderank0", seconds=duration,
                   converged=ok, finish=rc == 0)
        finalize_round({"run_dir": str(run_dir), "key": f"{CASE}/round{number}", "case_id": CASE,
                        "round": number, "metric": "acc1",
                        "hosts": [{"host": "h1", "noderank": 0, "rc": rc, "timed_out": False}],
                        "config": {"image_size": 224}, "overrides": {}, "started_ms": 1000,
                        "ended_ms": 2000, "mfu_basis": mfu_basis})
    return run_dir
