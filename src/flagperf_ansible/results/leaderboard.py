"""The results site: a leaderboard per suite and model, each case's trend across runs, filters.

``write_site(data, out_dir)`` writes ``index.html`` (self-contained: inline CSS, the filters'
script written here, plots as embedded PNG; nothing is fetched from the internet) and a copy
of each shown run's ``summary.html`` under ``runs/<id>/``, which the rows link to. ``data`` is
``db.query.load``'s.

**Leaderboard.** A table per suite and model (so that an MLPerf result sits beside ours for the
same model); a row per vendor x chip x nodes x processes x framework x software x profile,
showing its best run (by the main figure's mean over the passed rounds, in the figure's
direction): the main figure and its unit (the overview's, ``overview.case_row``), the final
metric against its target, MFU, energy per unit of work, and FlagPerf's published figure of
the same case and configuration with the ratio to it (``value / published``: above 1 is
faster). Rows on the standard configuration are ranked among those with the same main figure;
a profile's rows (``cpu``) are labelled and never ranked, nor given a ratio; the published
figures are rows of their own.

**Trends.** Per case and configuration, the main figure of each run in time order, with a
regression flag where a run is significantly worse than the one before it: ``compare.judge``
(Welch's t-test over the passed rounds, beyond the tolerance, in the figure's worse
direction); with a single round on a side the flag is the tolerance's alone, marked
unconfirmed, as ``compare`` marks it.

**Scaling.** Per LLM case (main figure in tokens/s) that ran at several chip counts, a table
per framework, chip, precision and profile: token/p/s (tokens/s per chip) at each chip count N
and the efficiency, token/p/s at N over token/p/s at the smallest N (``db.query.scaling``:
the latest run per N, mean over its passed rounds).

**Filters.** Vendor, chip, suite and software version (the framework's version and the
driver, ``db.records.software_label``): checkboxes; a row or trend is shown when each of its
values is checked; the ranks are counted again over the rows shown.
"""

from __future__ import annotations

import html
import re
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Mapping

from flagperf_ansible.results.compare import judge
from flagperf_ansible.results.db.query import scaling
from flagperf_ansible.results.overview import SUITE_ORDER
from flagperf_ansible.results.report import fmt, png_base64, row_cells
from flagperf_ansible.results.stats import describe

FACETS = ("vendor", "chip", "suite", "software")
UNKNOWN = "unknown"
#: The energy figure (``db.records.ENERGY``).
ENERGY = "energy_per_unit"
#: Runs not of this project are named by where they come from.
SOURCE_NAMES = {"flagperf": "FlagPerf results folder", "mlperf": "MLPerf log"}
HEADER = ("rank", "vendor", "chip", "nodes x procs", "framework", "software", "main figure",
          "metric (target)", "MFU", "energy", "vs FlagPerf's published", "runs", "best run")


# The model ---------------------------------------------------------------------------------
def _mean(result: Mapping[str, Any], name: str | None) -> dict[str, Any] | None:
    """``stats.describe`` of a figure over the result's passed rounds, with its unit."""
    figure = (result.get("figures") or {}).get(name or "")
    if not figure or not figure["values"]:
        return None
    return {**describe(figure["values"]), "unit": figure["unit"],
            "direction": figure["direction"], "values": figure["values"]}


def configuration(item: Mapping[str, Any]) -> str:
    """``2x8``: nodes x processes per node (``?`` for a count a log does not give)."""
    return "x".join("?" if item.get(k) is None else str(item[k])
                    for k in ("nnodes", "nproc_per_node"))


def facet_values(result: Mapping[str, Any]) -> dict[str, str]:
    """The result's value for each filter (``UNKNOWN`` where none is known)."""
    return {f: str(result.get(f) or UNKNOWN).replace("|", "/") for f in FACETS}


def _better(a: float, b: float, direction: int) -> bool:
    return a < b if direction < 0 else a > b


def _reference(row: Mapping[str, Any], published: list[Mapping[str, Any]]
               ) -> Mapping[str, Any] | None:
    """The published figures of the row's case and configuration that give its main figure:
    the same vendor and hardware first."""
    same = [p for p in published
            if (p["suite"], p["model"], p["framework"], p["nnodes"], p["nproc_per_node"])
            == (row["suite"], row["model"], row["framework"], row["nnodes"],
                row["nproc_per_node"]) and row["figure"] in p["figures"]]
    same.sort(key=lambda p: (p["vendor"], p["hardware"]) != (row["vendor"], row["hardware"]))
    return same[0] if same else None


def result_row(result: Mapping[str, Any], runs: int, published: list[Mapping[str, Any]]
               ) -> dict[str, Any]:
    """One leaderboard row from its best ``result``: ``{kind (ranked, profile, unranked),
    group, vendor, chip, configuration, framework, software, figure, unit, value, std, n,
    figure_text, metric_text, mfu, energy, reference, ratio, reference_text, runs, result}``."""
    main = _mean(result, result["figure"])
    metric = _mean(result, result["metric"])
    cells = row_cells({"figure": result["figure"], "value": main and main["mean"],
                       "unit": result["unit"], "metric": result["metric"],
                       "metric_value": metric and metric["mean"],
                       "comparison": result["comparison"], "target": result["target"],
                       "time_figure": "", "time_s": None,
                       "rounds_passed": result["rounds_passed"],
                       "rounds_planned": result["rounds_planned"]})
    if main and main["n"] > 1:
        cells["figure"] += f" ± {fmt(main['std'])} (n {main['n']})"
    mfu, energy = _mean(result, "mfu"), _mean(result, ENERGY)
    kind = "profile" if result["profile"] else ("ranked" if main else "unranked")
    reference = _reference(result, published)
    ratio, text = None, ""
    if reference is not None:
        value = reference["figures"][result["figure"]]["value"]
        shown = f"{reference['label']}: {fmt(value)} {result['unit']}".rstrip()
        if kind == "profile":
            text = f"{shown} (context: a profile is not compared)"
        elif main and value > 0:
            ratio = main["mean"] / value
            text = f"{ratio:.2f} x {shown}"
        else:
            text = shown
    return {"kind": kind, "group": f"{result['figure'] or ''} {result['unit']}".strip(),
            "vendor": result["vendor"] or UNKNOWN, "chip": result["chip"] or UNKNOWN,
            "configuration": configuration(result), "framework": result["framework"] or "-",
            "software": result["software"] or "", "figure": result["figure"],
            "value": main["mean"] if main else None, "direction": main["direction"] if main else 1,
            "figure_text": cells["figure"] or "n/a", "metric_text": cells["metric"],
            "mfu": f"{100 * mfu['mean']:.3g} %" if mfu else "",
            "energy": f"{fmt(energy['mean'])} {energy['unit']}" if energy else "",
            "reference": reference, "ratio": ratio, "reference_text": text, "runs": runs,
            "result": result}


def published_row(reference: Mapping[str, Any], figure: str | None,
                  metric: str | None) -> dict[str, Any]:
    """A row of FlagPerf's published figures for a board: its figure ``figure`` (the board's
    main figure; else its first) and ``metric``."""
    figures = reference["figures"]
    key = figure if figure in figures else next(iter(figures))
    value = figures[key]
    metric_text = (f"{metric} {fmt(figures[metric]['value'])}" if metric in figures else "")
    precision = f", {reference['precision']}" if reference["precision"] else ""
    return {"kind": "published", "vendor": reference["vendor"], "chip": reference["hardware"],
            "configuration": configuration(reference), "framework": reference["framework"] or "-",
            "software": f"published{precision}",
            "figure_text": f"{key} {fmt(value['value'])} {value['unit']}".rstrip(),
            "metric_text": metric_text, "label": reference["label"],
            "source": reference["source"]}


def leaderboard(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The boards, ``[{suite, model, rows, published_rows, series, scaling}]`` in the
    overview's suite order, then by model; rows best first within each rank group (see the
    module docstring); ``scaling``: ``db.query.scaling``'s entries of the board's model."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for result in data["results"]:
        key = (result["suite"], result["model"], result["vendor"], result["chip"],
               result["nnodes"], result["nproc_per_node"], result["framework"],
               result["software"], result["profile"])
        groups.setdefault(key, []).append(result)
    boards: dict[tuple[str, str], dict[str, Any]] = {}
    for key, members in groups.items():
        direction = next((f["direction"] for m in members
                          for n, f in m["figures"].items() if n == m["figure"]), 1)
        best = None
        for member in members:
            main = _mean(member, member["figure"])
            value = main["mean"] if main else None
            if best is None or (value is not None and (best[0] is None
                                                       or _better(value, best[0], direction))):
                best = (value, member)
        board = boards.setdefault(key[:2], {"suite": key[0], "model": key[1], "rows": []})
        board["rows"].append(result_row(best[1], len(members), data["published"]))
    order = {"ranked": 0, "profile": 1, "unranked": 2}
    for board in boards.values():
        board["rows"].sort(key=lambda r: (order[r["kind"]], r["group"],
                                          -(r["value"] or 0) * r["direction"]))
        first = board["rows"][0]["result"]
        board["published_rows"] = [
            published_row(p, first["figure"], first["metric"]) for p in data["published"]
            if (p["suite"], p["model"]) == (board["suite"], board["model"])]
        board["series"] = trends(r for r in data["results"]
                                 if (r["suite"], r["model"]) == (board["suite"], board["model"]))
    for entry in scaling(data):
        boards[(entry["suite"], entry["model"])].setdefault("scaling", []).append(entry)
    for board in boards.values():
        board.setdefault("scaling", [])
    rank = {name: i for i, name in enumerate(SUITE_ORDER)}
    return sorted(boards.values(), key=lambda b: (rank.get(b["suite"], len(rank)), b["model"]))


def trends(results: Iterable[Mapping[str, Any]], tolerance_pct: float = 5.0,
           alpha: float = 0.05) -> list[dict[str, Any]]:
    """Each case and configuration's main figure per run, in time order: ``[{label, suite,
    vendor, chip, profile, profile_label, figure, unit, direction, points: [{result, mean,
    std, n, software, verdict (compare.judge against the point before, or None)}]}]``."""
    series: dict[tuple, dict[str, Any]] = {}
    for result in results:
        main = _mean(result, result["figure"])
        if main is None:
            continue
        key = (result["model"], result["framework"], result["vendor"], result["chip"],
               result["nnodes"], result["nproc_per_node"], result["profile"], result["figure"])
        profile = f" (profile {result['profile']})" if result["profile"] else ""
        entry = series.setdefault(key, {
            "label": (f"{result['model']}" + (f"-{result['framework']}" if result["framework"]
                                               else "")
                      + f" on {result['vendor'] or UNKNOWN} {result['chip'] or UNKNOWN} "
                      f"{configuration(result)}{profile}"),
            "suite": result["suite"], "vendor": result["vendor"], "chip": result["chip"],
            "profile": result["profile"], "profile_label": result["profile_label"],
            "figure": result["figure"], "unit": main["unit"], "direction": main["direction"],
            "points": []})
        before = entry["points"][-1] if entry["points"] else None
        entry["points"].append({
            "result": result, "mean": main["mean"], "std": main["std"], "n": main["n"],
            "software": result["software"] or "",
            "verdict": judge(before["values"], main["values"], main["direction"], tolerance_pct,
                             alpha) if before else None,
            "values": main["values"]})
    return list(series.values())


# The page ----------------------------------------------------------------------------------
def _run_link(result: Mapping[str, Any], linked: Mapping[str, str]) -> str:
    """The cell naming the run (its date), linked to its copied summary.html if it has one."""
    created = result.get("created")
    when = [created.strftime("%Y-%m-%d %H:%M")] if isinstance(created, datetime) else []
    source = [SOURCE_NAMES[result["source"]]] if result["source"] in SOURCE_NAMES else []
    shown = ", ".join(source + when)
    text = html.escape(f"{result['run_id']}" + (f" ({shown})" if shown else ""))
    target = linked.get(result["uid"])
    return f'<a href="{html.escape(target)}">{text}</a>' if target else text


def _data(values: Mapping[str, str]) -> str:
    return " ".join(f'data-{k}="{html.escape(v)}"' for k, v in values.items())


def trend_plot(entry: Mapping[str, Any]) -> str | None:
    """The series' main figure per run (mean, std as error bars), regressions marked with a
    red triangle; base64 PNG, or None below two runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = entry["points"]
    if len(points) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 2.6))
    xs = list(range(len(points)))
    ax.errorbar(xs, [p["mean"] for p in points], yerr=[p["std"] for p in points], marker="o",
                capsize=3, label=entry["figure"])
    flagged = [(x, p["mean"]) for x, p in zip(xs, points)
               if p["verdict"] and p["verdict"]["verdict"] == "regression"]
    if flagged:
        ax.scatter(*zip(*flagged), marker="v", s=90, color="tab:red", zorder=3,
                   label="regression")
    ax.set_xticks(xs)
    ax.set_xticklabels([_day(p["result"].get("created")) for p in points], fontsize=7,
                       rotation=20)
    for x, (before, point) in enumerate(zip([None, *points], points)):
        if before is None or before["software"] != point["software"]:
            ax.annotate(point["software"] or "?", (x, point["mean"]), fontsize=6,
                        xytext=(2, 6), textcoords="offset points")
    ax.set_ylabel(f"{entry['figure']} {entry['unit']}".strip(), fontsize=8)
    label = entry["profile_label"]
    ax.set_title(f"{entry['label']}: {entry['figure']} per run" + (f"\n{label}" if label else ""),
                 fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return png_base64(fig)


def _day(created: Any) -> str:
    return created.strftime("%Y-%m-%d") if isinstance(created, datetime) else "?"


def _verdict_text(verdict: Mapping[str, Any] | None) -> str:
    if verdict is None:
        return "first run"
    change = "" if verdict["change_pct"] is None else f"{verdict['change_pct']:+.2f} %"
    p_value = "" if verdict["p_value"] is None else f", p {verdict['p_value']:.3g}"
    unconfirmed = "" if verdict["confirmed"] else " (unconfirmed: a single round on a side)"
    return f"{verdict['verdict']}{unconfirmed}: {change}{p_value}"


def _trend_html(entry: Mapping[str, Any], linked: Mapping[str, str]) -> str:
    softwares = sorted({p["software"] or UNKNOWN for p in entry["points"]})
    values = {"vendor": entry["vendor"] or UNKNOWN, "chip": entry["chip"] or UNKNOWN,
              "suite": entry["suite"], "software": "|".join(s.replace("|", "/") for s in softwares)}
    regressions = sum(1 for p in entry["points"]
                      if p["verdict"] and p["verdict"]["verdict"] == "regression")
    flag = (f' <span class="regression">{regressions} regression'
            f'{"s" if regressions > 1 else ""}</span>' if regressions else "")
    image = trend_plot(entry)
    picture = (f'<img alt="trend {html.escape(entry["label"])}" '
               f'src="data:image/png;base64,{image}">' if image else "")
    rows = "".join(
        f'<tr class="{"regression" if p["verdict"] and p["verdict"]["verdict"] == "regression" else ""}">'
        f"<td>{_run_link(p['result'], linked)}</td><td>{html.escape(p['software'])}</td>"
        f"<td>{html.escape(fmt(p['mean']))}</td><td>{p['n']}</td>"
        f"<td>{html.escape(_verdict_text(p['verdict']))}</td></tr>" for p in entry["points"])
    table = ("<table class='points'><tr><th>run</th><th>software</th><th>"
             f"{html.escape(entry['figure'])} {html.escape(entry['unit'])}</th><th>rounds</th>"
             f"<th>against the run before</th></tr>{rows}</table>")
    return (f'<figure class="trend" data-filtered {_data(values)}><figcaption>Trend: '
            f'{html.escape(entry["label"])}, {html.escape(entry["figure"])}{flag}</figcaption>'
            f"{picture}<details><summary>Runs ({len(entry['points'])})</summary>{table}</details>"
            "</figure>")


def _percent(ratio: float | None) -> str:
    return "-" if ratio is None else f"{100 * ratio:.1f} %"


def _scaling_html(entry: Mapping[str, Any], linked: Mapping[str, str]) -> str:
    """A case's scaling table on one chip, precision and profile (``db.query.scaling``)."""
    values = {"vendor": entry["vendor"] or UNKNOWN, "chip": entry["chip"] or UNKNOWN,
              "suite": entry["suite"]}
    profile = f", profile {entry['profile']}" if entry["profile"] else ""
    first = entry["points"][0]["chips"]
    label = (f"{entry['model']}-{entry['framework'] or '?'} on {entry['vendor'] or UNKNOWN} "
             f"{entry['chip'] or UNKNOWN}, {entry['precision'] or 'precision unknown'}{profile}")
    rows = "".join(
        f"<tr><td>{p['chips']} ({configuration(p)})</td><td>{html.escape(fmt(p['per_chip']))}"
        f"</td><td>{html.escape(fmt(p['total']))}</td><td>{_percent(p['efficiency'])}</td>"
        f"<td>{p['rounds']}</td><td>{_run_link(p['result'], linked)}</td></tr>"
        for p in entry["points"])
    return (f'<figure class="scaling" data-filtered {_data(values)}><figcaption>Scaling: '
            f"{html.escape(label)}; efficiency = token/p/s at N chips / token/p/s at {first}"
            f"</figcaption><table><tr><th>chips (nodes x procs)</th><th>token/p/s</th>"
            f"<th>tokens/s, all chips</th><th>efficiency</th><th>rounds</th><th>run</th></tr>"
            f"{rows}</table></figure>")


def _row_html(row: Mapping[str, Any], linked: Mapping[str, str]) -> str:
    if row["kind"] == "published":
        cells = [html.escape(c) for c in (
            "published", row["vendor"], row["chip"], row["configuration"], row["framework"],
            row["software"], row["figure_text"], row["metric_text"], "", "")]
        cells.append(f'<span title="{html.escape(row["source"])}">{html.escape(row["label"])}'
                     "</span>")
        return '<tr class="published"><td>' + "</td><td>".join(cells + ["", ""]) + "</td></tr>"
    result = row["result"]
    rank = {"ranked": "", "profile": f"profile {result['profile']}, not ranked",
            "unranked": "no passed round"}[row["kind"]]
    cells = [html.escape(c) for c in (
        rank, row["vendor"], row["chip"], row["configuration"], row["framework"],
        row["software"], row["figure_text"], row["metric_text"], row["mfu"], row["energy"],
        row["reference_text"], str(row["runs"]))] + [_run_link(result, linked)]
    cells[0] = f'<td class="rank">{cells[0]}</td>'
    body = cells[0] + "".join(f"<td>{c}</td>" for c in cells[1:])
    return (f'<tr class="result {row["kind"]}" data-filtered data-group='
            f'"{html.escape(row["group"])}" {_data(facet_values(result))}>{body}</tr>')


def _filters_html(results: list[Mapping[str, Any]]) -> str:
    parts = []
    for facet in FACETS:
        values = sorted({facet_values(r)[facet] for r in results})
        boxes = "".join(f'<label><input type="checkbox" data-facet="{facet}" '
                        f'value="{html.escape(v)}" checked> {html.escape(v)}</label>'
                        for v in values)
        parts.append(f'<fieldset id="filter-{facet}"><legend>{facet}</legend>{boxes}</fieldset>')
    return f'<form id="filters">{"".join(parts)}</form><p id="shown"></p>'


SCRIPT = """(function () {
  var facets = ["vendor", "chip", "suite", "software"];
  function chosen() {
    var picked = {};
    facets.forEach(function (f) {
      picked[f] = {};
      document.querySelectorAll('#filters input[data-facet="' + f + '"]').forEach(function (b) {
        if (b.checked) { picked[f][b.value] = true; }
      });
    });
    return picked;
  }
  function shows(element, picked) {
    return facets.every(function (f) {
      var value = element.getAttribute("data-" + f);
      return value === null || value.split("|").some(function (v) { return picked[f][v]; });
    });
  }
  function apply() {
    var picked = chosen(), shown = 0, total = 0;
    document.querySelectorAll("[data-filtered]").forEach(function (element) {
      var visible = shows(element, picked);
      element.hidden = !visible;
      if (element.classList.contains("result")) { total += 1; shown += visible ? 1 : 0; }
    });
    document.querySelectorAll(".board").forEach(function (board) {
      board.hidden = board.querySelectorAll("tr.result:not([hidden])").length === 0;
      var next = {}, ranked = board.querySelectorAll("tr.ranked:not([hidden])"), groups = {};
      ranked.forEach(function (row) { groups[row.getAttribute("data-group")] = true; });
      var several = Object.keys(groups).length > 1;
      board.querySelectorAll("tr.ranked").forEach(function (row) {
        var cell = row.querySelector("td.rank"), group = row.getAttribute("data-group");
        if (row.hidden) { cell.textContent = ""; return; }
        next[group] = (next[group] || 0) + 1;
        // Rows are ranked only against rows of the same main figure: say which, if several.
        cell.textContent = String(next[group]) + (several ? " by " + group : "");
      });
    });
    document.querySelectorAll("section.suite").forEach(function (section) {
      section.hidden = section.querySelectorAll(".board:not([hidden])").length === 0;
    });
    document.getElementById("shown").textContent = shown + " of " + total + " rows shown";
  }
  document.querySelectorAll("#filters input").forEach(function (box) {
    box.addEventListener("change", apply);
  });
  apply();
})();"""

STYLE = ("body{font-family:sans-serif;max-width:96em;margin:auto;padding:0 0.5em}"
         "table{border-collapse:collapse;margin:0.4em 0}td,th{border:1px solid #ccc;"
         "padding:2px 6px;text-align:left;font-size:0.9em}.wide{overflow-x:auto}"
         "tr.profile td{background:#f6f3ea}tr.published td{background:#eef3f8;color:#333}"
         "tr.regression td,.regression{color:#c62828}td.rank{font-weight:bold}"
         "fieldset{display:inline-block;vertical-align:top;margin:0 0.5em 0.5em 0}"
         "label{display:block;font-size:0.9em}figure{margin:0.5em 0}"
         "figcaption{font-size:0.9em;font-weight:bold}img{display:block;max-width:100%}"
         "summary{cursor:pointer}h4{margin:1em 0 0.2em}")


def _anchor(*parts: str) -> str:
    return "board-" + re.sub(r"[^A-Za-z0-9_-]+", "-", "-".join(parts))


def site_html(data: Mapping[str, Any], linked: Mapping[str, str]) -> str:
    """``index.html``: counts, the filters, and per suite its boards (table and trends)."""
    results = data["results"]
    boards = leaderboard(data)
    sources: dict[str, set[str]] = {}
    for result in results:
        sources.setdefault(result["source"], set()).add(result["uid"])
    days = sorted(_day(r.get("created")) for r in results if r.get("created"))
    counted = ", ".join(f"{len(uids)} {name}" for name, uids in sorted(sources.items()))
    parts = [f"<h1>flagperf-ansible results</h1><p>{sum(len(u) for u in sources.values())} "
             f"run(s) ({html.escape(counted)}), {len(results)} case result(s)"
             + (f", {html.escape(days[0])} to {html.escape(days[-1])}" if days else "")
             + ". Main figures are means over each run's passed rounds; a profile (such as "
             "cpu) is not the standard configuration and is never ranked against it.</p>",
             _filters_html(results)]
    by_suite: dict[str, list[dict[str, Any]]] = {}
    for board in boards:
        by_suite.setdefault(board["suite"], []).append(board)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    for suite, members in by_suite.items():
        parts.append(f'<section class="suite" data-suite="{html.escape(suite)}">'
                     f"<h2>{html.escape(suite)}</h2>")
        for board in members:
            rows = "".join(_row_html(r, linked) for r in board["rows"] + board["published_rows"])
            # A trend starts at a configuration's second run (its first is the row itself).
            trends_html = "".join(_trend_html(s, linked) for s in board["series"]
                                  if len(s["points"]) > 1)
            scaling_html = "".join(_scaling_html(e, linked) for e in board["scaling"])
            parts.append(f'<div class="board" id="{_anchor(suite, board["model"])}">'
                         f"<h4>{html.escape(board['model'])} ({html.escape(suite)})</h4>"
                         f"<div class='wide'><table><tr>{head}</tr>{rows}</table></div>"
                         f"{scaling_html}{trends_html}</div>")
        parts.append("</section>")
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>flagperf-ansible "
            f"results</title><style>{STYLE}</style></head><body>" + "\n".join(parts)
            + f"<script>{SCRIPT}</script></body></html>\n")


def write_site(data: Mapping[str, Any], out_dir: Path) -> Path:
    """Write the site into ``out_dir`` (created; an earlier site there is replaced): each
    run's summary.html copied to ``runs/<uid prefix>/summary.html`` where it still exists,
    then ``index.html``. Returns the path of ``index.html``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_dir = out_dir / "runs"
    if runs_dir.is_dir():
        shutil.rmtree(runs_dir)
    linked: dict[str, str] = {}
    for result in data["results"]:
        source = result.get("summary_html")
        if result["uid"] in linked or not source or not Path(source).is_file():
            continue
        target = runs_dir / result["uid"][:16] / "summary.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        linked[result["uid"]] = str(target.relative_to(out_dir))
    from flagperf_ansible.results.layout import write_text

    index = out_dir / "index.html"
    write_text(index, site_html(data, linked))
    return index
