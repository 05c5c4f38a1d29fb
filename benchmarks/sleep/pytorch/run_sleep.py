"""Diagnostic case: emits the PerfLog events of a training run without computing anything.

Configuration: ``duration`` (s), ``steps``, ``exit_code``, ``hang``, ``converged``,
``samples_per_step``, ``fault_rank``. Exits with ``exit_code`` after FINISHED, or sleeps forever
with ``hang``; with ``fault_rank`` >= 0 only that rank does (the others hang when it exits
non-zero, as ranks waiting in a collective would), so one node's fault can be staged.
"""

from __future__ import annotations

import sys
import time

from driver import perflog
from driver.case_io import load_config, parse_case_args, redirect_rank_output
from driver.dist import dist_info
from driver.finished import RoundClock


def main() -> int:
    clock = RoundClock()
    args = parse_case_args(__doc__.splitlines()[0])
    info = dist_info()
    redirect_rank_output(args.output_dir, info.rank)
    config = load_config(args.config)
    log = perflog.PerfLogger(rank=info.rank)
    log.log(perflog.INIT_START)
    clock.mark_init_start()
    clock.mark_init_end()
    log.log(perflog.INIT_END)
    log.log(perflog.TRAIN_START)
    clock.mark_train_start()
    steps = max(1, int(config["steps"]))
    per_step = int(config["samples_per_step"])
    for step in range(1, steps + 1):
        with clock.compute():
            time.sleep(float(config["duration"]) / steps)
        log.log(perflog.STEP_END, {"global_steps": step, "num_trained_samples": step * per_step})
    fault_rank = int(config.get("fault_rank", -1))
    faulty = fault_rank < 0 or fault_rank == info.rank
    exit_code = int(config["exit_code"]) if faulty else 0
    if fault_rank >= 0 and not faulty and int(config["exit_code"]) != 0:
        exit_code, hang = 0, True     # a peer crashes: this rank waits for it forever
    else:
        hang = bool(config["hang"]) and faulty
    while hang:
        time.sleep(3600)
    clock.mark_train_end()
    log.log(perflog.TRAIN_END)
    log.log(perflog.FINISHED, clock.finished(
        steps * per_step * info.world_size, bool(config["converged"]), final_noop=1.0,
        target_noop=1.0))
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
