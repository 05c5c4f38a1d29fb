"""The tables of the results database (SQLAlchemy Core), as migration ``0001`` creates them.

::

    runs ─┬─ hosts ── software               a run, where it ran (hosts masked: host<i>),
          │                                  with what (software versions per host)
          └─ results ── rounds ─┬─ figures   a case in a run, its rounds, each round's figures
                                └─ nodes     (value, unit, direction) and nodes (host, noderank)
    cases ── published ── published_figures  a case (suite, model, framework), the figures
                                             published for it (FlagPerf's)

A run is stored once: ``runs.uid`` identifies it (its source and identity: our run's id and
start, a FlagPerf folder's name and rank logs, MLPerf logs' bytes), ``runs.fingerprint``
its content; a run stored again with other content replaces the earlier one. Deleting a run
deletes everything under it (``ON DELETE CASCADE``). Changing a table means a new migration in
``migrations/versions/`` (``alembic revision``), never an edit of an old one.
"""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Boolean, Column, DateTime, Float, ForeignKey, Integer, \
    MetaData, SmallInteger, String, Table, Text, UniqueConstraint

#: Constraint names the same on every database, so that later migrations can name them.
NAMING = {"ix": "ix_%(column_0_label)s", "uq": "uq_%(table_name)s_%(column_0_N_name)s",
          "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
          "pk": "pk_%(table_name)s"}

metadata = MetaData(naming_convention=NAMING)


def _parent(table: str) -> ForeignKey:
    return ForeignKey(f"{table}.id", ondelete="CASCADE")


runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True),
    Column("uid", String(64), nullable=False, unique=True),      # sha256 of source, identity
    Column("fingerprint", String(64), nullable=False),           # sha256 of what was stored
    Column("source", String(20), nullable=False),                # flagperf-ansible, flagperf, mlperf
    Column("run_id", String(255), nullable=False),
    Column("created", DateTime(timezone=True)),                  # when it ran
    Column("ingested", DateTime(timezone=True), nullable=False),
    Column("vendor", String(100)),
    Column("status", String(20), nullable=False),
    Column("path", Text, nullable=False),                        # the folder or log ingested
    Column("summary_html", Text),                                # its summary.html, if any
    Column("git_commit", String(64)),
    Column("git_dirty", Boolean),
    Column("versions", JSON),                                    # the controller's versions
)

hosts = Table(
    "hosts", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer, _parent("runs"), nullable=False, index=True),
    Column("label", String(50), nullable=False),                 # host<i>, never a name
    Column("cpu_model", String(255)),
    Column("logical_cores", Integer),
    Column("memory_bytes", BigInteger),
    Column("kernel", String(255)),
    Column("chip", String(255)),                                 # the accelerator's name
    Column("devices", Integer),
    Column("driver", String(255)),
    UniqueConstraint("run_id", "label"),
)

software = Table(
    "software", metadata,
    Column("id", Integer, primary_key=True),
    Column("host_id", Integer, _parent("hosts"), nullable=False, index=True),
    Column("name", String(100), nullable=False),
    Column("version", String(100), nullable=False),
    UniqueConstraint("host_id", "name"),
)

cases = Table(
    "cases", metadata,
    Column("id", Integer, primary_key=True),
    Column("suite", String(20), nullable=False),
    Column("model", String(100), nullable=False),
    Column("framework", String(100), nullable=False),            # "" where a log does not say
    UniqueConstraint("suite", "model", "framework"),
)

results = Table(
    "results", metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer, _parent("runs"), nullable=False, index=True),
    Column("case_id", Integer, ForeignKey("cases.id"), nullable=False, index=True),
    Column("case_key", String(255), nullable=False),             # the run's case id
    Column("hardware", String(100)),
    Column("chip", String(255)),
    Column("nnodes", Integer),
    Column("nproc_per_node", Integer),
    Column("profile", String(100)),                              # NULL: the standard configuration
    Column("profile_label", Text),
    Column("precision", String(50)),
    Column("software", String(255)),                             # the framework's version, driver
    Column("status", String(20), nullable=False),
    Column("rounds_planned", Integer, nullable=False),
    Column("rounds_passed", Integer, nullable=False),
    Column("figure", String(100)),                               # the main figure
    Column("unit", String(50)),
    Column("metric", String(100)),                               # the target's FINISHED key
    Column("comparison", String(2)),
    Column("target", Float),
    UniqueConstraint("run_id", "case_key"),
)

rounds = Table(
    "rounds", metadata,
    Column("id", Integer, primary_key=True),
    Column("result_id", Integer, _parent("results"), nullable=False, index=True),
    Column("number", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("reason", Text),
    Column("started_ms", BigInteger),
    Column("ended_ms", BigInteger),
    UniqueConstraint("result_id", "number"),
)

figures = Table(
    "figures", metadata,
    Column("id", Integer, primary_key=True),
    Column("round_id", Integer, _parent("rounds"), nullable=False, index=True),
    Column("name", String(100), nullable=False),
    Column("value", Float, nullable=False),
    Column("unit", String(50), nullable=False),
    Column("direction", SmallInteger, nullable=False),           # +1 higher better, -1 lower, 0
    UniqueConstraint("round_id", "name"),
)

nodes = Table(
    "nodes", metadata,
    Column("id", Integer, primary_key=True),
    Column("round_id", Integer, _parent("rounds"), nullable=False, index=True),
    Column("host_id", Integer, _parent("hosts"), index=True),
    Column("noderank", Integer, nullable=False),
    Column("rc", Integer),
    UniqueConstraint("round_id", "noderank"),
)

published = Table(
    "published", metadata,
    Column("id", Integer, primary_key=True),
    Column("case_id", Integer, ForeignKey("cases.id"), nullable=False, index=True),
    Column("vendor", String(100), nullable=False),
    Column("hardware", String(100), nullable=False),
    Column("nnodes", Integer, nullable=False),
    Column("nproc_per_node", Integer, nullable=False),
    Column("precision", String(50), nullable=False),
    Column("label", String(255), nullable=False),
    Column("source", Text, nullable=False),
    Column("note", Text, nullable=False),
    UniqueConstraint("case_id", "vendor", "hardware", "nnodes", "nproc_per_node"),
)

published_figures = Table(
    "published_figures", metadata,
    Column("id", Integer, primary_key=True),
    Column("published_id", Integer, _parent("published"), nullable=False, index=True),
    Column("name", String(100), nullable=False),
    Column("value", Float, nullable=False),
    Column("unit", String(50), nullable=False),
    UniqueConstraint("published_id", "name"),
)
