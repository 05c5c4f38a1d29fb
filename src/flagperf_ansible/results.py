"""The results layout (DESIGN.md "Results layout"): run.json, round.json, summary.json.

::

    <results_dir>/<run_id>/
      run.json  summary.json  summary.md
      <case_id>/round<k>/
        round.json
        <host>_noderank<i>/   rank<R>.out.log, monitor files, launcher.log, config.yaml

Every JSON file is written atomically (temporary file, then rename), so a reader never sees
half a file and an interrupted run keeps what it had.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from flagperf_ansible.monitoring import summarize_round
from flagperf_ansible.perflog import find_rank_logs, parse_rank_log
from flagperf_ansible.stats import describe, numeric_fields

ROUND_STATUSES = ("passed", "failed", "timeout", "interrupted")
_NODE_DIR = re.compile(r"^(?P<host>.+)_noderank(?P<noderank>\d+)$")


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2, sort_keys=False, default=str)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def node_dir_name(host: str, noderank: int) -> str:
    """``<host>_noderank<i>``: one host's folder in a round."""
    return f"{host}_noderank{noderank}"


def round_status(hosts: list[dict[str, Any]], finished: dict[str, Any] | None,
                 interrupted: bool = False) -> tuple[str, str]:
    """``(status, reason)`` of a round from its hosts' launch results and rank 0's FINISHED.

    ``hosts`` items carry ``host``, ``rc`` (None when unknown) and ``timed_out``.
    """
    if interrupted:
        return "interrupted", "the run was interrupted"
    timed_out = [h["host"] for h in hosts if h.get("timed_out")]
    if timed_out:
        return "timeout", f"no exit within the case timeout on {', '.join(timed_out)}"
    failed = [f"{h['host']} (exit {h.get('rc')})" for h in hosts if h.get("rc") != 0]
    if failed:
        return "failed", f"launch failed on {', '.join(failed)}"
    if finished is None:
        return "failed", "rank 0 wrote no FINISHED event"
    if finished.get("converged") is not True:
        return "failed", "did not converge to its target"
    return "passed", ""


def finalize_round(record: dict[str, Any]) -> dict[str, Any]:
    """Parse one round's fetched rank logs and write its ``round.json``.

    Args:
        record: what the collect role hands over: ``run_dir``, ``key``
            (``<case_id>/round<k>``), ``case_id``, ``round``, ``hosts`` (each ``host``,
            ``noderank``, ``rc``, ``timed_out``), ``config``, ``overrides``, ``metric``,
            ``diagnostic``, ``started_ms``, ``ended_ms`` and optionally ``interrupted``.

    Returns:
        The round document written (see DESIGN.md; schema in ``schemas/round.schema.json``).
        Its ``monitor`` key is ``monitoring.summarize_round``: per node and overall, the
        monitors' status (a monitor that died says so), utilisation, memory, power, energy.
    """
    round_dir = Path(record["run_dir"]) / record["key"]
    ranks: dict[str, Any] = {}
    bad_lines = 0
    events_by_rank = []
    for path in find_rank_logs(round_dir):
        log = parse_rank_log(path)
        bad_lines += log.bad_lines
        events_by_rank.append(log.events)
        if log.rank is not None:
            ranks[str(log.rank)] = log.finished
    finished = ranks.get("0")
    hosts = list(record.get("hosts") or [])
    status, reason = round_status(hosts, finished, bool(record.get("interrupted")))
    nodes = []
    for host in hosts:
        node = round_dir / node_dir_name(host["host"], int(host["noderank"]))
        nodes.append({
            "host": host["host"], "noderank": int(host["noderank"]), "rc": host.get("rc"),
            "timed_out": bool(host.get("timed_out")), "dir": node.name,
            "files": sorted(p.name for p in node.iterdir()) if node.is_dir() else [],
        })
    started, ended = record.get("started_ms"), record.get("ended_ms")
    document = {
        "case_id": record["case_id"],
        "round": int(record["round"]),
        "status": status,
        "reason": reason,
        "converged": bool(finished and finished.get("converged") is True),
        "diagnostic": bool(record.get("diagnostic")),
        "metric": record.get("metric"),
        "started_ms": started,
        "ended_ms": ended,
        "wall_time": (ended - started) / 1000.0 if started and ended else None,
        "failed_hosts": [h["host"] for h in hosts if h.get("rc") != 0 or h.get("timed_out")],
        "finished": finished,
        "ranks": ranks,
        "unparsed_perflog_lines": bad_lines,
        "nodes": nodes,
        "config": record.get("config") or {},
        "overrides": record.get("overrides") or {},
        "monitor": summarize_round(round_dir, [n["dir"] for n in nodes], events_by_rank,
                                   finished, ended),
    }
    write_json(round_dir / "round.json", document)
    return document


def write_run(run_dir: Path, plan: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Write ``run.json``: what was asked (cases and rounds planned) and how."""
    document = {
        "run_id": run_dir.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "vendor": plan["vendor"],
        "container_runtime": plan["runtime"],
        "cases": plan["cases"],
        **extra,
    }
    write_json(run_dir / "run.json", document)
    return document


def _case_stats(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    measured = [r["finished"] for r in rounds if r["status"] == "passed" and r.get("finished")]
    return {key: describe(f[key] for f in measured if isinstance(f.get(key), (int, float)))
            for key in numeric_fields(measured)}


def build_summary(run_dir: Path) -> dict[str, Any]:
    """Gather every ``round.json`` of a run into the summary document (nothing is written).

    A case's rounds that ``run.json`` planned but that have no ``round.json`` are listed as
    ``missing``; the run's status is ``passed`` only when every planned round passed.
    """
    run = read_json(run_dir / "run.json") if (run_dir / "run.json").is_file() else {}
    planned = {c["case_id"]: c for c in run.get("cases", [])}
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(run_dir.glob("*/round*/round.json")):
        document = read_json(path)
        found.setdefault(document["case_id"], []).append(document)
    cases = []
    all_passed = bool(planned or found)
    for case_id in list(planned) + [c for c in found if c not in planned]:
        rounds = sorted(found.get(case_id, []), key=lambda r: r["round"])
        repeat = (planned.get(case_id) or {}).get("spec", {}).get("repeat", len(rounds))
        missing = sorted(set(range(1, repeat + 1)) - {r["round"] for r in rounds})
        passed = sum(r["status"] == "passed" for r in rounds)
        case_passed = passed == repeat and not missing
        all_passed &= case_passed
        cases.append({
            "case_id": case_id,
            "spec": (planned.get(case_id) or {}).get("spec"),
            "metric": (planned.get(case_id) or {}).get("metric")
            or (rounds[0]["metric"] if rounds else None),
            "diagnostic": (planned.get(case_id) or {}).get("diagnostic", False),
            "status": "passed" if case_passed else "failed",
            "rounds_passed": passed,
            "rounds_converged": sum(bool(r.get("converged")) for r in rounds),
            "missing_rounds": missing,
            "rounds": [
                {"round": r["round"], "status": r["status"], "reason": r.get("reason", ""),
                 "converged": r.get("converged", False), "wall_time": r.get("wall_time"),
                 "finished": r.get("finished"), "nodes": r.get("nodes", [])}
                for r in rounds
            ],
            "stats": _case_stats(rounds),
        })
    return {
        "run_id": run.get("run_id", run_dir.name),
        "status": "passed" if all_passed else "failed",
        "vendor": run.get("vendor"),
        "cases": cases,
    }


def write_summary(run_dir: Path) -> dict[str, Any]:
    """Rebuild ``summary.json`` and ``summary.md`` from the run's round.json files."""
    from flagperf_ansible.report import summary_markdown

    summary = build_summary(run_dir)
    write_json(run_dir / "summary.json", summary)
    text = summary_markdown(summary)
    tmp = run_dir / ".summary.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, run_dir / "summary.md")
    return summary
