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
"""

from __future__ import annotations

from typing import Any

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
