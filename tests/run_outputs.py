"""Round outputs written by the real driver (PerfLog emitter and RoundClock) and finalize_round,
for tests that need many rounds with chosen figures without training.

A run made here has a run.json and a plan.json as ``layout.write_run`` writes them, each round
of the plan with its suite, case contract and profile, so finalize_round judges the rounds by
the plan as it does in a real run.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

from driver import perflog
from driver.finished import RoundClock
from flagperf_ansible.results.layout import write_run
from flagperf_ansible.results.rounds import finalize_round

CASE = "c-pytorch-cpux1x1"
FLAGPERF_CASE = "bert:pytorch_1.8:A100:1:8:1"
#: resnet50's contract, as CaseDef.contract() gives it.
TRAINING = {"suite": "training",
            "metrics": {"final_acc1": {"direction": "higher", "unit": "%",
                                       "description": "top-1 accuracy"}},
            "target": {"metric": "final_acc1", "comparison": ">=", "config_key": "target_acc1"},
            "throughput": {"figure": "p_train", "unit": "images", "count": "num_trained_samples"},
            "window": ["TRAIN_START", "TRAIN_END"], "data_format": "imagenet"}
#: A speech-recognition inference case: word error rate within a bound, lower is better.
INFERENCE = {"suite": "inference",
             "metrics": {"final_wer": {"direction": "lower", "unit": "%",
                                       "description": "word error rate"}},
             "target": {"metric": "final_wer", "comparison": "<=", "config_key": "target_wer"},
             "throughput": {"figure": "p_inference_core", "unit": "queries",
                            "count": "num_queries"},
             "window": ["INFERENCE_START", "INFERENCE_END"], "data_format": None}
#: A base micro-benchmark: memory bandwidth.
BASE = {"suite": "base",
        "metrics": {"bandwidth": {"direction": "higher", "unit": "GB/s",
                                  "description": "device memory bandwidth"}},
        "target": None,
        "throughput": {"figure": "bandwidth", "unit": "bytes", "count": "bytes_moved"},
        "window": ["BENCHMARK_START", "BENCHMARK_END"], "data_format": None}
CPU_PROFILE = {"name": "cpu", "standard": False, "description": "CPU-sized",
               "reduced": ["image size", "data set", "epochs"]}


def emit_round(node_dir: Path, rank: int = 0, seconds: float = 10.0, samples: int = 1000,
               converged: bool = True, finish: bool = True, extra: dict | None = None) -> None:
    """A training rank log as a case writes it: ``samples`` trained in ``seconds``."""
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
        log.log(perflog.FINISHED, clock.finished(samples, converged, **{
            "final_acc1": 91.0, "target_acc1": 90.0, **(extra or {})}))
    (node_dir / f"rank{rank}.out.log").write_text(stream.getvalue())


def emit_finished(node_dir: Path, finished: dict | None, window: tuple[str, str],
                  rank: int = 0) -> None:
    """A rank log of any suite: its window's events, then FINISHED ``finished`` (none when
    None)."""
    node_dir.mkdir(parents=True, exist_ok=True)
    stream = io.StringIO()
    log = perflog.PerfLogger(rank=rank, stream=stream)
    log.log(perflog.INIT_START)
    log.log(window[0])
    log.log(window[1])
    if finished is not None:
        log.log(perflog.FINISHED, finished)
    (node_dir / f"rank{rank}.out.log").write_text(stream.getvalue())


def write_planned_run(run_dir: Path, repeat: int, contract: dict | None = None,
                      profile: dict | None = None, case: str = CASE, vendor: str = "cpu",
                      spec: dict | None = None) -> Path:
    """run.json and plan.json of a run of one case with ``repeat`` rounds, by ``vendor``;
    ``spec`` adds to the case spec (e.g. hardware, nnodes, nproc_per_node)."""
    contract = TRAINING if contract is None else contract
    suite = contract["suite"]
    entry = {"case_id": case, "metric": None, "suite": suite,
             "diagnostic": suite == "diagnostic", "spec": {**(spec or {}), "repeat": repeat},
             "contract": contract, "profile": profile}
    rounds = [{"key": f"{case}/round{n}", "case_id": case, "round": n, "suite": suite,
               "contract": contract, "profile": profile} for n in range(1, repeat + 1)]
    write_run(run_dir, {"vendor": vendor, "runtime": "none", "hosts": [], "cases": [entry],
                        "rounds": rounds}, {})
    return run_dir


def finalize(run_dir: Path, number: int, rc: int = 0, mfu_basis: dict | None = None,
             case: str = CASE, config: dict | None = None,
             datasheet_basis: dict | None = None) -> dict:
    """finalize_round of round ``number`` as the collect role hands it over (one host, h1),
    with ``config`` as the round's hyper-parameters."""
    return finalize_round({"run_dir": str(run_dir), "key": f"{case}/round{number}",
                           "case_id": case, "round": number, "metric": "acc1",
                           "hosts": [{"host": "h1", "noderank": 0, "rc": rc, "timed_out": False}],
                           "config": config or {"image_size": 224}, "overrides": {},
                           "started_ms": 1000, "ended_ms": 2000, "mfu_basis": mfu_basis,
                           "datasheet_basis": datasheet_basis})


def make_run(run_dir: Path, seconds: list[float], converged: list[bool] | None = None,
             rcs: list[int] | None = None, mfu_basis: dict | None = None,
             profile: dict | None = None, contract: dict | None = None, vendor: str = "cpu",
             spec: dict | None = None, config: dict | None = None) -> Path:
    """A run of one training case (``contract``, default ``TRAINING``) with a round per entry
    of ``seconds`` (training time of that round), on the standard configuration or
    ``profile``; ``vendor``, ``spec`` and ``config`` as ``write_planned_run`` and
    ``finalize`` take them."""
    write_planned_run(run_dir, len(seconds), contract or TRAINING, profile, vendor=vendor,
                      spec=spec)
    for index, duration in enumerate(seconds):
        number = index + 1
        ok = True if converged is None else converged[index]
        rc = 0 if rcs is None else rcs[index]
        emit_round(run_dir / f"{CASE}/round{number}/h1_noderank0", seconds=duration,
                   converged=ok, finish=rc == 0)
        finalize(run_dir, number, rc, mfu_basis, config=config)
    return run_dir


def make_suite_run(run_dir: Path, contract: dict, finished: list[dict | None],
                   profile: dict | None = None, datasheet_basis: dict | None = None) -> Path:
    """A run of one case of ``contract``'s suite, a round per FINISHED value of ``finished``
    (None: the round wrote none), each compared with ``datasheet_basis`` (the plan's)."""
    write_planned_run(run_dir, len(finished), contract, profile)
    for number, value in enumerate(finished, start=1):
        emit_finished(run_dir / f"{CASE}/round{number}/h1_noderank0", value,
                      tuple(contract["window"]))
        finalize(run_dir, number, datasheet_basis=datasheet_basis)
    return run_dir


def flagperf_log(path, rank, seq_per_s, accuracy, converged=True):
    """A rank log with FlagPerf's own FINISHED keys, among other lines as FlagPerf writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = io.StringIO()
    stream.write("[INFO] 2022-11-14 15:00:16 init distributed\n")
    log = perflog.PerfLogger(rank=rank, stream=stream)
    log.log(perflog.INIT_START)
    log.log(perflog.TRAIN_START)
    log.log(perflog.FINISHED, {"e2e_time": 1820.5, "training_sequences_per_second": seq_per_s,
                               "converged": converged, "final_loss": 1.93,
                               "final_mlm_accuracy": accuracy, "raw_train_time": 1700.0,
                               "init_time": 40.2})
    path.write_text(stream.getvalue())
