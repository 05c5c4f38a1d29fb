"""The run at a glance, computed once into summary.json (``overview``) and shown first by every
report: how many cases passed per suite, when, for how long and on which hosts the run ran, and
a row per case with its main figure, its metric against the target, its time and its rounds.

The main figure is the one FlagPerf puts first for the suite: a training or inference case's
declared throughput (``contract.throughput.figure``: ``p_train``, ``p_inference_core``), a base
case's first measured metric (``busbw`` first where the case has it, as nccl-tests reports
it). Every value is the mean over the case's passed rounds (None where none passed). Where no
round passed, the metric and its target are the last round's that reported them, so a user
sees how far a failed round got.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping

from flagperf_ansible.results.stats import as_number

#: Suites in the order reports show them.
SUITE_ORDER = ("base", "training", "inference", "diagnostic")


def main_figure(case: Mapping[str, Any]) -> str | None:
    """The key of the case's main figure (see the module docstring), or None."""
    contract = case.get("contract") or {}
    stats = case.get("stats") or {}
    if (case.get("suite") or "training") == "base":
        metrics = list(contract.get("metrics") or {})
        ordered = (["busbw"] if "busbw" in metrics else []) + metrics
        return next((m for m in ordered if _mean(stats, m) is not None),
                    ordered[0] if ordered else None)
    declared = (contract.get("throughput") or {}).get("figure")
    return declared or ("p_whole" if "p_whole" in stats else None)


def _mean(stats: Mapping[str, Any], key: str | None) -> float | None:
    return as_number((stats.get(key) or {}).get("mean")) if key else None


def _last_round(case: Mapping[str, Any], key: str | None) -> tuple[float | None, str | None]:
    """The last round's FINISHED ``key`` that has one, and ``"round <k> <status>"``."""
    for round_ in reversed(case.get("rounds") or []):
        value = as_number((round_.get("finished") or {}).get(key)) if key else None
        if value is not None:
            return value, f"round {round_.get('round')} {round_.get('status')}"
    return None, None


def case_row(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case's overview row: ``{case_id, suite, status, diagnostic, profile (its name or
    None), figure, value, unit, metric, metric_value, comparison (">=" or "<="), target,
    metric_of, time_figure, time_s, rounds_passed, rounds_planned, busy (a round was measured
    beside other work)}``; values are means over the passed rounds, None where there is none.
    Where no round passed, ``metric_value`` and ``target`` are the last round's that reported
    the metric, and ``metric_of`` says which (``"round 1 failed"``); else it is None."""
    suite = case.get("suite") or "training"
    stats = case.get("stats") or {}
    figures = case.get("figures") or {}
    figure = main_figure(case)
    target = (case.get("contract") or {}).get("target") or {}
    metric = target.get("metric")
    time_figure = "raw_train_time" if suite == "training" else "e2e_time"
    metric_value, target_value = _mean(stats, metric), _mean(stats, target.get("config_key"))
    metric_of = None
    if metric_value is None:
        metric_value, metric_of = _last_round(case, metric)
        if metric_of is not None and target_value is None:
            target_value = _last_round(case, target.get("config_key"))[0]
    return {
        "case_id": case["case_id"], "suite": suite, "status": case["status"],
        "diagnostic": bool(case.get("diagnostic")),
        "profile": (case.get("profile") or {}).get("name")
        if not (case.get("profile") or {}).get("standard") else None,
        "figure": figure, "value": _mean(stats, figure),
        "unit": (figures.get(figure) or {}).get("unit", "") if figure else "",
        "metric": metric, "metric_value": metric_value,
        "comparison": target.get("comparison"), "target": target_value, "metric_of": metric_of,
        "time_figure": time_figure, "time_s": _mean(stats, time_figure),
        "rounds_passed": case.get("rounds_passed", 0),
        "rounds_planned": case.get("rounds_planned", 0),
        "busy": bool(case.get("busy_hosts")),
    }


def _epoch_s(created: Any) -> float | None:
    try:
        return datetime.strptime(str(created), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def run_overview(cases: list[Mapping[str, Any]], run: Mapping[str, Any],
                 rounds: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"created" (run.json's, ISO 8601), "duration_s" (created to the last round's end, or
    None), "hosts" (the rounds' node hosts, as round.json names them), "counts": {suite:
    {"passed", "cases"}} in ``SUITE_ORDER``, "rows": [case_row per case, grouped by suite]}``.

    Args:
        cases: the summary's case entries; run: run.json; rounds: every round.json.
    """
    rounds = list(rounds)
    ended = [r["ended_ms"] for r in rounds if isinstance(r.get("ended_ms"), (int, float))]
    start = _epoch_s(run.get("created"))
    rows = [case_row(c) for c in cases]
    order = {name: i for i, name in enumerate(SUITE_ORDER)}
    rows.sort(key=lambda r: order.get("diagnostic" if r["diagnostic"] else r["suite"],
                                      len(order)))
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        entry = counts.setdefault("diagnostic" if row["diagnostic"] else row["suite"],
                                  {"passed": 0, "cases": 0})
        entry["cases"] += 1
        entry["passed"] += row["status"] == "passed"
    hosts = sorted({str(n["host"]) for r in rounds for n in r.get("nodes") or [] if n.get("host")})
    return {"created": run.get("created"),
            "duration_s": (max(ended) / 1000 - start) if ended and start is not None else None,
            "hosts": hosts, "counts": counts, "rows": rows}


def counts_line(overview: Mapping[str, Any]) -> str:
    """``30/30 passed: base 7/7, training 19/19, inference 4/4``."""
    counts = overview.get("counts") or {}
    passed = sum(c["passed"] for c in counts.values())
    total = sum(c["cases"] for c in counts.values())
    parts = [f"{suite} {c['passed']}/{c['cases']}" for suite, c in counts.items()]
    return f"{passed}/{total} passed" + (f": {', '.join(parts)}" if parts else "")


def when_line(overview: Mapping[str, Any], vendor: str | None) -> str:
    """``started 2026-11-27T14:48:15+0000, took 2 h 38 min; vendor cpu; 1 host: localhost``."""
    parts = []
    if overview.get("created"):
        parts.append(f"started {overview['created']}")
    if overview.get("duration_s") is not None:
        parts.append(f"took {duration_text(overview['duration_s'])}")
    if vendor:
        parts.append(f"vendor {vendor}")
    hosts = overview.get("hosts") or []
    if hosts:
        shown = ", ".join(hosts[:8]) + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")
        parts.append(f"{len(hosts)} host{'s' if len(hosts) > 1 else ''}: {shown}")
    return "; ".join(parts)


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min 5 s``, ``2 h 38 min``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
