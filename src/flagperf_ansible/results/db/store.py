"""Writing run records (``records.read_run``) into the database: all of them in one
transaction under the write lock (``engine.writing``), so that an ingest stores every run it
was given or none, and two ingests at once never interleave.

A run is stored once. Its ``uid`` (source and run id) finds it again: the same content
(``fingerprint``) is left as it is (``unchanged``); other content (a round added by
``--resume``, a round parsed again by ``summarize``) replaces it (``replaced``), its rows
deleted by cascade. The published figures of its cases are kept once per case and
configuration, the newest catalog's winning.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from sqlalchemy import Connection, Engine, delete, insert, select, update

from flagperf_ansible.results.db.engine import migrate, writing
from flagperf_ansible.results.db.schema import cases, figures, hosts, nodes, published, \
    published_figures, results, rounds, runs, software

RUN_COLUMNS = ("uid", "fingerprint", "source", "run_id", "created", "vendor", "status", "path",
               "summary_html", "git_commit", "git_dirty", "versions")
RESULT_COLUMNS = ("case_key", "hardware", "chip", "nnodes", "nproc_per_node", "profile",
                  "profile_label", "precision", "software", "status", "rounds_planned",
                  "rounds_passed", "figure", "unit", "metric", "comparison", "target")
HOST_COLUMNS = ("label", "cpu_model", "logical_cores", "memory_bytes", "kernel", "chip",
                "devices", "driver")


def store_runs(engine: Engine, records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Store ``records`` (migrating the database first); returns, per record, ``stored``,
    ``unchanged`` or ``replaced``. Nothing is stored when any of them fails."""
    migrate(engine)
    with writing(engine) as connection:
        return [store_run(connection, record) for record in records]


def _case_id(connection: Connection, suite: str, model: str, framework: str) -> int:
    where = (cases.c.suite == suite) & (cases.c.model == model) & (cases.c.framework == framework)
    found = connection.execute(select(cases.c.id).where(where)).scalar()
    if found is not None:
        return found
    return connection.execute(insert(cases).values(suite=suite, model=model, framework=framework)
                              ).inserted_primary_key[0]


def store_run(connection: Connection, record: Mapping[str, Any]) -> str:
    """Store one record on ``connection`` (in its transaction, under the write lock)."""
    existing = connection.execute(select(runs.c.id, runs.c.fingerprint)
                                  .where(runs.c.uid == record["uid"])).first()
    if existing is not None and existing.fingerprint == record["fingerprint"]:
        return "unchanged"
    if existing is not None:
        connection.execute(delete(runs).where(runs.c.id == existing.id))
    run_id = connection.execute(insert(runs).values(
        **{k: record[k] for k in RUN_COLUMNS}, ingested=datetime.now(timezone.utc))
    ).inserted_primary_key[0]
    host_ids = {}
    for host in record["hosts"]:
        host_ids[host["label"]] = connection.execute(insert(hosts).values(
            run_id=run_id, **{k: host.get(k) for k in HOST_COLUMNS})).inserted_primary_key[0]
        rows = [{"host_id": host_ids[host["label"]], "name": name, "version": version}
                for name, version in (host.get("software") or {}).items()]
        if rows:
            connection.execute(insert(software), rows)
    for result in record["results"]:
        result_id = connection.execute(insert(results).values(
            run_id=run_id,
            case_id=_case_id(connection, result["suite"], result["model"], result["framework"]),
            **{k: result.get(k) for k in RESULT_COLUMNS})).inserted_primary_key[0]
        round_rows = result["rounds"]
        if not round_rows:
            continue
        ids = connection.execute(
            insert(rounds).returning(rounds.c.id, sort_by_parameter_order=True),
            [{"result_id": result_id, **{k: r[k] for k in ("number", "status", "reason",
                                                           "started_ms", "ended_ms")}}
             for r in round_rows]).scalars().all()
        figure_rows = [{"round_id": round_id, "name": name, **values}
                       for round_id, r in zip(ids, round_rows)
                       for name, values in r["figures"].items()]
        if figure_rows:
            connection.execute(insert(figures), figure_rows)
        node_rows = [{"round_id": round_id, "host_id": host_ids.get(n["label"]),
                      "noderank": n["noderank"], "rc": n["rc"]}
                     for round_id, r in zip(ids, round_rows) for n in r["nodes"]]
        if node_rows:
            connection.execute(insert(nodes), node_rows)
    for entry in record["published"]:
        store_published(connection, entry)
    return "replaced" if existing is not None else "stored"


def store_published(connection: Connection, entry: Mapping[str, Any]) -> None:
    """Keep one case's published figures on one configuration (``records.published_of``),
    replacing what an earlier ingest kept of it."""
    case_id = _case_id(connection, entry["suite"], entry["model"], entry["framework"])
    key = {"case_id": case_id, **{k: entry[k] for k in ("vendor", "hardware", "nnodes",
                                                        "nproc_per_node")}}
    values = {k: entry[k] for k in ("precision", "label", "source", "note")}
    where = [getattr(published.c, k) == v for k, v in key.items()]
    found = connection.execute(select(published.c.id).where(*where)).scalar()
    if found is None:
        found = connection.execute(insert(published).values(**key, **values)
                                   ).inserted_primary_key[0]
    else:
        connection.execute(update(published).where(published.c.id == found).values(**values))
        connection.execute(delete(published_figures)
                           .where(published_figures.c.published_id == found))
    connection.execute(insert(published_figures),
                       [{"published_id": found, "name": name, **figure}
                        for name, figure in entry["figures"].items()])
