"""The three kinds of runs the results database ingests, written for the tests by the real
writers: runs of this project (the driver's PerfLog emitter and finalize_round, through
``run_outputs``), a FlagPerf results folder (FlagPerf's FINISHED keys, ``run_outputs``), and
MLPerf Training logs written by mlcommons' own ``mlperf_logging.mllog`` logger.

``write_sources(folder)`` writes them all once:

* ``cpu``: resnet50-pytorch on the cpu profile, 1 round (vendor cpu);
* ``a100_1``, ``a100_2``: resnet50-pytorch on the standard configuration, nvidia A100 1x8,
  3 rounds each, the second run about 20 % slower (a regression Welch's test confirms), its
  contract with FlagPerf's published A100 1x8 figures;
* ``flagperf``: FlagPerf's bert:pytorch_1.8:A100:1:8:1, 2 rounds, with ``nvidia_monitor.log``;
* ``mlperf``: two MLPerf ResNet runs (``result_0.txt``, ``result_1.txt``) of NVIDIA on
  ``1xDGXA100``.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path

from flagperf_ansible.results.layout import mark_round_start
from flagperf_ansible.results.report import write_summary
from run_outputs import CASE, CPU_PROFILE, FLAGPERF_CASE, TRAINING, flagperf_log, make_run

RESNET50 = {"model": "resnet50", "framework": "pytorch", "hardware": "cpu", "nnodes": 1,
            "nproc_per_node": 1}
A100 = {**RESNET50, "hardware": "A100", "nproc_per_node": 8}
#: FlagPerf's published resnet50 figures (benchmarks/resnet50/pytorch/case.yml).
PUBLISHED = {"vendor": "nvidia", "hardware": "A100", "nnodes": 1, "nproc_per_node": 8,
             "precision": "fp32", "figures": {"p_whole": 4475.0, "p_train": 4586.0,
                                              "final_acc1": 75.0, "e2e_time": 28661.0},
             "source": "FlagPerf training/nvidia/resnet50-pytorch/README.md",
             "label": "FlagPerf's A100 1x8", "note": ""}


def our_run(run_dir: Path, seconds: list[float], created: str, vendor: str = "cpu",
            spec: dict | None = None, profile: dict | None = None) -> Path:
    """A run of resnet50-pytorch (``run_outputs.make_run``: 1000 samples in each round's
    ``seconds``) that began at ``created`` (run.json's, ``%Y-%m-%dT%H:%M:%S%z``), with its
    round_start.json files and summaries as a run leaves them."""
    contract = {**TRAINING, "references": [PUBLISHED]}
    make_run(run_dir, seconds, vendor=vendor, spec=spec or RESNET50, profile=profile,
             contract=contract)
    for number in range(1, len(seconds) + 1):       # as the round play marks its start
        mark_round_start(run_dir, f"{CASE}/round{number}")
    document = json.loads((run_dir / "run.json").read_text())
    document["created"] = created
    (run_dir / "run.json").write_text(json.dumps(document))
    write_summary(run_dir)                           # as the report play writes it
    return run_dir


def flagperf_folder(run_dir: Path) -> Path:
    """FlagPerf's results folder of bert on A100 1x8, two rounds, as its run.py lays it out."""
    for number, rate in ((1, 581.0), (2, 577.5)):
        node = run_dir / FLAGPERF_CASE / f"round{number}" / "10.1.2.2_noderank0"
        flagperf_log(node / "rank0.out.log", 0, rate, 0.7215)
        (node / "nvidia_monitor.log").write_text("2022-11-14 15:00:16\n45 250W 30000MiB 40536MiB 98%\n")
    return run_dir


def mlperf_logs(folder: Path, minutes: list[float]) -> Path:
    """MLPerf ResNet runs of NVIDIA on 1xDGXA100, one ``result_<i>.txt`` per entry of
    ``minutes`` (its time to train), written by ``mlperf_logging.mllog``."""
    from mlperf_logging.mllog import constants
    from mlperf_logging.mllog.mllog import MLLogger

    folder.mkdir(parents=True, exist_ok=True)
    start = int(datetime(2026, 11, 20, tzinfo=timezone.utc).timestamp() * 1000)
    for index, length in enumerate(minutes):
        path = folder / f"result_{index}.txt"
        logger = logging.getLogger(f"mlperf-{folder}-{index}")
        logger.propagate = False
        logger.setLevel(logging.INFO)
        handler = logging.FileHandler(path, mode="w")
        logger.addHandler(handler)
        log = MLLogger(logger=logger)
        t0 = start + index * 3_600_000
        for key, value in ((constants.SUBMISSION_BENCHMARK, "resnet"),
                           (constants.SUBMISSION_ORG, "NVIDIA"),
                           (constants.SUBMISSION_PLATFORM, "1xDGXA100"),
                           (constants.SUBMISSION_DIVISION, "closed"),
                           (constants.SUBMISSION_STATUS, "onprem"),
                           (constants.GLOBAL_BATCH_SIZE, 3264),
                           (constants.TRAIN_SAMPLES, 1281167)):
            log.event(key=key, value=value, time_ms=t0)
        log.start(key=constants.INIT_START, time_ms=t0)
        log.end(key=constants.INIT_STOP, time_ms=t0 + 60_000)
        log.start(key=constants.RUN_START, time_ms=t0 + 60_000)
        stop = t0 + 60_000 + int(length * 60_000)
        for epoch in range(1, 36):
            at = t0 + 60_000 + int(length * 60_000 * epoch / 35)
            log.end(key=constants.EPOCH_STOP, metadata={"epoch_num": epoch}, time_ms=at)
            if epoch % 4 == 3 or epoch == 35:
                log.event(key=constants.EVAL_ACCURACY, value=0.70 + 0.06 * epoch / 35,
                          metadata={"epoch_num": epoch}, time_ms=at)
        log.end(key=constants.RUN_STOP, metadata={"status": "success"}, time_ms=stop)
        logger.removeHandler(handler)
        handler.close()
    return folder


def write_sources(folder: Path) -> dict[str, Path]:
    """Every source of the module docstring under ``folder``; ``{name: path}``."""
    return {
        "cpu": our_run(folder / "cpu" / "run20261101090000", [20.0], "2026-11-01T09:00:00+0000",
                       profile=CPU_PROFILE),
        "a100_1": our_run(folder / "a100" / "run20261102090000", [0.250, 0.252, 0.249],
                          "2026-11-02T09:00:00+0000", vendor="nvidia", spec=A100),
        "a100_2": our_run(folder / "a100" / "run20261109090000", [0.300, 0.302, 0.305],
                          "2026-11-09T09:00:00+0000", vendor="nvidia", spec=A100),
        "flagperf": flagperf_folder(folder / "flagperf" / "run20221114150016"),
        "mlperf": mlperf_logs(folder / "mlperf" / "resnet", [28.0, 28.6]),
    }
