"""Human-readable summaries: Markdown (summary.md) and a rich table for the terminal."""

from __future__ import annotations

from typing import Any

FIGURES = ("e2e_time", "p_whole", "p_core")
STAT_ROWS = ("mean", "std", "min", "max")


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def case_table(case: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one case: a row per round, then mean/std/min/max across rounds.

    Columns: round, status, converged, ``final_<metric>``, e2e_time (s), p_whole and p_core
    (samples/s). Statistics cover the rounds that passed.
    """
    final = f"final_{case.get('metric') or 'metric'}"
    columns = [final, *FIGURES]
    header = ["round", "status", "converged", *columns]
    rows = []
    for item in case["rounds"]:
        finished = item.get("finished") or {}
        rows.append([str(item["round"]), item["status"], _fmt(item.get("converged")),
                     *(_fmt(finished.get(c)) for c in columns)])
    for missing in case.get("missing_rounds", []):
        rows.append([str(missing), "missing", "-", *("-" for _ in columns)])
    stats = case.get("stats") or {}
    if stats:
        for name in STAT_ROWS:
            rows.append([name, "", "", *(_fmt((stats.get(c) or {}).get(name)) for c in columns)])
    return header, rows


def summary_markdown(summary: dict[str, Any]) -> str:
    """The run summary as Markdown: one table per case."""
    lines = [f"# Run {summary['run_id']}: {summary['status']}", ""]
    if summary.get("vendor"):
        lines += [f"Vendor: `{summary['vendor']}`", ""]
    for case in summary["cases"]:
        label = " (diagnostic, not a benchmark result)" if case.get("diagnostic") else ""
        lines += [f"## {case['case_id']}: {case['status']}{label}", "",
                  f"{case['rounds_passed']} round(s) passed, "
                  f"{case['rounds_converged']} converged.", ""]
        header, rows = case_table(case)
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        failed = [r for r in case["rounds"] if r["status"] != "passed"]
        for item in failed:
            lines.append(f"\nRound {item['round']}: {item['status']}: {item.get('reason', '')}")
        lines.append("")
    lines.append("e2e_time in s; p_whole, p_core in samples/s (see DESIGN.md, PerfLog).")
    return "\n".join(lines) + "\n"


def print_summary(summary: dict[str, Any], console: Any) -> None:
    """Print the summary tables with rich to ``console``."""
    from rich.table import Table

    for case in summary["cases"]:
        header, rows = case_table(case)
        style = "green" if case["status"] == "passed" else "red"
        table = Table(title=f"{case['case_id']}: [{style}]{case['status']}[/{style}]")
        for name in header:
            table.add_column(name, justify="left" if name in ("round", "status") else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    console.print(f"run {summary['run_id']}: {summary['status']}")
