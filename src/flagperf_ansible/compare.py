"""Compare two runs: per case and figure, the change of the mean and whether it is significant.

Significance: Welch's unequal-variances t-test over the rounds that passed in each run
(``scipy.stats.ttest_ind(equal_var=False)``; Welch 1947, "The generalization of Student's
problem when several different population variances are involved"). A change is a
**regression** when it is significant (p < ``alpha``), in the worse direction for that figure
(``DIRECTIONS``), and larger than the user's tolerance in %.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from flagperf_ansible.errors import ConfigError
from flagperf_ansible.results import build_summary, is_flagperf_layout, import_flagperf, \
    read_json, round_figures

#: Which way is better, by figure name: the one home of that knowledge. First match wins;
#: +1 higher is better, -1 lower is better. Figures that match none are shown, never judged.
DIRECTIONS: tuple[tuple[str, int], ...] = (
    (r"^target_", 0),                  # the case's goal, not a measurement
    (r"^num_", 0),                     # counts (samples trained): not a quality
    (r"^p_", +1),                      # throughput, samples/s
    (r"_per_second$", +1),             # FlagPerf's throughput names
    (r"^mfu$", +1),
    (r"_time$", -1),                   # seconds
    (r"^final_.*loss", -1),
    (r"^final_", +1),                  # accuracy-like final metrics
)


def direction(figure: str) -> int:
    """+1 when higher is better, -1 when lower is better, 0 when not judged (``DIRECTIONS``)."""
    for pattern, sign in DIRECTIONS:
        if re.search(pattern, figure):
            return sign
    return 0


def load_summary(run_dir: Path) -> dict[str, Any]:
    """A run's summary: ``summary.json`` if present, else built from its round.json files
    (a FlagPerf results folder is read first).

    Raises:
        ConfigError: not a folder, or no rounds in it.
    """
    if not run_dir.is_dir():
        raise ConfigError("no such run folder", str(run_dir))
    if (run_dir / "summary.json").is_file():
        return read_json(run_dir / "summary.json")
    if is_flagperf_layout(run_dir):
        import_flagperf(run_dir)
    summary = build_summary(run_dir)
    if not summary["cases"]:
        raise ConfigError("no rounds found (no round.json, no FlagPerf rank logs)", str(run_dir))
    return summary


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
    """Compare run B against baseline run A.

    Args:
        run_a, run_b: run folders (ours or FlagPerf's).
        tolerance_pct: a significant change worse than this many % is a regression.
        alpha: significance level of Welch's t-test.

    Returns:
        ``{"run_a", "run_b", "tolerance_pct", "alpha", "rows": [...], "regressions": int}``;
        each row is ``{case_id, figure, n_a, n_b, mean_a, mean_b, change_pct, p_value,
        significant, direction, verdict}`` with ``change_pct = (mean_b - mean_a) / |mean_a|
        x 100`` and ``verdict`` one of ``regression``, ``improvement``, ``within tolerance``,
        ``not significant``, ``not judged``, ``too few rounds``.

    Raises:
        ConfigError: a run folder is missing or empty.
    """
    summary_a, summary_b = load_summary(run_a), load_summary(run_b)
    cases_b = {c["case_id"]: c for c in summary_b["cases"]}
    rows = []
    for case_a in summary_a["cases"]:
        case_b = cases_b.get(case_a["case_id"])
        if case_b is None:
            continue
        figures = [f for f in (case_a.get("stats") or {}) if f in (case_b.get("stats") or {})]
        for figure in figures:
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
            rows.append({"case_id": case_a["case_id"], "figure": figure, "n_a": len(a),
                         "n_b": len(b), "mean_a": mean_a, "mean_b": mean_b,
                         "change_pct": change, "p_value": p, "significant": significant,
                         "direction": sign, "verdict": verdict})
    return {"run_a": str(run_a), "run_b": str(run_b), "tolerance_pct": tolerance_pct,
            "alpha": alpha, "rows": rows,
            "regressions": sum(r["verdict"] == "regression" for r in rows)}


def print_comparison(result: dict[str, Any], console: Any, all_figures: bool = False) -> None:
    """The comparison as a rich table; figures not judged are left out unless ``all_figures``."""
    from rich.table import Table

    table = Table(title=f"{result['run_b']} vs {result['run_a']} (tolerance "
                        f"{result['tolerance_pct']:g} %, alpha {result['alpha']:g})")
    for name in ("case", "figure", "n A/B", "mean A", "mean B", "change %", "p (Welch)",
                 "verdict"):
        table.add_column(name, justify="left" if name in ("case", "figure", "verdict")
                         else "right", overflow="fold")
    styles = {"regression": "red", "improvement": "green"}
    for row in result["rows"]:
        if row["direction"] == 0 and not all_figures:
            continue
        style = styles.get(row["verdict"], "")
        verdict = f"[{style}]{row['verdict']}[/{style}]" if style else row["verdict"]
        table.add_row(row["case_id"], row["figure"], f"{row['n_a']}/{row['n_b']}",
                      f"{row['mean_a']:.4g}", f"{row['mean_b']:.4g}",
                      "-" if row["change_pct"] is None else f"{row['change_pct']:+.2f}",
                      "-" if row["p_value"] is None else f"{row['p_value']:.3g}", verdict)
    console.print(table)
    console.print(f"{result['regressions']} significant regression(s) beyond "
                  f"{result['tolerance_pct']:g} %")
