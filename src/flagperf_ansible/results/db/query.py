"""Reading the results database back for the leaderboard: every result with its run and its
figures over the passed rounds, and the published figures.

``load`` returns plain data (no SQLAlchemy objects), as ``results.leaderboard`` takes it:

* ``results``: a case in a run, ``{id, source, uid, run_id, created, vendor, run_status,
  path, summary_html, suite, model, framework, case_key, hardware, chip, nnodes,
  nproc_per_node, profile, profile_label, precision, software, status, rounds_planned,
  rounds_passed, figure, unit, metric, comparison, target, figures: {name: {unit,
  direction, values: [one per passed round, in round order]}}}``, oldest run first;
* ``published``: ``{suite, model, framework, vendor, hardware, nnodes, nproc_per_node,
  precision, label, source, note, figures: {name: {value, unit}}}``.

``scaling`` derives from it the scaling efficiency of the LLM cases (throughput in tokens/s)
that ran at several chip counts, the table FlagPerf's LLM results type by hand.
"""

from __future__ import annotations

from typing import Any, Mapping

from sqlalchemy import Engine, select

from flagperf_ansible.results.db.schema import cases, figures, published, published_figures, \
    results, rounds, runs

RUN_FIELDS = ("source", "uid", "run_id", "created", "vendor", "path", "summary_html")
RESULT_FIELDS = ("case_key", "hardware", "chip", "nnodes", "nproc_per_node", "profile",
                 "profile_label", "precision", "software", "status", "rounds_planned",
                 "rounds_passed", "figure", "unit", "metric", "comparison", "target")


def load(engine: Engine) -> dict[str, Any]:
    """Everything the leaderboard shows (see the module docstring)."""
    query = (select(results.c.id, *(runs.c[k] for k in RUN_FIELDS),
                    runs.c.status.label("run_status"),
                    cases.c.suite, cases.c.model, cases.c.framework,
                    *(results.c[k] for k in RESULT_FIELDS))
             .join(runs, runs.c.id == results.c.run_id)
             .join(cases, cases.c.id == results.c.case_id)
             .order_by(runs.c.created, runs.c.id, results.c.id))
    passed = (select(rounds.c.result_id, figures.c.name, figures.c.value, figures.c.unit,
                     figures.c.direction)
              .join(rounds, rounds.c.id == figures.c.round_id)
              .where(rounds.c.status == "passed")
              .order_by(rounds.c.result_id, rounds.c.number))
    refs = (select(published.c.id, cases.c.suite, cases.c.model, cases.c.framework,
                   published.c.vendor, published.c.hardware, published.c.nnodes,
                   published.c.nproc_per_node, published.c.precision, published.c.label,
                   published.c.source, published.c.note)
            .join(cases, cases.c.id == published.c.case_id).order_by(published.c.id))
    ref_figures = select(published_figures.c.published_id, published_figures.c.name,
                         published_figures.c.value, published_figures.c.unit)
    with engine.connect() as connection:
        found = [dict(row._mapping) | {"figures": {}} for row in connection.execute(query)]
        by_id = {r["id"]: r for r in found}
        for row in connection.execute(passed):
            entry = by_id[row.result_id]["figures"].setdefault(
                row.name, {"unit": row.unit, "direction": row.direction, "values": []})
            entry["values"].append(row.value)
        references = {row.id: dict(row._mapping) | {"figures": {}}
                      for row in connection.execute(refs)}
        for row in connection.execute(ref_figures):
            references[row.published_id]["figures"][row.name] = {"value": row.value,
                                                                 "unit": row.unit}
    return {"results": found, "published": [
        {k: v for k, v in r.items() if k != "id"} for r in references.values()]}


#: The unit of an LLM case's main figure (case.yml ``throughput: {unit: tokens}``).
TOKENS_PER_S = "tokens/s"
#: FINISHED's throughput per chip (FlagPerf's token/p/s), where the driver writes it.
PER_CHIP = "tokens_per_chip_per_second"


def _per_chip(result: Mapping[str, Any], chips: int) -> tuple[float, int] | None:
    """``(tokens/s per chip, rounds)``: the mean over the result's passed rounds of FINISHED's
    ``tokens_per_chip_per_second``, else of its main figure divided by ``chips``."""
    figures = result.get("figures") or {}
    for name, divisor in ((PER_CHIP, 1), (result.get("figure"), chips)):
        values = (figures.get(name or "") or {}).get("values") or []
        if values:
            return sum(values) / len(values) / divisor, len(values)
    return None


def scaling(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The scaling efficiency of each LLM case (main figure in tokens/s) on each chip,
    precision and profile that ran at two chip counts or more.

    Per chip count N (nnodes x nproc_per_node), the latest run with a passed round counts
    (runs in ``load``'s order, oldest first): its token/p/s is the mean over its passed rounds
    (``_per_chip``), and its efficiency that token/p/s over the token/p/s at the smallest N
    held (1.0 there; linear scaling keeps 1.0).

    Args:
        data: ``load``'s.

    Returns:
        ``[{suite, model, framework, vendor, chip, precision, profile, points: [{chips,
        nnodes, nproc_per_node, per_chip (tokens/s per chip), total (tokens/s over all
        chips), rounds, efficiency, result}]}]``, points by chip count.
    """
    groups: dict[tuple, dict[int, Mapping[str, Any]]] = {}
    for result in data["results"]:
        if result.get("unit") != TOKENS_PER_S or not result.get("nnodes") \
                or not result.get("nproc_per_node"):
            continue
        chips = int(result["nnodes"]) * int(result["nproc_per_node"])
        if _per_chip(result, chips) is None:
            continue
        key = tuple(result.get(k) for k in ("suite", "model", "framework", "vendor", "chip",
                                            "precision", "profile"))
        groups.setdefault(key, {})[chips] = result         # a later run replaces an earlier
    out = []
    for key, by_chips in groups.items():
        if len(by_chips) < 2:
            continue
        points = []
        for chips in sorted(by_chips):
            result = by_chips[chips]
            per_chip, rounds = _per_chip(result, chips)
            points.append({"chips": chips, "nnodes": result["nnodes"],
                           "nproc_per_node": result["nproc_per_node"], "per_chip": per_chip,
                           "total": per_chip * chips, "rounds": rounds, "result": result})
        base = points[0]["per_chip"]
        for point in points:
            point["efficiency"] = point["per_chip"] / base if base > 0 else None
        out.append(dict(zip(("suite", "model", "framework", "vendor", "chip", "precision",
                             "profile"), key), points=points))
    return out
