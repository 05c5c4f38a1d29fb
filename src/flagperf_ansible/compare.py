"""Compare two runs: per case and figure, the change of the mean and whether it is significant.

Significance: Welch's unequal-variances t-test over the rounds that passed in each run
(``scipy.stats.ttest_ind(equal_var=False)``; Welch 1947, "The generalization of Student's
problem when several different population variances are involved"). A change is a
**regression** when it is significant (p < ``alpha``), in the worse direction for that figure,
and larger than the user's tolerance in %.

Directions come from the baseline summary's case entry (``figures``: the case contract's
metrics and its suite's figures, ``summary.case_figures``); a figure the case does not declare
is shown, not judged. Only cases without a contract (FlagPerf's folders) are judged by figure
name (``flagperf_import.figure_direction``). A case run on a hardware profile is compared only
with the same profile: a profile's figures are never compared with the standard
configuration's. Nothing is written into either run folder: a run without summary.json (or a
FlagPerf folder) is summarised in memory.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from flagperf_ansible.errors import ConfigError
from flagperf_ansible.flagperf_import import figure_direction
from flagperf_ansible.layout import SUMMARY_JSON, read_json
from flagperf_ansible.rounds import round_figures
from flagperf_ansible.summary import case_figures, profile_label, profile_name, read_summary


def load_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary: ``summary.json`` if present, else built in memory from its round.json
    files or FlagPerf rank logs (nothing is written).

    Raises:
        ConfigError: not a folder, or no rounds in it.
    """
    if not run_dir.is_dir():
        raise ConfigError("no such run folder", str(run_dir))
    if (run_dir / SUMMARY_JSON).is_file():
        return read_json(run_dir / SUMMARY_JSON)
    summary = read_summary(run_dir)
    if not summary["cases"]:
        raise ConfigError("no rounds found (no round.json, no FlagPerf rank logs)", str(run_dir))
    return summary


def case_direction(case: dict[str, Any]) -> Callable[[str], int]:
    """How a case's figures are judged: ``figure -> +1`` (higher is better), ``-1`` (lower)
    or ``0`` (not judged). From the case's ``figures`` when it has a contract; by name
    (``flagperf_import.figure_direction``) when it has none (FlagPerf's folders, summaries
    written before contracts)."""
    if case.get("contract") is None:
        return figure_direction
    figures = case.get("figures") or case_figures(case.get("suite"), case.get("contract"),
                                                  case.get("metric"))
    return lambda figure: int((figures.get(figure) or {}).get("direction", 0))


def _configuration(case: dict[str, Any]) -> str:
    name = profile_name(case.get("profile"))
    return f"profile {name}" if name else "the standard configuration"


def incomparable(case_a: dict[str, Any], case_b: dict[str, Any]) -> str:
    """Why two runs' entries of a case cannot be compared (different suites, or different
    profiles: one a profile and the other the standard configuration, or two profiles); ``""``
    when they can."""
    suite_a, suite_b = case_a.get("suite") or "training", case_b.get("suite") or "training"
    if suite_a != suite_b:
        return f"not comparable: A is a {suite_a} case, B a {suite_b} case"
    if profile_name(case_a.get("profile")) != profile_name(case_b.get("profile")):
        return (f"not comparable: A ran {_configuration(case_a)}, B ran {_configuration(case_b)}"
                " (a profile's figures are never compared with another configuration's)")
    return ""


def _values(case: dict[str, Any], figure: str) -> list[float]:
    out = []
    for item in case["rounds"]:
        if item["status"] != "passed":
            continue
        value = round_figures(item).get(figure)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(float(value))
    return out


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided p-value of Welch's t-test, or None when it is undefined (fewer than 2 values
    on a side, or no spread on either)."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.stats import ttest_ind

    if max(a) == min(a) and max(b) == min(b):
        return 0.0 if a[0] != b[0] else 1.0
    p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return None if math.isnan(p) else p


def compare_runs(run_a: Path, run_b: Path, tolerance_pct: float = 5.0,
                 alpha: float = 0.05) -> dict[str, Any]:
    """Compare run B against baseline run A, case by case (same case id).

    Args:
        run_a, run_b: run folders (ours or FlagPerf's); neither is written to.
        tolerance_pct: a significant change worse than this many % is a regression.
        alpha: significance level of Welch's t-test.

    Returns:
        ``{"run_a", "run_b", "tolerance_pct", "alpha", "cases": [...], "rows": [...],
        "regressions": int}``. ``cases``: each case of both runs as ``{case_id, suite,
        profile (its label, "" on the standard configuration), comparable, reason}``. Each row
        is ``{case_id, figure, unit, n_a, n_b, mean_a, mean_b, change_pct, p_value,
        significant, direction, verdict}`` with ``change_pct = (mean_b - mean_a) / |mean_a|
        x 100`` and ``verdict`` one of ``regression``, ``improvement``, ``within tolerance``,
        ``not significant``, ``not judged``, ``too few rounds``.

    Raises:
        ConfigError: a run folder is missing or empty, or the runs share cases and none of
            them is comparable (``incomparable``).
    """
    summary_a, summary_b = load_summary(run_a), load_summary(run_b)
    cases_b = {c["case_id"]: c for c in summary_b["cases"]}
    rows: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for case_a in summary_a["cases"]:
        case_b = cases_b.get(case_a["case_id"])
        if case_b is None:
            continue
        reason = incomparable(case_a, case_b)
        cases.append({"case_id": case_a["case_id"], "suite": case_a.get("suite") or "training",
                      "profile": profile_label(case_a.get("profile")),
                      "comparable": not reason, "reason": reason})
        if not reason:
            rows += _case_rows(case_a, case_b, tolerance_pct, alpha)
    if cases and not any(c["comparable"] for c in cases):
        raise ConfigError(f"{cases[0]['case_id']}: {cases[0]['reason']}", str(run_b))
    return {"run_a": str(run_a), "run_b": str(run_b), "tolerance_pct": tolerance_pct,
            "alpha": alpha, "cases": cases, "rows": rows,
            "regressions": sum(r["verdict"] == "regression" for r in rows)}


def _case_rows(case_a: dict[str, Any], case_b: dict[str, Any], tolerance_pct: float,
               alpha: float) -> list[dict[str, Any]]:
    """One row per figure with statistics in both runs (see ``compare_runs``)."""
    direction = case_direction(case_a)
    figures = case_a.get("figures") or {}
    rows = []
    for figure in [f for f in (case_a.get("stats") or {}) if f in (case_b.get("stats") or {})]:
        a, b = _values(case_a, figure), _values(case_b, figure)
        if not a or not b:
            continue
        mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
        change = (mean_b - mean_a) / abs(mean_a) * 100 if mean_a else None
        p = welch_p(a, b)
        sign = direction(figure)
        significant = p is not None and p < alpha
        if sign == 0:
            verdict = "not judged"
        elif p is None:
            verdict = "too few rounds"
        elif not significant:
            verdict = "not significant"
        elif change is not None and abs(change) > tolerance_pct:
            verdict = "improvement" if change * sign > 0 else "regression"
        else:
            verdict = "within tolerance"
        rows.append({"case_id": case_a["case_id"], "figure": figure,
                     "unit": (figures.get(figure) or {}).get("unit", ""), "n_a": len(a),
                     "n_b": len(b), "mean_a": mean_a, "mean_b": mean_b,
                     "change_pct": change, "p_value": p, "significant": significant,
                     "direction": sign, "verdict": verdict})
    return rows


def print_comparison(result: dict[str, Any], console: Any, all_figures: bool = False) -> None:
    """The comparison as a rich table; figures not judged are left out unless ``all_figures``."""
    from rich.table import Table

    table = Table(title=f"{result['run_b']} vs {result['run_a']} (tolerance "
                        f"{result['tolerance_pct']:g} %, alpha {result['alpha']:g})")
    for name in ("case", "figure", "unit", "n A/B", "mean A", "mean B", "change %",
                 "p (Welch)", "verdict"):
        table.add_column(name, justify="left" if name in ("case", "figure", "unit", "verdict")
                         else "right", overflow="fold")
    styles = {"regression": "red", "improvement": "green"}
    for row in result["rows"]:
        if row["direction"] == 0 and not all_figures:
            continue
        style = styles.get(row["verdict"], "")
        verdict = f"[{style}]{row['verdict']}[/{style}]" if style else row["verdict"]
        table.add_row(row["case_id"], row["figure"], row.get("unit", ""),
                      f"{row['n_a']}/{row['n_b']}",
                      f"{row['mean_a']:.4g}", f"{row['mean_b']:.4g}",
                      "-" if row["change_pct"] is None else f"{row['change_pct']:+.2f}",
                      "-" if row["p_value"] is None else f"{row['p_value']:.3g}", verdict)
    console.print(table)
    for case in result.get("cases", []):
        if not case["comparable"]:
            console.print(f"[yellow]{case['case_id']}: {case['reason']}[/yellow]")
        elif case["profile"]:
            console.print(f"{case['case_id']}: {case['profile']} (in both runs)")
    console.print(f"{result['regressions']} significant regression(s) beyond "
                  f"{result['tolerance_pct']:g} %")
