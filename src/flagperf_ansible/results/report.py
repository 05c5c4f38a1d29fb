"""Human-readable summaries: Markdown (summary.md), a self-contained HTML page with plots
(summary.html) and the console's lines; and ``write_summary``, the one writer of a run's summary
files (the results callback calls it when the report play runs; ``summarize`` when a person
asks). Each opens with the run's overview (``flagperf_ansible.results.overview``); the console shows it
alone, a line per case, and leaves the tables to summary.md.

Columns and units come from each case's ``figures`` in the summary (its own metrics, then its
suite's figures, ``summary.case_figures``); a round run on a profile other than the standard
configuration is labelled wherever its figures are shown (``summary.profile_label``), and a case
set beside published figures shows its ratios to them in one line (``reference_line``); a base
case shows each figure against the vendor's datasheet (``datasheet_lines``), how it is derived
(``formula_lines``) and its message-size sweep as a table and a plot.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

from flagperf_ansible.results.layout import ROUND_START, SUMMARY_HTML, SUMMARY_JSON, SUMMARY_MD, \
    read_optional, write_json, write_text
from flagperf_ansible.results.monitoring import DEFAULT_WINDOW, read_stream
from flagperf_ansible.results.overview import counts_line, run_overview, when_line
from flagperf_ansible.results.perflog import parse_rank_log
from flagperf_ansible.results.rounds import reparse_rounds, round_figures
from flagperf_ansible.config.suites import FINISHED_UNITS
from flagperf_ansible.config.suites import suite as suite_of
from flagperf_ansible.results.summary import case_figures, profile_label, read_summary

STAT_COLUMNS = ("n", "mean", "std", "cv", "min", "max", "olympic_mean")
#: Colours and line styles of the PerfLog events drawn on monitor timelines: the monitoring
#: window's start and end events, and evaluations.
WINDOW_MARKS = (("tab:green", "-"), ("tab:red", "-"))
EVALUATE_MARK = ("EVALUATE", "tab:gray", ":")
#: The label of figures measured beside other work (``monitoring.busy_host``).
BUSY_LABEL = "measured on a busy host"


def fmt(value: Any) -> str:
    """A value as the reports show it: 4 significant digits (whole above 10^4), ``-`` for
    None, ``yes``/``no`` for a bool."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def figures_of(case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The case's ``figures`` (``{key: {direction, unit, header}}``), or, for a summary written
    before they were kept, derived from its suite and contract."""
    return case.get("figures") or case_figures(case.get("suite"), case.get("contract"),
                                               case.get("metric"))


def case_table(case: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one case: a row per round, then each statistic across rounds.

    Columns: round, status, then each of the case's figures (``figures_of``: its metrics, then
    its suite's figures) headed with its unit, e.g. ``final_acc1 %``, ``p_whole images/s``.
    Statistics cover the rounds that passed.
    """
    figures = figures_of(case)
    columns = list(figures)
    header = ["round", "status", *(figures[c]["header"] for c in columns)]
    rows = []
    for item in case["rounds"]:
        values = round_figures(item)
        rows.append([str(item["round"]), item["status"], *(fmt(values.get(c)) for c in columns)])
    for missing in case.get("missing_rounds", []):
        rows.append([str(missing), "missing", *("-" for _ in columns)])
    stats = case.get("stats") or {}
    # With one passed round the statistics would repeat it: the statistics table says n/a.
    if stats and max((v.get("n") or 0) for v in stats.values()) > 1:
        for name in STAT_COLUMNS[1:]:
            rows.append([name, "", *(_stat((stats.get(c) or {}), name) for c in columns)])
    return header, rows


def _stat(values: dict[str, Any], name: str) -> str:
    """One statistic as shown: ``n/a`` where it needs more rounds than there are (std and cv
    two, the olympic mean five)."""
    if name in ("std", "cv") and (values.get("n") or 0) < 2 or (
            name == "olympic_mean" and values.get(name) is None and values):
        return "n/a"
    return fmt(values.get(name))


def is_case_fact(name: str) -> bool:
    """FINISHED keys that are facts of the case, not measurements, shown once and not as
    statistics: ``target_<metric>`` (the configured target) and ``world_size``."""
    return name.startswith("target_") or name == "world_size"


def case_facts(case: dict[str, Any]) -> str:
    """``Case facts: target_acc1 90, world_size 1.`` (from the passed rounds), or ``""``."""
    facts = [f"{name} {fmt(values.get('mean'))}"
             for name, values in (case.get("stats") or {}).items() if is_case_fact(name)]
    return f"Case facts: {', '.join(facts)}." if facts else ""


def figure_unit(case: dict[str, Any], name: str) -> str:
    """The unit of a case's FINISHED figure ``name``: as the case declares it (its figures;
    ``target_<metric>`` in its metric's unit), else its throughput's count unit, else the
    standard FINISHED unit (``e2e_time`` s); ``""`` when none is known."""
    figures = figures_of(case)
    # FINISHED's target_<metric> is in the unit of its final_<metric> (DESIGN.md, PerfLog).
    paired = f"final_{name[len('target_'):]}" if name.startswith("target_") else name
    declared = (figures.get(name) or figures.get(paired) or {}).get("unit")
    if declared is not None:
        return str(declared)
    throughput = (case.get("contract") or {}).get("throughput") or {}
    if name == throughput.get("count"):
        return str(throughput.get("unit") or "")
    return FINISHED_UNITS.get(name, "").format(unit=throughput.get("unit") or "samples")


def stats_table(case: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Every numeric figure's statistics over the passed rounds: a row per figure, with its
    unit where the case declares one; case facts (``is_case_fact``) left out, and ``n/a``
    where a statistic needs more rounds."""
    header = ["figure", "unit", *STAT_COLUMNS]
    rows = [[name, figure_unit(case, name), *(_stat(values, c) for c in STAT_COLUMNS)]
            for name, values in (case.get("stats") or {}).items() if not is_case_fact(name)]
    return header, rows


def units_line(case: dict[str, Any]) -> str:
    """The units of a case's columns in words: ``Units: final_acc1 in %; p_whole, p_train,
    p_core in images/s; ...``."""
    by_unit: dict[str, list[str]] = {}
    for key, figure in figures_of(case).items():
        by_unit.setdefault(figure.get("unit") or "", []).append(key)
    parts = [f"{', '.join(keys)} in {unit}" for unit, keys in by_unit.items() if unit]
    plain = by_unit.get("", [])
    if plain:
        parts.append(f"{', '.join(plain)} without a unit (MFU: a fraction of the peak FLOP/s, "
                     "see README)")
    return "Units: " + "; ".join(parts + ["cv = std / mean"]) + "."


def _case_heading(case: dict[str, Any]) -> tuple[str, list[str]]:
    """``(title, notes)`` of a case: its id, status and suite; the diagnostic and profile
    labels; the busy-host label; what the monitors saw."""
    label = "; diagnostic, not a benchmark result" if case.get("diagnostic") else ""
    title = f"{case['case_id']} ({case['status']}{label})"
    notes = [f"Suite: {case.get('suite') or 'training'}."]
    shown = profile_label(case.get("profile"))
    if shown:
        description = (case.get("profile") or {}).get("description")
        notes.append(f"{shown}." + (f" {description}." if description else ""))
    if case.get("busy_hosts"):
        notes.append(f"{BUSY_LABEL}: {'; '.join(case['busy_hosts'])} (other work competed "
                     "with the measurement).")
    monitor = monitor_line(case)
    if monitor:
        notes.append(monitor)
    return title, notes + inference_notes(case)


def _gb(value: Any) -> str:
    return f"{value / 1e9:.3g} GB" if isinstance(value, (int, float)) else "n/a"


def monitor_line(case: dict[str, Any]) -> str:
    """``Monitors (means over the passed rounds): device utilisation 97.7 %, peak device memory
    3.37 GB, device power n/a, energy per image n/a, host CPU 97.7 %.``, or ``""``."""
    seen = case.get("monitor")
    if not seen:
        return ""

    def value(key: str, unit: str) -> str:
        number = seen.get(key)
        return f"{number:.3g} {unit}" if isinstance(number, (int, float)) else "n/a"

    return ("Monitors (means over the passed rounds): device utilisation "
            f"{value('device_util_percent_mean', '%')}, peak device memory "
            f"{_gb(seen.get('device_mem_used_peak_bytes'))}, device power "
            f"{value('device_power_w_mean', 'W')}, energy per {seen.get('energy_unit')} "
            f"{value('energy_per_unit_j', 'J')}, host CPU {value('cpu_percent_mean', '%')}.")


def inference_notes(case: dict[str, Any]) -> list[str]:
    """An inference case's vendor configuration (seed 004: what the vendor's file changed and
    added) and a non-zero ``foo_time``: time the engine reports as not its own, which the seed
    subtracts and asks to be reviewed; here it is kept in the figures and flagged."""
    notes = []
    record = case.get("vendor_config") or {}
    if record.get("file"):
        changed = ", ".join(f"{k} {v['default']!r} -> {v['value']!r}"
                            for k, v in record["changed"].items()) or "nothing"
        added = ", ".join(f"{k} {v!r}" for k, v in record["added"].items())
        notes.append(f"Vendor configuration {record['file']}: changed {changed}"
                     + (f"; added (new keys, a warning) {added}" if added else "") + ".")
    foo = (case.get("stats") or {}).get("foo_time") or {}
    if isinstance(foo.get("max"), (int, float)) and foo["max"] > 0:
        notes.append(f"REVIEW: the engine reported foo_time up to {fmt(foo['max'])} s (work it "
                     "calls not its own); throughputs include it, nothing is subtracted.")
    return notes


def reference_line(case: dict[str, Any]) -> str:
    """The case's figures against the published ones (summary ``reference``), or ``""``:
    ``vs FlagPerf's A100 1x8 (fp32, <source>): p_whole 0.97 x, final_acc1 1.00 x, e2e_time
    1.10 x (lower is better)``, each the round mean over the published value."""
    reference = case.get("reference")
    if not reference:
        return ""
    figures = figures_of(case)
    parts = []
    for key, ratio in reference["ratios"].items():
        if ratio is None:
            continue
        lower = (figures.get(key) or {}).get("direction", -1 if key == "e2e_time" else 1) < 0
        parts.append(f"{key} {ratio:.2f} x" + (" (lower is better)" if lower else ""))
    shown = ", ".join(parts) or "no passed round gives a published figure"
    where = ", ".join(t for t in (reference["precision"], reference["source"]) if t)
    line = f"vs {reference['label']} ({where}): {shown}"
    tail = [text for text in (reference.get("mismatch"), reference.get("note")) if text]
    return line + "".join(f"; {text}" for text in tail) + "."


def context_line(case: dict[str, Any]) -> str:
    """FlagPerf's published figures for a case they cannot be compared with (a profile run, or
    a configuration FlagPerf did not publish), labelled as context, with no ratio; ``""``
    when the case has a ``reference`` or publishes nothing."""
    references = (case.get("contract") or {}).get("references") or []
    if case.get("reference") or not references:
        return ""
    figures = figures_of(case)
    shown = []
    for reference in references:
        values = ", ".join(f"{key} {fmt(value)}"
                           + (f" {figures[key]['unit']}" if (figures.get(key) or {}).get("unit")
                              else "")
                           for key, value in reference["figures"].items())
        shown.append(f"{reference['label']} ({reference.get('precision') or ''}): {values}"
                     .replace(" ()", ""))
    why = (f"this ran {profile_label(case.get('profile'))}" if profile_label(case.get("profile"))
           else "not this configuration")
    return f"For context only, no ratio ({why}): {'; '.join(shown)}."


def datasheet_lines(case: dict[str, Any]) -> list[str]:
    """Each compared figure against the vendor's datasheet (summary ``datasheet``), one line
    each: ``busbw 105 GB/s = 35.0 % of spec (interconnect_bandwidth 300 GB/s per device and
    direction; stated: 600 GB/s (both directions); <source>)``, or ``tflops_tf32: no ratio to
    the datasheet: not measured: <reason>``."""
    lines = []
    for key, item in (case.get("datasheet") or {}).items():
        unit = item.get("unit") or ""
        if item.get("ratio") is None:
            shown = f" {fmt(item['mean'])} {unit}" if item.get("mean") is not None else ""
            lines.append(f"{key}{shown}: no ratio to the datasheet: {item.get('reason')}")
            continue
        per = "per device and direction" if unit.endswith("B/s") else "per device"
        lines.append(f"{key} {fmt(item['mean'])} {unit} = {100 * item['ratio']:.1f} % of spec "
                     f"({item['entry']} {fmt(item['spec'])} {unit} {per}; "
                     f"stated: {item['quoted']}; {item['source']})")
    return lines


def formula_lines(case: dict[str, Any]) -> list[str]:
    """How a base case derives each figure: its metrics' descriptions (``case.yml``), e.g.
    ``busbw (GB/s): busbw = algbw x 2(n-1)/n, n the world size (nccl-tests)``."""
    if case.get("suite") != "base":
        return []
    metrics = (case.get("contract") or {}).get("metrics") or {}
    return [f"{key} ({m.get('unit') or '-'}): {m['description']}" for key, m in metrics.items()
            if m.get("description")]


def sweep_table(case: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """Header and rows of a base case's message-size sweep (summary ``sweep``): size in bytes,
    time per iteration in microseconds, each bandwidth in GB/s, means over the passed rounds."""
    sweep = case.get("sweep")
    if not sweep:
        return None
    header = ["bytes", "time us", *(f"{c} GB/s" for c in sweep["columns"]), "rounds"]
    rows = [[str(r["bytes"]), fmt(r["time_s"] * 1e6 if r.get("time_s") is not None else None),
             *(fmt(r.get(c)) for c in sweep["columns"]), str(r["rounds"])]
            for r in sweep["rows"]]
    return header, rows


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def _mfu_note(case: dict[str, Any]) -> str:
    basis = next((r.get("mfu") for r in case["rounds"] if r.get("mfu")), None)
    if not basis or case.get("suite") == "base":      # base figures meet the datasheet instead
        return ""
    if basis.get("computed_by") == "case":
        return "MFU: emitted by the case in FINISHED."
    if basis.get("reason"):
        return f"MFU: not reported: {basis['reason']}."
    return (f"MFU = {basis['throughput']} x {basis['flops_per_unit']:.4g} FLOPs per unit "
            f"({basis['flops_source']}) / ({basis['devices']} x "
            f"{basis['peak_flops_per_device']:.4g} {basis['precision']} FLOP/s, "
            f"{basis['peak_source']}).")


def _host_line(case: dict[str, Any]) -> str:
    for item in case["rounds"]:
        for node in item.get("nodes") or []:
            info = node.get("sys_info") or {}
            if info:
                cpu = info.get("cpu") or {}
                acc = info.get("accelerators") or {}
                devices = acc.get("devices") or []
                acc_text = (f"{len(devices)} x {devices[0].get('name')} "
                            f"(driver {devices[0].get('driver')})" if devices
                            else "accelerators: " + str(acc.get("reason") or "none"))
                memory = (info.get("memory") or {}).get("total_bytes") or 0
                return (f"{node['dir']}: {cpu.get('model')}, {cpu.get('logical_cores')} cores, "
                        f"{memory / 2**30:.1f} GiB, kernel {info.get('kernel')}, {acc_text}")
    return ""


def _provenance_lines(summary: dict[str, Any]) -> list[str]:
    prov = summary.get("provenance") or {}
    if not prov:
        return []
    git = prov.get("git") or {}
    versions = ", ".join(f"{k} {v}" for k, v in (prov.get("versions") or {}).items() if v)
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    return [f"Commit `{git.get('commit')}`{dirty}; command `{prov.get('command')}`.", "",
            f"Controller versions: {versions}.", ""]


OVERVIEW_HEADER = ["case", "status", "main figure", "metric (target)", "time", "rounds"]


def overview_of(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's ``overview``, or, for one written before it was kept, its rows alone."""
    return summary.get("overview") or run_overview(summary["cases"], {}, [])


def overview_groups(summary: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``[(suite, rows)]``: the overview's rows grouped by suite, in its order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in overview_of(summary)["rows"]:
        groups.setdefault("diagnostic" if row.get("diagnostic") else row["suite"], []).append(row)
    return list(groups.items())


def case_anchor(case_id: str) -> str:
    """The id of a case's section in summary.md and summary.html."""
    return f"case-{case_id}"


def row_cells(row: dict[str, Any]) -> dict[str, str]:
    """An overview row's cells as text: ``figure`` (``p_train 39.54 images/s``), ``metric``
    (``final_acc1 96.39 (target >= 90)``; ``final_acc1 88.61 (target >= 90) in round 1
    failed`` where no round passed), ``time`` (``train 185.3 s``), ``rounds`` (``1/1``); n/a
    for a value no round gave."""
    def value(number: Any) -> str:
        return "n/a" if number is None else fmt(number)

    figure = (f"{row['figure']} {value(row['value'])}"
              + (f" {row['unit']}" if row.get("unit") and row["value"] is not None else "")
              if row.get("figure") else "")
    metric = ""
    if row.get("metric"):
        target = (f" (target {row['comparison']} {value(row['target'])})"
                  if row.get("target") is not None else "")
        metric = f"{row['metric']} {value(row['metric_value'])}{target}"
        if row.get("metric_of"):
            metric += f" in {row['metric_of']}"
    label = "train" if row["time_figure"] == "raw_train_time" else "e2e"
    time = f"{label} {value(row['time_s'])} s" if row.get("time_s") is not None else ""
    return {"figure": figure, "metric": metric, "time": time,
            "rounds": f"{row['rounds_passed']}/{row['rounds_planned']}"}


def _overview_cells(row: dict[str, Any]) -> list[str]:
    cells = row_cells(row)
    profile = f" (profile {row['profile']})" if row.get("profile") else ""
    busy = f" ({BUSY_LABEL})" if row.get("busy") else ""
    return [row["case_id"] + profile, row["status"] + busy, cells["figure"], cells["metric"],
            cells["time"], cells["rounds"]]


def overview_markdown(summary: dict[str, Any]) -> list[str]:
    """The overview section of summary.md: counts, when and where, a table per suite whose
    rows link to their case's section."""
    overview = overview_of(summary)
    lines = ["## Overview", "", f"**{counts_line(overview)}**", ""]
    when = when_line(overview, summary.get("vendor"))
    if when:
        lines += [when[0].upper() + when[1:] + ".", ""]
    for suite, rows in overview_groups(summary):
        lines += [f"### {suite}", ""]
        table = []
        for row in rows:
            cells = _overview_cells(row)
            cells[0] = f"[{cells[0]}](#{case_anchor(row['case_id'])})"
            table.append(cells)
        lines += _markdown_table(OVERVIEW_HEADER, table) + [""]
    return lines


def summary_markdown(summary: dict[str, Any]) -> str:
    """The run summary as Markdown: the overview first, the frameworks side by side, then per
    case a table per round and one of statistics."""
    lines = [f"# Run {summary['run_id']}: {summary['status']}", ""]
    if summary.get("vendor"):
        lines += [f"Vendor: `{summary['vendor']}`", ""]
    lines += _provenance_lines(summary)
    lines += overview_markdown(summary)
    for group in summary.get("frameworks") or []:
        lines += [f"## Frameworks side by side: {framework_heading(group)}", ""]
        lines += _markdown_table(*framework_table(group, summary))
        lines += ["", "Means over each case's passed rounds; the same FINISHED figures on "
                  "every framework.", ""]
    for case in summary["cases"]:
        title, notes = _case_heading(case)
        lines += [f'<a id="{case_anchor(case["case_id"])}"></a>', "", f"## {title}", ""]
        for note in notes:
            lines += [note, ""]
        lines += [f"{case['rounds_passed']} of {case.get('rounds_planned', '?')} planned "
                  f"round(s) passed; pass rule: {case.get('pass_rule', '')}.", ""]
        host = _host_line(case)
        if host:
            lines += [f"Host: {host}", ""]
        lines += _markdown_table(*case_table(case))
        failed = [r for r in case["rounds"] if r["status"] != "passed"]
        for item in failed:
            lines.append(f"\nRound {item['round']}: {item['status']}: {item.get('reason', '')}")
        if case.get("stats"):
            lines += ["", "Statistics over the passed rounds:", ""]
            lines += _markdown_table(*stats_table(case))
        facts = case_facts(case)
        if facts:
            lines += ["", facts]
        compared = reference_line(case) or context_line(case)
        if compared:
            lines += ["", compared]
        note = _mfu_note(case)
        if note:
            lines += ["", note]
        sweep = sweep_table(case)
        if sweep:
            lines += ["", "Message-size sweep (means over the passed rounds):", ""]
            lines += _markdown_table(*sweep)
        against = datasheet_lines(case)
        if against:
            lines += ["", "Against the vendor's datasheet:", ""] + [f"- {line}" for line in against]
        formulas = formula_lines(case)
        if formulas:
            lines += ["", "How each figure is derived:", ""] + [f"- {line}" for line in formulas]
        lines += ["", units_line(case), ""]
    return "\n".join(lines) + "\n"


def framework_heading(group: dict[str, Any]) -> str:
    """``resnet50 (training, cpux1x1, cpu profile)``."""
    profile = f", {group['profile']} profile" if group.get("profile") else ""
    return f"{group['model']} ({group['suite']}, {group['configuration']}{profile})"


def framework_table(group: dict[str, Any], summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one ``summary.framework_comparison`` entry: a row per framework,
    a column per figure (headed with its unit, as in the case tables)."""
    cases = {c["case_id"]: c for c in summary["cases"]}
    first = figures_of(cases[group["rows"][0]["case_id"]])
    header = ["framework", "case", "status", *(first[f]["header"] for f in group["figures"])]
    rows = [[row["framework"], row["case_id"], row["status"],
             *(fmt(row["means"].get(f)) for f in group["figures"])] for row in group["rows"]]
    return header, rows


def print_summary(summary: dict[str, Any], console: Any) -> None:
    """The overview on ``console``: the counts, when and where, then a line per case (status,
    main figure, metric against target, time, rounds) with its comparison to published
    figures and datasheet ratios beneath; the profiles the cases ran. Lines wrap at any width
    from 80 columns and nothing is cut; the full tables are in summary.md."""
    overview = overview_of(summary)
    cases = {c["case_id"]: c for c in summary["cases"]}
    styles = {"passed": "green", "interrupted": "yellow"}
    for suite, rows in overview_groups(summary):
        console.print(f"{suite}:", style="bold", markup=False, highlight=False)
        for row in rows:
            cells = row_cells(row)
            profile = f" (profile {row['profile']})" if row.get("profile") else ""
            parts = [p for p in (cells["figure"], cells["metric"], cells["time"],
                                 f"rounds {cells['rounds']}") if p]
            console.print(f"  {row['case_id']}: {row['status']}{profile}; " + "; ".join(parts),
                          style=styles.get(row["status"], "red"), markup=False, highlight=False)
            case = cases.get(row["case_id"]) or {}
            for entry in case.get("busy_hosts") or []:
                console.print(f"    {BUSY_LABEL}: {entry}", style="yellow", markup=False,
                              highlight=False)
            compared = reference_line(case) if case else ""
            lines = [f"round {r['round']}: {r['status']}: {r.get('reason', '')}".rstrip(": ")
                     for r in case.get("rounds") or [] if r["status"] != "passed"]
            lines += [compared] if compared else []
            lines += [d for d in (datasheet_lines(case) if case else []) if "no ratio" not in d]
            for line in lines:
                console.print(f"    {line}", markup=False, highlight=False)
    profiles: dict[str, int] = {}
    for row in overview["rows"]:
        if row.get("profile"):
            profiles[row["profile"]] = profiles.get(row["profile"], 0) + 1
    for name, count in profiles.items():
        console.print(f"profile: {name}, not the standard configuration: {count} case(s) "
                      "(what each reduces: summary.md)", markup=False, highlight=False)
    console.print(counts_line(overview), markup=False, highlight=False)
    when = when_line(overview, summary.get("vendor"))
    if when:
        console.print(when, markup=False, highlight=False)
    console.print(f"run {summary['run_id']}: {summary['status']} (tables: summary.md)",
                  markup=False, highlight=False)


# HTML -------------------------------------------------------------------------------------
def png_base64(fig: Any) -> str:
    """A matplotlib figure as a base64 PNG (80 dpi), for an ``<img src="data:...">``; closed."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    # Headers break at their underscores and spaces; a table still wider scrolls in its box.
    head = head.replace("_", "_<wbr>")
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def _plot_title(case: dict[str, Any], what: str) -> str:
    """A plot's title: the case and what is drawn, and on a second line its profile label, so
    that a plot taken out of the page still says it is not the standard configuration."""
    label = profile_label(case.get("profile"))
    return f"{case['case_id']}: {what}" + (f"\n{label}" if label else "")


def _throughput_plot(case: dict[str, Any]) -> str | None:
    """Throughput per round, one panel per unit (TFLOP/s and TOP/s never share an axis), whole
    round numbers on x; None with fewer than two rounds to draw (a single dot says nothing the
    table does not)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    # The throughput figures: those in units per second.
    by_unit: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for name, figure in figures_of(case).items():
        unit = str(figure.get("unit", ""))
        if not unit.endswith("/s") or figure.get("direction", 0) <= 0:
            continue
        points = [(r["round"], (r.get("finished") or {}).get(name)) for r in case["rounds"]]
        points = [(x, float(y)) for x, y in points
                  if isinstance(y, (int, float)) and not isinstance(y, bool)]
        if len(points) > 1:
            by_unit.setdefault(unit, {})[name] = points
    if not by_unit:
        return None
    fig, axes = plt.subplots(len(by_unit), 1, figsize=(6, 2.6 * len(by_unit)), squeeze=False)
    for ax, (unit, series) in zip(axes[:, 0], by_unit.items()):
        for name, points in series.items():
            ax.plot(*zip(*points), marker="o", label=name)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("round")
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    axes[0, 0].set_title(_plot_title(case, "throughput per round"), fontsize=9)
    fig.tight_layout()
    return png_base64(fig)


def _sweep_plot(case: dict[str, Any]) -> str:
    """Bandwidth (GB/s) against message size (bytes, log scale), one line per column of the
    case's sweep, with the datasheet's figure as a dashed line where the case compares one."""
    import matplotlib.pyplot as plt

    sweep = case["sweep"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    sizes = [r["bytes"] for r in sweep["rows"]]
    for column in sweep["columns"]:
        ax.plot(sizes, [r.get(column) for r in sweep["rows"]], marker="o", label=column)
    for key, item in (case.get("datasheet") or {}).items():
        if item.get("spec") and item.get("unit") == "GB/s" and key in sweep["columns"]:
            ax.axhline(item["spec"], ls="--", lw=0.8, color="gray",
                       label=f"{item['entry']} (per direction)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s")
    ax.set_title(_plot_title(case, "bandwidth vs message size"), fontsize=9)
    ax.legend(fontsize=7)
    return png_base64(fig)


def monitoring_window(case: dict[str, Any]) -> tuple[str, str]:
    """The PerfLog events that open and close the case's monitoring window: its contract's,
    else its suite's."""
    window = (case.get("contract") or {}).get("window")
    if window:
        return window[0], window[1]
    return suite_of(case.get("suite")).window if case.get("suite") else DEFAULT_WINDOW


#: A timeline panel: its y label, then ``(stream, column, label, scale)`` series drawn on it
#: (values divided by ``scale``); ``*`` stands for every column of the stream not named
#: elsewhere (cpu_cores.csv: one line per core). ``total`` series are drawn dashed, as the
#: bound the used series moves under.
TIMELINE_PANELS = (
    ("CPU %", (("sys_monitor", "cpu_percent", "host", 1.0), ("cpu_cores", "*", None, 1.0))),
    ("load (1 min), cores", (("sys_monitor", "load1", "load1", 1.0),
                             ("sys_monitor", "other_cpu_cores", "other processes' cores", 1.0))),
    ("host memory GB", (("sys_monitor", "mem_used_bytes", "used", 1e9),
                        ("sys_monitor", "mem_total_bytes", "total", 1e9))),
    ("disk, network MB/s", (("sys_monitor", "disk_read_Bps", "disk read", 1e6),
                            ("sys_monitor", "disk_write_Bps", "disk write", 1e6),
                            ("sys_monitor", "net_recv_Bps", "net recv", 1e6),
                            ("sys_monitor", "net_sent_Bps", "net sent", 1e6))),
    ("host power W", (("sys_monitor", "host_power_w", "host", 1.0),)),
    ("device util %", (("device_monitor", "util_percent", "util", 1.0),)),
    ("device memory GB", (("device_monitor", "mem_used_bytes", "used", 1e9),
                          ("device_monitor", "mem_total_bytes", "total", 1e9))),
    ("device power W", (("device_monitor", "power_w", "power", 1.0),)),
    ("device temp °C", (("device_monitor", "temp_c", "temp", 1.0),)),
    ("device clock MHz", (("device_monitor", "clock_mhz", "clock", 1.0),)),
)


def _node_series(node_dir: Path) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """``{stream: {label: (times_ms, values)}}`` of a node's monitor CSVs; the device stream's
    columns per device (``util 0``, ``util 1``, ...) when it has an ``index`` column."""
    streams: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for path in sorted(node_dir.glob("*.csv")):
        rows = read_stream(path)
        if not rows:
            continue
        columns = [k for k in rows[0] if k not in ("timestamp_ms", "index")]
        by_device: dict[Any, list[dict[str, Any]]] = {}
        for row in rows:
            by_device.setdefault(row.get("index"), []).append(row)
        found: dict[str, tuple[list[float], list[float]]] = {}
        for device, group in by_device.items():
            for column in columns:
                points = [(r["timestamp_ms"], r[column]) for r in group
                          if isinstance(r.get(column), (int, float))]
                if points:
                    name = column if device is None or len(by_device) == 1 else f"{column} {device}"
                    found[name] = (list(zip(*points))[0], list(zip(*points))[1])
        streams[path.stem] = found
    return streams


def _timeline_plot(node_dir: Path, title: str, window: tuple[str, str],
                   started_ms: float | None = None) -> str | None:
    """A node's monitors over the round (``TIMELINE_PANELS``): related series on one panel, in
    GB, MB/s, %, W, MHz; a series that never changes is left out (a total stays, dashed, beside
    the series it bounds); on the cpu vendor the device panels, which repeat the host's, are
    left out. x: seconds since the round began (``started_ms``, else the first sample), with
    the monitoring window's events and evaluations marked."""
    import matplotlib.pyplot as plt

    streams = _node_series(node_dir)
    if not streams:
        return None
    try:
        vendor = json.loads((node_dir / "monitor.json").read_text())["device_info"]["vendor"]
    except (OSError, ValueError, KeyError, TypeError):
        vendor = None
    named = {(stream, column) for _, series in TIMELINE_PANELS for stream, column, _, _ in series}
    panels = []
    for ylabel, series in TIMELINE_PANELS:
        lines = []
        for stream, column, label, scale in series:
            if stream == "device_monitor" and vendor == "cpu":
                continue
            found = streams.get(stream) or {}
            chosen = ([(k, v) for k, v in found.items() if (stream, k) not in named]
                      if column == "*" else
                      [(k, v) for k, v in found.items() if k.split(" ")[0] == column])
            for name, (times, values) in chosen:
                suffix = name[len(column):] if column != "*" else ""
                lines.append((label + suffix if label else name, times,
                              [v / scale for v in values], column.endswith("_total_bytes")))
        varying = [line for line in lines if line[3] or max(line[2]) > min(line[2])]
        if any(not line[3] for line in varying):
            panels.append((ylabel, varying))
    if not panels:
        return None
    start = started_ms if started_ms is not None else min(
        line[1][0] for _, lines in panels for line in lines)
    events = []
    logs = sorted(node_dir.glob("rank*.out.log"))
    if logs:
        for event in parse_rank_log(logs[0], keep=(*window, EVALUATE_MARK[0])).events:
            time_ms = (event.get("metadata") or {}).get("time_ms")
            if isinstance(time_ms, (int, float)):
                events.append((event.get("event"), (time_ms - start) / 1000.0))
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 1.5 * len(panels) + 0.6), sharex=True,
                             squeeze=False)
    marks = [(e, *m) for e, m in zip(window, WINDOW_MARKS)] + [EVALUATE_MARK]
    for ax, (ylabel, lines) in zip(axes[:, 0], panels):
        many = len(lines) > 4
        for label, times, values, total in lines:
            ax.plot([(t - start) / 1000.0 for t in times], values, lw=0.6 if many else 1,
                    ls="--" if total else "-", label=None if many else label)
        ax.set_ylabel(ylabel, fontsize=7)
        ax.tick_params(labelsize=7)
        if not many and len(lines) > 1:
            ax.legend(fontsize=6, loc="upper right")
        for event, colour, style in marks:
            for seen, at in events:
                if seen == event:
                    ax.axvline(at, color=colour, ls=style, lw=0.8)
    axes[-1, 0].set_xlabel(f"s since the round began (green {window[0]}, red {window[1]}, "
                           "dotted EVALUATE)", fontsize=8)
    axes[0, 0].set_title(title, fontsize=8)
    fig.tight_layout()
    return png_base64(fig)


def _lines(lines: list[str]) -> str:
    """The non-empty ``lines`` as one paragraph, a line each."""
    shown = [html.escape(line) for line in lines if line]
    return f"<p>{'<br>'.join(shown)}</p>" if shown else ""


def _folded(title: str, body: str) -> str:
    """A section folded by default: the figures come first, the detail is a click away."""
    return f"<details><summary>{html.escape(title)}</summary>{body}</details>"


def overview_html(summary: dict[str, Any]) -> str:
    """The overview section of summary.html: counts, when and where, and a table per suite
    whose case cells link to their sections."""
    overview = overview_of(summary)
    parts = [f"<h2>Overview</h2><p><b>{html.escape(counts_line(overview))}</b></p>"]
    when = when_line(overview, summary.get("vendor"))
    if when:
        parts.append(f"<p>{html.escape(when)}</p>")
    for suite, rows in overview_groups(summary):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in OVERVIEW_HEADER)
        body = []
        for row in rows:
            cells = [html.escape(c) for c in _overview_cells(row)]
            cells[0] = f'<a href="#{html.escape(case_anchor(row["case_id"]))}">{cells[0]}</a>'
            cells[1] = f'<span class="{html.escape(row["status"])}">{cells[1]}</span>'
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append(f"<h3>{html.escape(suite)}</h3><div class='wide'><table><tr>{head}</tr>"
                     + "".join(body) + "</table></div>")
    return "\n".join(parts)


def summary_html(run_dir: Path, summary: dict[str, Any]) -> str:
    """A self-contained HTML page (plots embedded as base64 PNG, made with matplotlib):
    per case the tables of summary.md, throughput per round, and each round's monitor
    timelines per node with the monitoring window's PerfLog events and EVALUATE marked."""
    import matplotlib

    matplotlib.use("Agg")
    parts = [f"<h1>Run {html.escape(summary['run_id'])}: {html.escape(summary['status'])}</h1>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in _provenance_lines(summary) if line]
    parts.append(overview_html(summary))
    for group in summary.get("frameworks") or []:
        parts.append(f"<h2>Frameworks side by side: {html.escape(framework_heading(group))}</h2>")
        parts.append(_html_table(*framework_table(group, summary)))
    for case in summary["cases"]:
        title, notes = _case_heading(case)
        parts.append(f'<h2 id="{html.escape(case_anchor(case["case_id"]))}">'
                     f"{html.escape(title)}</h2>")
        parts.append(_lines(notes + [f"pass rule: {case.get('pass_rule', '')}"]))
        parts.append(_html_table(*case_table(case)))
        parts.append(_lines([case_facts(case), reference_line(case) or context_line(case),
                             _mfu_note(case)]))
        if case.get("stats"):
            header, rows = stats_table(case)
            parts.append(_folded(f"Statistics over the passed rounds ({len(rows)} figures)",
                                 _html_table(header, rows)))
        sweep = sweep_table(case)
        if sweep:
            image = _sweep_plot(case)
            parts.append('<img alt="bandwidth vs message size" '
                         f'src="data:image/png;base64,{image}">')
            parts.append(_folded(f"Message-size sweep, means over the passed rounds "
                                 f"({len(sweep[1])} sizes)", _html_table(*sweep)))
        against = datasheet_lines(case)
        if against:
            items = "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in against) + "</ul>"
            if all("no ratio" in line for line in against):     # nothing to compare: folded
                parts.append(_folded("Against the vendor's datasheet: no ratio", items))
            else:
                parts.append(f"<h3>Against the vendor's datasheet</h3>{items}")
        formulas = formula_lines(case)
        if formulas:
            parts.append(_folded("How each figure is derived", "<ul>" + "".join(
                f"<li>{html.escape(line)}</li>" for line in formulas) + "</ul>"))
        image = _throughput_plot(case)
        window = monitoring_window(case)
        if image:
            parts.append(f'<img alt="throughput per round" src="data:image/png;base64,{image}">')
        timelines = []
        for item in case["rounds"]:
            for node in item.get("nodes") or []:
                node_dir = run_dir / case["case_id"] / f"round{item['round']}" / node["dir"]
                started = read_optional(node_dir.parent / ROUND_START)
                image = _timeline_plot(
                    node_dir, _plot_title(case, f"monitors, round {item['round']}, {node['dir']}"),
                    window, (started or {}).get("started_ms"))
                if image:
                    timelines.append(f'<img alt="monitor timeline round {item["round"]}" '
                                     f'src="data:image/png;base64,{image}">')
        if timelines:
            parts.append(_folded(f"Monitor timelines ({len(timelines)})", "".join(timelines)))
        host = _host_line(case)
        parts.append(_folded("Units and host", _lines(
            [units_line(case), f"Host: {host}" if host else ""])))
    style = ("body{font-family:sans-serif;max-width:84em;margin:auto}table{border-collapse:"
             "collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;"
             "text-align:right}td:first-child,th:first-child{text-align:left}"
             "img{display:block;margin:0.5em 0;max-width:100%}"
             ".wide{overflow-x:auto}.passed{color:#2e7d32}.failed{color:#c62828}"
             ".interrupted{color:#b26a00}summary{cursor:pointer;margin:0.2em 0}"
             "h2{font-size:1.3em;margin:1.2em 0 0.3em}h3{margin:0.6em 0 0.2em}p{margin:0.4em 0}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>flagperf-ansible "
            f"{html.escape(summary['run_id'])}</title><style>{style}</style></head><body>"
            + "\n".join(parts) + "</body></html>\n")


def write_summary(run_dir: Path, html: bool = True, reparse: bool = False) -> dict[str, Any]:
    """Rebuild ``summary.json``, ``summary.md`` and (``html``) ``summary.html`` from the run's
    round.json files (with ``reparse``, first each round.json from its raw artifacts, see
    ``rounds.reparse_rounds``); a FlagPerf results folder is read in memory, and only the
    summaries are written into it. Returns the summary."""
    if reparse:
        reparse_rounds(run_dir)
    summary = read_summary(run_dir)
    write_json(run_dir / SUMMARY_JSON, summary)
    write_text(run_dir / SUMMARY_MD, summary_markdown(summary))
    if html:
        write_text(run_dir / SUMMARY_HTML, summary_html(run_dir, summary))
    return summary
