"""Compare two runs: per case and figure, the change of the mean and whether it is significant.

Significance: Welch's unequal-variances t-test over the rounds that passed in each run
(``scipy.stats.ttest_ind(equal_var=False)``; Welch 1947, "The generalization of Student's
problem when several different population variances are involved"). A change is a
**regression** when it is significant (p < ``alpha``), in the worse direction for that figure,
and larger than the user's tolerance in %. Where a side has one round (no t-test), a change
beyond the tolerance still gets its verdict, marked *unconfirmed*: the threshold alone says it.

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

from flagperf_ansible.config.errors import ConfigError
from flagperf_ansible.results.flagperf_import import figure_direction
from flagperf_ansible.results.layout import SUMMARY_JSON, read_json
from flagperf_ansible.results.rounds import round_figures
from flagperf_ansible.results.summary import case_figures, profile_label, profile_name, read_summary


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
        ``{"run_a", "run_b", "tolerance_pct", "alpha", "cases": [...], "only_in_a": [case
        ids], "only_in_b": [...], "rows": [...], "counts": {verdict: rows}, "judged": int,
        "not_judged": int, "regressions": int, "unconfirmed_regressions": int}``. ``cases``:
        each case of both runs as ``{case_id, suite, profile (its label, "" on the standard
        configuration), profile_name, comparable, reason}``. Each row is ``{case_id, profile
        (its name, None on the standard configuration), figure, unit, n_a, n_b, mean_a, mean_b,
        change_pct, p_value, significant, direction, confirmed, verdict}`` with
        ``change_pct = (mean_b - mean_a) / |mean_a| x 100`` and ``verdict`` one of
        ``regression``, ``improvement``, ``within tolerance``, ``not significant``, ``not
        judged``; ``confirmed`` is False where a side has a single round (the verdict is then
        the tolerance's alone, and never ``not significant``). ``regressions`` counts the
        confirmed ones.

    Raises:
        ConfigError: a run folder is missing or empty, or the runs share cases and none of
            them is comparable (``incomparable``).
    """
    summary_a, summary_b = load_summary(run_a), load_summary(run_b)
    cases_b = {c["case_id"]: c for c in summary_b["cases"]}
    ids_a = {c["case_id"] for c in summary_a["cases"]}
    rows: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for case_a in summary_a["cases"]:
        case_b = cases_b.get(case_a["case_id"])
        if case_b is None:
            continue
        reason = incomparable(case_a, case_b)
        cases.append({"case_id": case_a["case_id"], "suite": case_a.get("suite") or "training",
                      "profile": profile_label(case_a.get("profile")),
                      "profile_name": profile_name(case_a.get("profile")),
                      "comparable": not reason, "reason": reason})
        if not reason:
            rows += _case_rows(case_a, case_b, tolerance_pct, alpha)
    if cases and not any(c["comparable"] for c in cases):
        raise ConfigError(f"{cases[0]['case_id']}: {cases[0]['reason']}", str(run_b))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    regressions = [r for r in rows if r["verdict"] == "regression"]
    return {"run_a": str(run_a), "run_b": str(run_b), "tolerance_pct": tolerance_pct,
            "alpha": alpha, "cases": cases,
            "only_in_a": [c["case_id"] for c in summary_a["cases"] if c["case_id"] not in cases_b],
            "only_in_b": [c["case_id"] for c in summary_b["cases"] if c["case_id"] not in ids_a],
            "rows": rows, "counts": counts,
            "judged": sum(r["direction"] != 0 for r in rows),
            "not_judged": sum(r["direction"] == 0 for r in rows),
            "regressions": sum(r["confirmed"] for r in regressions),
            "unconfirmed_regressions": sum(not r["confirmed"] for r in regressions)}


def _case_rows(case_a: dict[str, Any], case_b: dict[str, Any], tolerance_pct: float,
               alpha: float) -> list[dict[str, Any]]:
    """One row per figure with statistics in both runs (see ``compare_runs``)."""
    direction = case_direction(case_a)
    figures = case_a.get("figures") or {}
    profile = profile_name(case_a.get("profile"))    # the same on both sides (incomparable)
    rows = []
    for figure in [f for f in (case_a.get("stats") or {}) if f in (case_b.get("stats") or {})]:
        a, b = _values(case_a, figure), _values(case_b, figure)
        if not a or not b:
            continue
        rows.append({"case_id": case_a["case_id"], "profile": profile, "figure": figure,
                     "unit": (figures.get(figure) or {}).get("unit", ""),
                     **judge(a, b, direction(figure), tolerance_pct, alpha)})
    return rows


def judge(a: list[float], b: list[float], sign: int, tolerance_pct: float = 5.0,
          alpha: float = 0.05) -> dict[str, Any]:
    """B's values of one figure against the baseline A's (each one value per passed round).

    Args:
        a, b: the rounds' values, at least one on each side.
        sign: the figure's direction: +1 higher is better, -1 lower, 0 not judged.
        tolerance_pct, alpha: as ``compare_runs``.

    Returns:
        ``{n_a, n_b, mean_a, mean_b, change_pct, p_value, significant, direction, confirmed,
        verdict}`` as a row of ``compare_runs`` (see there).
    """
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    change = (mean_b - mean_a) / abs(mean_a) * 100 if mean_a else None
    p = welch_p(a, b)
    significant = p is not None and p < alpha
    # One round on a side: no t-test; the tolerance alone judges, unconfirmed.
    confirmed = len(a) > 1 and len(b) > 1
    if sign == 0:
        verdict = "not judged"
    elif confirmed and not significant:
        verdict = "not significant"
    elif change is not None and abs(change) > tolerance_pct:
        verdict = "improvement" if change * sign > 0 else "regression"
    else:
        verdict = "within tolerance"
    return {"n_a": len(a), "n_b": len(b), "mean_a": mean_a, "mean_b": mean_b,
            "change_pct": change, "p_value": p, "significant": significant, "direction": sign,
            "confirmed": confirmed or sign == 0, "verdict": verdict}


def verdict_text(row: dict[str, Any]) -> str:
    """The row's verdict as shown: ``unconfirmed`` added where a side has a single round."""
    return row["verdict"] + ("" if row["confirmed"] else " (unconfirmed)")


def _shown_rows(result: dict[str, Any], all_figures: bool) -> list[dict[str, Any]]:
    """The rows a person reads first: regressions and improvements; every judged row with
    ``all_figures`` (and the not judged ones too)."""
    if all_figures:
        return list(result["rows"])
    return [r for r in result["rows"] if r["verdict"] in ("regression", "improvement")]


def _case(row: dict[str, Any]) -> str:
    """The row's case, labelled with its profile: a profile's figures are not the standard
    configuration's."""
    return row["case_id"] + (f" (profile {row['profile']})" if row.get("profile") else "")


def _cells(row: dict[str, Any]) -> list[str]:
    """The row's cells under ``_HEADER`` (Markdown and HTML)."""
    return [_case(row), row["figure"], row.get("unit", ""), f"{row['n_a']}/{row['n_b']}",
            f"{row['mean_a']:.4g}", f"{row['mean_b']:.4g}",
            "-" if row["change_pct"] is None else f"{row['change_pct']:+.2f}",
            "-" if row["p_value"] is None else f"{row['p_value']:.3g}", verdict_text(row)]


_HEADER = ("case", "figure", "unit", "n A/B", "mean A", "mean B", "change %", "p (Welch)",
           "verdict")


def comparison_lines(result: dict[str, Any]) -> list[str]:
    """The answer in words, a line each: the verdict counts, what was judged, the cases only
    one run has and the cases that could not be compared."""
    counts = result.get("counts") or {}
    order = ("regression", "improvement", "within tolerance", "not significant")
    judged = ", ".join(f"{counts[v]} {v}" for v in order if counts.get(v)) or "none"
    unconfirmed = sum(1 for r in result["rows"] if not r["confirmed"])
    lines = [f"{result['regressions']} regression(s) beyond {result['tolerance_pct']:g} % "
             f"(Welch's t-test, alpha {result['alpha']:g})"
             + (f", {result['unconfirmed_regressions']} more unconfirmed (a single round on a "
                "side: the tolerance alone)" if result.get("unconfirmed_regressions") else ""),
             f"{result['judged']} figure(s) judged: {judged}; {result['not_judged']} not judged "
             "(targets, counts)"
             + (f"; {unconfirmed} judged on a single round, unconfirmed" if unconfirmed else "")]
    for side, key in (("A", "only_in_a"), ("B", "only_in_b")):
        if result.get(key):
            lines.append(f"only in {side} ({len(result[key])}): {', '.join(result[key])}")
    profiles: dict[str, int] = {}
    for case in result.get("cases", []):
        if not case["comparable"]:
            lines.append(f"{case['case_id']}: {case['reason']}")
        elif case.get("profile_name"):
            profiles[case["profile_name"]] = profiles.get(case["profile_name"], 0) + 1
    lines += [f"profile: {name}, not the standard configuration, in both runs: {count} case(s)"
              for name, count in profiles.items()]
    return lines


def row_line(row: dict[str, Any]) -> str:
    """One row in words: ``<verdict>: <case> <figure>: <mean A> -> <mean B> <unit> (<change>),
    rounds <n A>/<n B>, p <p>``."""
    change = "" if row["change_pct"] is None else f" ({row['change_pct']:+.2f} %)"
    p_value = "-" if row["p_value"] is None else f"{row['p_value']:.3g}"
    unit = f" {row['unit']}" if row.get("unit") else ""
    return (f"{verdict_text(row)}: {_case(row)} {row['figure']}: {row['mean_a']:.4g} -> "
            f"{row['mean_b']:.4g}{unit}{change}, rounds {row['n_a']}/{row['n_b']}, p {p_value}")


def print_comparison(result: dict[str, Any], console: Any, all_figures: bool = False) -> None:
    """The comparison on the console, a line per regression and improvement (per row with
    ``all_figures``), then ``comparison_lines``; lines wrap at any width, none is cut."""
    console.print(f"{result['run_b']} vs {result['run_a']} (tolerance "
                  f"{result['tolerance_pct']:g} %, alpha {result['alpha']:g})",
                  markup=False, highlight=False)
    styles = {"regression": "red", "improvement": "green"}
    for row in _shown_rows(result, all_figures):
        console.print("  " + row_line(row), style=styles.get(row["verdict"]), markup=False,
                      highlight=False)
    for line in comparison_lines(result):
        console.print(line, markup=False, highlight=False)


def comparison_markdown(result: dict[str, Any], all_figures: bool = False) -> str:
    """The comparison as Markdown: ``comparison_lines``, then every judged row (and the not
    judged ones with ``all_figures``)."""
    rows = [r for r in result["rows"] if all_figures or r["direction"] != 0]
    out = [f"# {result['run_b']} vs {result['run_a']}", "",
           f"Tolerance {result['tolerance_pct']:g} %, alpha {result['alpha']:g}.", ""]
    out += [f"- {line}" for line in comparison_lines(result)] + [""]
    if rows:
        out += ["| " + " | ".join(_HEADER) + " |", "|" + " --- |" * len(_HEADER)]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |"
                for r in rows]
    return "\n".join(out) + "\n"


def comparison_html(result: dict[str, Any], all_figures: bool = False) -> str:
    """The comparison as a self-contained HTML page (the Markdown's content)."""
    from html import escape

    rows = [r for r in result["rows"] if all_figures or r["direction"] != 0]
    colours = {"regression": "#c62828", "improvement": "#2e7d32"}
    body = "".join(f"<li>{escape(line)}</li>" for line in comparison_lines(result))
    table = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in _cells(r)[:-1])
        + f'<td style="color:{colours.get(r["verdict"], "inherit")}">'
        + f"{escape(verdict_text(r))}</td></tr>" for r in rows)
    head = "".join(f"<th>{escape(h)}</th>" for h in _HEADER)
    title = escape(f"{result['run_b']} vs {result['run_a']}")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>" + title + "</title>"
            "<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
            "td:nth-child(-n+3),td:last-child{text-align:left}</style></head><body>"
            f"<h1>{title}</h1><p>Tolerance {result['tolerance_pct']:g} %, alpha "
            f"{result['alpha']:g}.</p><ul>{body}</ul>"
            + (f"<table><tr>{head}</tr>{table}</table>" if rows else "") + "</body></html>\n")
