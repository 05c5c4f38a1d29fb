"""MLPerf Training logs, read into round documents so that an MLPerf result sits beside ours.

An MLPerf Training run logs ``:::MLLOG {json}`` lines (mlcommons/logging, ``mllog``): each
``{"namespace", "time_ms", "event_type", "key", "value", "metadata"}``, anywhere in a line
(launchers prefix them, e.g. ``0: :::MLLOG``). A log is one run; a submission's folder of
``result_<i>.txt`` logs holds the runs of one benchmark, and MLPerf scores them together
(``stats.describe``'s olympic mean): here each log is a round of one case.

What a log gives (MLPerf Training Rules, "Timing"; keys of ``mllog/constants.py``):

* ``raw_train_time`` = ``run_stop`` - ``run_start`` (s): MLPerf's time to train;
  ``init_time`` = ``init_stop`` - the first ``init_start``; ``e2e_time`` = ``run_stop`` - the
  first ``init_start``;
* ``num_trained_samples``: ``samples_count`` of ``run_stop``'s metadata, else of the last
  event that has one, else (an epoch-based benchmark) the last ``epoch_num`` x
  ``train_samples``; ``p_whole`` = ``num_trained_samples / raw_train_time`` (samples/s,
  evaluation included, as in time to train); ``throughput``: the last ``tracked_stats``
  throughput, the submitter's own figure, where it logs one;
* ``final_eval_accuracy``: the last ``eval_accuracy``; ``target_eval_accuracy``: the closed
  division's quality target (``TARGETS``); ``converged``: ``run_stop`` ``status`` is
  ``success`` (and the target met, where known).

A log without ``run_start`` and ``run_stop``, or with an ``:::MLLOG`` line that does not
parse, is refused (``ConfigError``, naming the file and line): it was cut off or is still
being written, and MLPerf's own checker would refuse it too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.config.suites import round_verdict

PREFIX = ":::MLLOG"
#: The files of a submission's results folder that hold runs.
LOG_FILES = ("result_*.txt", "*.log", "*.txt")

#: MLPerf Training benchmarks (``submission_benchmark``) -> this catalog's model.
MODELS = {"resnet": "resnet50", "bert": "bert", "maskrcnn": "mask_rcnn", "ssd": "retinanet",
          "retinanet": "retinanet", "transformer": "transformer"}
#: Closed-division quality targets of ``eval_accuracy``: benchmark -> (comparison, value), as
#: mlcommons/logging's compliance checker tests them
#: (``compliance_checker/training_5.0.0/closed_<benchmark>.yaml``, resnet and ssd from
#: ``training_4.0.0``).
TARGETS = {"resnet": (">=", 0.759), "bert": (">=", 0.720), "ssd": (">=", 0.340),
           "retinanet": (">=", 0.340), "unet3d": (">=", 0.908), "dlrm_dcnv2": (">=", 0.80275),
           "rgat": (">=", 0.72), "gpt3": ("<=", 2.69), "llama2_70b_lora": ("<=", 0.925),
           "llama31_405b": ("<=", 5.6)}
#: Benchmarks whose ``epoch_num`` counts passes over ``train_samples``.
EPOCH_BASED = ("resnet", "ssd", "retinanet", "maskrcnn", "unet3d")
SUBMISSION_KEYS = ("submission_benchmark", "submission_org", "submission_platform",
                   "submission_division", "submission_status")


def is_mlperf_log(path: Path) -> bool:
    """A file with an ``:::MLLOG`` line in its first 64 KiB."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return PREFIX in handle.read(65536)
    except OSError:
        return False


def mlperf_logs(path: Path) -> list[Path]:
    """The MLPerf logs ``path`` names: the file itself, or a folder's ``result_*.txt``
    (else ``*.log`` and ``*.txt``) that hold ``:::MLLOG`` lines, sorted; ``[]`` for none."""
    if path.is_file():
        return [path] if is_mlperf_log(path) else []
    if not path.is_dir():
        return []
    for pattern in LOG_FILES:
        found = sorted(p for p in path.glob(pattern) if p.is_file() and is_mlperf_log(p))
        if found:
            return found
    return []


def read_events(path: Path) -> list[dict[str, Any]]:
    """The ``:::MLLOG`` records of one log, line by line, except those of the keys a run logs
    per step (none are needed: ``tracked_stats`` aside, only the last of which is kept).

    Raises:
        ConfigError: a record that does not parse (``<file>: line <n>``).
    """
    events: list[dict[str, Any]] = []
    tracked = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            start = line.find(PREFIX)
            if start < 0:
                continue
            try:
                record = json.loads(line[start + len(PREFIX):])
            except json.JSONDecodeError as err:
                raise ConfigError(f"an {PREFIX} record that does not parse ({err.msg}): the "
                                  "log was cut off or is still being written", str(path),
                                  f"line {number}") from None
            if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                raise ConfigError(f"an {PREFIX} record without a key", str(path), f"line {number}")
            if record["key"] == "tracked_stats":
                tracked = record
            else:
                events.append(record)
    return events + ([tracked] if tracked else [])


def _first(events: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    return next((e for e in events if e["key"] == key), None)


def _last(events: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    return next((e for e in reversed(events) if e["key"] == key), None)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def describe_log(path: Path) -> dict[str, Any]:
    """One MLPerf log: ``{benchmark, org, platform, division, status, start_ms, stop_ms,
    finished}`` with ``finished`` the figures of the module docstring (a FINISHED value as
    our rounds carry it).

    Raises:
        ConfigError: no ``run_start`` or ``run_stop`` (cut off, or still running), no
            ``submission_benchmark``, or a record that does not parse.
    """
    events = read_events(path)
    info = {key: (_first(events, key) or {}).get("value") for key in SUBMISSION_KEYS}
    if not info["submission_benchmark"]:
        raise ConfigError("no submission_benchmark record: not an MLPerf Training log",
                          str(path))
    start, stop = _first(events, "run_start"), _last(events, "run_stop")
    for name, record in (("run_start", start), ("run_stop", stop)):
        if record is None or _number(record.get("time_ms")) is None:
            raise ConfigError(f"no {name} record: the run was cut off or is still running",
                              str(path))
    benchmark = str(info["submission_benchmark"])
    start_ms, stop_ms = float(start["time_ms"]), float(stop["time_ms"])
    init = [float(e["time_ms"]) for e in events if e["key"] == "init_start"]
    init_stop = _first(events, "init_stop")
    finished: dict[str, Any] = {"raw_train_time": (stop_ms - start_ms) / 1000}
    if init:
        finished["e2e_time"] = (stop_ms - min(init)) / 1000
        if init_stop is not None:
            finished["init_time"] = (float(init_stop["time_ms"]) - min(init)) / 1000
    samples = _samples(events, stop, benchmark)
    if samples is not None:
        finished["num_trained_samples"] = samples
        if finished["raw_train_time"] > 0:
            finished["p_whole"] = samples / finished["raw_train_time"]
    tracked = _last(events, "tracked_stats")
    throughput = _number(((tracked or {}).get("value") or {}).get("throughput")) \
        if isinstance((tracked or {}).get("value"), dict) else None
    if throughput is not None:
        finished["throughput"] = throughput
    accuracy = _number((_last(events, "eval_accuracy") or {}).get("value"))
    if accuracy is not None:
        finished["final_eval_accuracy"] = accuracy
    status = str((stop.get("metadata") or {}).get("status") or "")
    converged = status == "success"
    if benchmark in TARGETS:
        comparison, target = TARGETS[benchmark]
        finished["target_eval_accuracy"] = target
        if accuracy is not None:
            converged &= accuracy >= target if comparison == ">=" else accuracy <= target
    finished["converged"] = converged
    batch = _number((_first(events, "global_batch_size") or {}).get("value"))
    if batch is not None:
        finished["global_batch_size"] = batch
    return {"benchmark": benchmark, "org": info["submission_org"],
            "platform": info["submission_platform"], "division": info["submission_division"],
            "status": status, "start_ms": int(start_ms), "stop_ms": int(stop_ms),
            "finished": finished}


def _samples(events: list[dict[str, Any]], stop: dict[str, Any], benchmark: str) -> float | None:
    """Samples trained (see the module docstring), or None."""
    for record in [stop, *reversed(events)]:
        count = _number((record.get("metadata") or {}).get("samples_count"))
        if count is not None:
            return count
    if benchmark in EPOCH_BASED:
        size = _number((_first(events, "train_samples") or {}).get("value"))
        epochs = [_number((e.get("metadata") or {}).get("epoch_num")) for e in events
                  if e["key"] in ("epoch_stop", "eval_accuracy")]
        epochs = [e for e in epochs if e is not None]
        if size is not None and epochs:
            return size * max(epochs)
    return None


def contract(benchmark: str) -> dict[str, Any]:
    """What an MLPerf run is judged by, as a case contract: its quality metric and target (where
    ``TARGETS`` knows it) and ``p_whole`` in samples/s as its throughput."""
    comparison, _ = TARGETS.get(benchmark, (">=", None))
    lower = comparison == "<="
    return {"suite": "training",
            "metrics": {"final_eval_accuracy": {"direction": "lower" if lower else "higher",
                                                "unit": "",
                                                "description": "MLPerf eval_accuracy"}},
            "target": ({"metric": "final_eval_accuracy", "comparison": comparison,
                        "config_key": "target_eval_accuracy"} if benchmark in TARGETS else None),
            "throughput": {"figure": "p_whole", "unit": "samples",
                           "count": "num_trained_samples"},
            "window": ["run_start", "run_stop"], "data_format": None, "references": []}


#: ``8xDGXH100`` -> 8 nodes of ``DGXH100``.
_PLATFORM = re.compile(r"^(\d+)x(.+)$")


def platform_nodes(platform: str | None) -> tuple[str, int | None]:
    """``(system, nnodes)`` of a ``submission_platform``: ``8xDGXH100`` -> ``(DGXH100, 8)``;
    a platform without a count is one node's name (``(platform, None)``)."""
    found = _PLATFORM.match(str(platform or ""))
    return (found.group(2), int(found.group(1))) if found else (str(platform or ""), None)


def import_mlperf(logs: list[Path]) -> list[dict[str, Any]]:
    """The round documents of one benchmark's MLPerf logs, a round per log (in order), as
    ``rounds.parse_round`` writes them (no nodes, no monitor).

    Raises:
        ConfigError: a log is refused (``describe_log``), or the logs are of different
            benchmarks or platforms.
    """
    described = [describe_log(path) for path in logs]
    first = described[0]
    for path, item in zip(logs, described):
        if (item["benchmark"], item["platform"]) != (first["benchmark"], first["platform"]):
            raise ConfigError(f"{item['benchmark']} on {item['platform']}, where "
                              f"{logs[0].name} is {first['benchmark']} on {first['platform']}: "
                              "one benchmark's runs per ingest", str(path))
    terms = contract(first["benchmark"])
    documents = []
    for number, item in enumerate(described, start=1):
        finished = item["finished"]
        passed, reason = round_verdict("training", finished, terms)
        if item["status"] != "success":
            passed, reason = False, f"run_stop status {item['status'] or 'missing'}"
        documents.append({
            "case_id": case_id(first), "round": number,
            "status": "passed" if passed else "failed", "reason": "" if passed else reason,
            "ran_to_finish": True, "passed": passed, "converged": bool(finished["converged"]),
            "suite": "training", "diagnostic": False, "profile": None, "contract": terms,
            "metric": "eval_accuracy", "started_ms": item["start_ms"],
            "ended_ms": item["stop_ms"],
            "wall_time": (item["stop_ms"] - item["start_ms"]) / 1000, "failed_hosts": [],
            "stopped_hosts": [], "finished": finished, "ranks": {"0": finished},
            "nodes": [], "config": {}, "overrides": {}, "mfu": None, "monitor": None,
            "mlperf": {k: item[k] for k in ("benchmark", "org", "platform", "division")}})
    return documents


def case_id(item: dict[str, Any]) -> str:
    """``mlperf-<benchmark>-<platform>``: an MLPerf result's case id."""
    platform = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(item.get("platform") or "unknown"))
    return f"mlperf-{item['benchmark']}-{platform}"
