"""A run's summary: every round.json of a run gathered per case, with the case's pass rule,
statistics, and what its figures mean (suite, contract, profile), so that reports and compare
need nothing else.

The case pass rule (``stats.case_passes``) counts the rounds that passed by their suite's rule
(``suites.round_verdict``, applied in ``rounds.round_status``): every planned round ran to
FINISHED and all passed, or, with 5 rounds or more, all but one (MLPerf Training Rules,
"Benchmark Results"). A round run on a hardware profile other than the standard configuration
is labelled as such (``profile_label``).

A case that declares published figures (case.yml ``references``) and ran on the standard
configuration, on the vendor, hardware, node count and processes per node of one of them, is
set beside it (``case_reference``): each figure's round mean over the published value. A base
case's figures are set beside the vendor's datasheet (``datasheet.case_datasheet``), and its
message-size sweep is averaged per size over rounds (``case_sweep``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from flagperf_ansible.config.datasheet import case_datasheet
from flagperf_ansible.results.flagperf_import import figure_direction, import_flagperf, is_flagperf_layout
from flagperf_ansible.results.layout import INTERRUPTED, ROUND_FILE, RUN_FILE, read_json
from flagperf_ansible.results.overview import run_overview
from flagperf_ansible.results.rounds import round_figures
from flagperf_ansible.results.stats import OLYMPIC_MIN_N, as_number, case_passes, describe, numeric_fields
from flagperf_ansible.config.suites import suite as suite_of


def profile_label(profile: Mapping[str, Any] | None) -> str:
    """How a profile is shown wherever its figures are: ``profile: cpu, not the standard
    configuration (reduced: image size, data set, epochs)``; ``""`` for the standard one."""
    if not profile or profile.get("standard"):
        return ""
    reduced = list(profile.get("reduced") or [])
    also = f" (reduced: {', '.join(reduced)})" if reduced else ""
    return f"profile: {profile.get('name')}, not the standard configuration{also}"


def profile_name(profile: Mapping[str, Any] | None) -> str | None:
    """The profile's name, None for the standard configuration (or unknown, FlagPerf's)."""
    if not profile or profile.get("standard"):
        return None
    return str(profile.get("name"))


def column_header(header: str, unit: str) -> str:
    """A figure's column header with its unit: ``p_whole images/s``; a header that already
    ends with its unit (``e2e s``) stays as it is."""
    return header if not unit or header.endswith(f" {unit}") else f"{header} {unit}"


def case_figures(suite_name: str | None, contract: Mapping[str, Any] | None,
                 metric: str | None = None) -> dict[str, dict[str, Any]]:
    """What a case's figures are: ``{FINISHED key: {direction, unit, header}}`` with direction
    +1 (higher is better), -1 (lower) or 0 (shown, not judged); the case's own metrics first,
    then its suite's figures (``suites.Suite.figures``, ``{unit}`` = the contract's throughput
    unit). Without a contract (FlagPerf's folders) the metric is ``final_<metric>`` with its
    direction by name (``flagperf_import.figure_direction``) and the throughput unit samples.
    A suite with no figures (diagnostic) shows ``e2e_time``, not judged.
    """
    unit = str(((contract or {}).get("throughput") or {}).get("unit") or "samples")
    out: dict[str, dict[str, Any]] = {}
    if contract is not None:
        for key, declared in (contract.get("metrics") or {}).items():
            out[key] = {"direction": +1 if declared.get("direction") == "higher" else -1,
                        "unit": str(declared.get("unit", "")),
                        "header": column_header(key, str(declared.get("unit", "")))}
    elif metric:
        key = f"final_{metric}"
        out[key] = {"direction": figure_direction(key), "unit": "", "header": key}
    own = suite_of(suite_name)
    for figure in own.figures:
        shown = figure.unit.format(unit=unit)
        out.setdefault(figure.key, {"direction": figure.direction, "unit": shown,
                                    "header": column_header(figure.header, shown)})
    if not out:
        out["e2e_time"] = {"direction": 0, "unit": "s", "header": "e2e s"}
    return out


def pass_rule(suite_name: str | None, repeat: int) -> str:
    """The case pass rule in words, for summary.md."""
    rule = f"every round {suite_of(suite_name).rule}"
    if repeat >= OLYMPIC_MIN_N:
        rule += f", or all but one (MLPerf, n >= {OLYMPIC_MIN_N})"
    return rule


def _case_stats(rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    measured = [round_figures(r) for r in rounds if r["status"] == "passed" and r.get("finished")]
    return {key: describe(f[key] for f in measured if isinstance(f.get(key), (int, float))
                          and not isinstance(f.get(key), bool))
            for key in numeric_fields(measured)}


def case_monitor(rounds: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the monitors saw over the case's passed rounds (round.json ``monitor.overall``):
    ``{device_util_percent_mean (%), device_mem_used_peak_bytes (the highest), device_power_w_mean
    (W), energy_unit, energy_per_unit_j (J per that unit), cpu_percent_mean (%)}``, means over
    the rounds; None when no passed round has a monitor summary."""
    overall = [r["monitor"]["overall"] for r in rounds if _round_passed(r)
               and isinstance(r.get("monitor"), dict) and isinstance(r["monitor"].get("overall"),
                                                                    dict)]
    if not overall:
        return None

    def mean(key: str) -> float | None:
        values = [o[key] for o in overall if as_number(o.get(key)) is not None]
        return sum(values) / len(values) if values else None

    unit = overall[0].get("energy_unit") or "sample"
    peaks = [o["device_mem_used_peak_bytes"] for o in overall
             if as_number(o.get("device_mem_used_peak_bytes")) is not None]
    return {"device_util_percent_mean": mean("device_util_percent_mean"),
            "device_mem_used_peak_bytes": max(peaks) if peaks else None,
            "device_power_w_mean": mean("device_power_w_mean"),
            "energy_unit": unit, "energy_per_unit_j": mean(f"energy_per_{unit}_j"),
            "cpu_percent_mean": mean("cpu_percent_mean")}


def busy_hosts(rounds: list[Mapping[str, Any]]) -> list[str]:
    """``["round 1: node1_noderank0: load 4.6 on 2 cores"]``: where a round's figures were
    measured beside other work (``monitoring.busy_host``)."""
    return [f"round {r['round']}: {entry}" for r in rounds
            for entry in ((r.get("monitor") or {}).get("overall") or {}).get("busy_hosts") or []]


def case_sweep(rounds: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    """A base case's message-size sweep over its passed rounds: FINISHED ``sweep`` rows
    (``{bytes, time_s, <bandwidth>: GB/s}``) averaged per size, ``{"columns": [bandwidth
    names], "rows": [{"bytes": n, "time_s": mean, <column>: mean, "rounds": k}]}``; None
    when no passed round has one."""
    by_size: dict[int, list[Mapping[str, Any]]] = {}
    for item in rounds:
        sweep = (item.get("finished") or {}).get("sweep") if _round_passed(item) else None
        for row in sweep if isinstance(sweep, list) else ():
            if isinstance(row, dict) and isinstance(row.get("bytes"), int):
                by_size.setdefault(row["bytes"], []).append(row)
    if not by_size:
        return None
    columns = sorted({k for rows in by_size.values() for row in rows for k in row
                      if k not in ("bytes", "time_s")})
    table = []
    for size in sorted(by_size):
        rows = by_size[size]
        entry: dict[str, Any] = {"bytes": size, "rounds": len(rows)}
        for name in ("time_s", *columns):
            values = [float(r[name]) for r in rows if isinstance(r.get(name), (int, float))]
            entry[name] = sum(values) / len(values) if values else None
        table.append(entry)
    return {"columns": columns, "rows": table}


def case_reference(vendor: str | None, spec: Mapping[str, Any] | None,
                   profile: Mapping[str, Any] | None, contract: Mapping[str, Any] | None,
                   config: Mapping[str, Any] | None,
                   stats: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The case's round figures beside the published ones of the same configuration.

    Args:
        vendor: the run's vendor (``nvidia``).
        spec: the case spec (``hardware``, ``nnodes``, ``nproc_per_node``).
        profile: the round's profile label; a profile is not the configuration published.
        contract: ``CaseDef.contract``; a missing ``references`` key means none.
        config: the rounds' hyper-parameters (their ``precision`` is checked).
        stats: ``stats.describe`` per FINISHED figure over the passed rounds.

    Returns:
        None when no reference has the run's vendor and the spec's hardware, nnodes and
        nproc_per_node, or the case ran on a profile. Otherwise ``{label, source, precision,
        note, mismatch, figures, ratios}``: ``figures`` the published values (throughput
        first, then the metrics, e2e_time last), ``ratios`` the round mean over the published
        value per figure (None where no passed round gave it, or the published value is not
        positive: a negative loss has no ratio). A ratio reads the figure's way:
        above 1 is better for a throughput or a higher-is-better metric, worse for e2e_time.
        ``mismatch`` says where the rounds' ``precision`` differs from the reference's
        (``precision amp, the reference ran fp32``), else ``""``.
    """
    if not vendor or not spec or profile_name(profile) is not None:
        return None
    wanted = (vendor, spec.get("hardware"), spec.get("nnodes"), spec.get("nproc_per_node"))
    reference = next((r for r in (contract or {}).get("references") or ()
                      if (r.get("vendor"), r.get("hardware"), r.get("nnodes"),
                          r.get("nproc_per_node")) == wanted), None)
    if reference is None:
        return None
    published = dict(reference["figures"])
    order = ["p_whole", "p_train", "p_core"]
    order += [k for k in published if k not in order and k != "e2e_time"] + ["e2e_time"]
    figures = {k: published[k] for k in order if k in published}
    ratios = {}
    for key, value in figures.items():
        mean = (stats.get(key) or {}).get("mean")
        ratios[key] = mean / value if isinstance(mean, (int, float)) and value > 0 else None
    precision = (config or {}).get("precision")
    mismatch = ""
    declared = reference["precision"]
    if precision is not None and declared and str(precision) != declared:
        mismatch = f"precision {precision}, the reference ran {reference['precision']}"
    return {"label": reference["label"], "source": reference["source"],
            "precision": reference["precision"], "note": reference.get("note") or "",
            "mismatch": mismatch, "figures": figures, "ratios": ratios}


def _round_passed(document: Mapping[str, Any]) -> bool:
    return bool(document.get("passed", document.get("status") == "passed"))


def build_summary(run_dir: Path, rounds: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Gather a run's rounds into the summary document (nothing is written).

    Args:
        run_dir: the run folder.
        rounds: the round documents, when read elsewhere (a FlagPerf folder, in memory);
            default every ``<case>/round<k>/round.json`` of the run.

    Returns:
        ``{run_id, status, vendor, source, provenance, overview, cases, frameworks}`` (schema
        ``schemas/summary.schema.json``; ``overview``: ``overview.run_overview``). Each case: ``case_id``, ``spec``, ``suite``,
        ``profile`` (None on the standard configuration), ``contract``, ``figures``
        (``case_figures``), ``metric``, ``diagnostic``, ``status`` and ``passed`` (by
        ``stats.case_passes``), ``pass_rule``, round
        counts, ``missing_rounds`` (planned in ``run.json``, no round.json), ``rounds`` and
        ``stats`` (``stats.describe`` of every numeric FINISHED figure and ``mfu`` over the
        rounds that passed), ``reference`` (``case_reference``: the published figures of the
        same configuration with the rounds' ratios to them, or None), ``datasheet``
        (``datasheet.case_datasheet``: each compared base figure's mean over the vendor's
        datasheet), ``sweep`` (``case_sweep``, or None), ``monitor`` (``case_monitor``) and
        ``busy_hosts`` (``busy_hosts``: measured beside other work). ``frameworks``:
        ``framework_comparison``. The run's status is ``passed`` only when every case passed,
        else ``interrupted`` when a case was interrupted or Ctrl-C or SIGTERM stopped the run
        (``layout.INTERRUPTED``) before all its rounds ran (an interrupted report changes no
        status), else ``failed``; a case's is ``interrupted`` by ``_unfinished_status``.
    """
    run = read_json(run_dir / RUN_FILE) if (run_dir / RUN_FILE).is_file() else {}
    run_interrupted = (run_dir / INTERRUPTED).is_file()
    planned = {c["case_id"]: c for c in run.get("cases", [])}
    if rounds is None:
        rounds = [read_json(p) for p in sorted(run_dir.glob(f"*/round*/{ROUND_FILE}"))]
    found: dict[str, list[dict[str, Any]]] = {}
    for document in rounds:
        found.setdefault(document["case_id"], []).append(document)
    cases = []
    all_passed = bool(planned or found)
    any_interrupted = any_missing = False
    for case_id in list(planned) + [c for c in found if c not in planned]:
        case_rounds = sorted(found.get(case_id, []), key=lambda r: r["round"])
        plan = planned.get(case_id) or {}
        first = case_rounds[0] if case_rounds else {}
        repeat = (plan.get("spec") or {}).get("repeat", len(case_rounds))
        missing = sorted(set(range(1, repeat + 1)) - {r["round"] for r in case_rounds})
        any_missing |= bool(missing)
        passed = sum(_round_passed(r) for r in case_rounds)
        ran = sum(bool(r.get("ran_to_finish", r["status"] == "passed")) for r in case_rounds)
        case_passed = case_passes(repeat, ran, passed) and not missing
        all_passed &= case_passed
        status = "passed" if case_passed else _unfinished_status(case_rounds, missing,
                                                                 run_interrupted)
        any_interrupted |= status == "interrupted"
        suite_name = plan.get("suite") or first.get("suite") or (
            "diagnostic" if plan.get("diagnostic") or first.get("diagnostic") else "training")
        contract = plan["contract"] if "contract" in plan else first.get("contract")
        metric = plan.get("metric") or first.get("metric")
        profile = plan["profile"] if "profile" in plan else first.get("profile")
        stats = _case_stats(case_rounds)
        config = next((r["config"] for r in case_rounds if r.get("config")), None)
        cases.append({
            "case_id": case_id,
            "spec": plan.get("spec"),
            "suite": suite_name,
            "profile": profile,
            "contract": contract,
            "figures": case_figures(suite_name, contract, metric),
            "metric": metric,
            "diagnostic": bool(plan.get("diagnostic", first.get("diagnostic", False)))
            or suite_name == "diagnostic",
            "status": status,
            "passed": case_passed,
            "pass_rule": pass_rule(suite_name, repeat),
            "rounds_planned": repeat,
            "rounds_passed": passed,
            "rounds_ran_to_finish": ran,
            "rounds_converged": sum(bool(r.get("converged")) for r in case_rounds),
            "missing_rounds": missing,
            "rounds": [
                {"round": r["round"], "status": r["status"], "reason": r.get("reason", ""),
                 "passed": _round_passed(r), "converged": r.get("converged", False),
                 "wall_time": r.get("wall_time"), "finished": r.get("finished"),
                 "mfu": r.get("mfu"), "datasheet": r.get("datasheet") or {},
                 "overrides": r.get("overrides") or {},
                 "nodes": r.get("nodes", []),
                 **({"slurm": r["slurm"]} if r.get("slurm") else {})}
                for r in case_rounds
            ],
            "stats": stats,
            "reference": case_reference(run.get("vendor"), plan.get("spec"), profile,
                                        contract, config, stats),
            "datasheet": case_datasheet(case_rounds, stats),
            "sweep": case_sweep(case_rounds),
            "monitor": case_monitor(case_rounds),
            "busy_hosts": busy_hosts(case_rounds),
            "vendor_config": next((r["vendor_config"] for r in case_rounds
                                   if r.get("vendor_config")), None),
        })
    return {
        "run_id": run.get("run_id", run_dir.name),
        "status": "passed" if all_passed else (
            "interrupted" if any_interrupted or (run_interrupted and any_missing) else "failed"),
        "vendor": run.get("vendor"),
        "source": "flagperf-ansible" if run else "flagperf",
        "provenance": run.get("provenance"),
        "overview": run_overview(cases, run, rounds),
        "cases": cases,
        "frameworks": framework_comparison(cases),
    }


def _unfinished_status(case_rounds: list[dict[str, Any]], missing: list[int],
                       run_interrupted: bool) -> str:
    """A case that did not pass: ``interrupted`` when a round of it was, or when the run was
    interrupted before all its rounds ran and none of those that ran failed; else
    ``failed``."""
    statuses = {r["status"] for r in case_rounds}
    if "interrupted" in statuses:
        return "interrupted"
    if run_interrupted and missing and statuses <= {"passed"}:
        return "interrupted"
    return "failed"


def framework_comparison(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's cases of one model on more than one framework, side by side: one entry per
    model, suite, hardware, nnodes, nproc_per_node and profile that ran on two frameworks or
    more, ``{model, suite, configuration ("<hardware>x<nnodes>x<nproc>"), profile (its name or
    None), figures: [keys every one of them has, in the first case's order], rows:
    [{framework, case_id, status, means: {figure: mean over the passed rounds or None}}]}``.
    Every framework's case writes the same FINISHED keys (the driver core), so the columns
    mean the same thing in every row."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for case in cases:
        spec = case.get("spec") or {}
        if not spec.get("framework"):
            continue
        key = (spec.get("model"), case["suite"], spec.get("hardware"), spec.get("nnodes"),
               spec.get("nproc_per_node"), profile_name(case.get("profile")))
        groups.setdefault(key, []).append(case)
    comparison = []
    for (model, suite, hardware, nnodes, nproc, profile), members in groups.items():
        if len({m["spec"]["framework"] for m in members}) < 2:
            continue
        figures = [f for f in members[0]["figures"] if all(f in m["figures"] for m in members)]
        comparison.append({
            "model": model, "suite": suite, "configuration": f"{hardware}x{nnodes}x{nproc}",
            "profile": profile, "figures": figures,
            "rows": [{"framework": m["spec"]["framework"], "case_id": m["case_id"],
                      "status": m["status"],
                      "means": {f: ((m.get("stats") or {}).get(f) or {}).get("mean")
                                for f in figures}} for m in members]})
    return comparison


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary without writing anything: built from its round.json files, or from its
    FlagPerf rank logs in memory (``flagperf_import.import_flagperf``)."""
    rounds = import_flagperf(run_dir) if is_flagperf_layout(run_dir) else None
    return build_summary(run_dir, rounds)
