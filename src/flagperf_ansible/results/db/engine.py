"""Connecting to the results database, its write lock, and its migrations.

The database is a SQLite file by default (``<checkout>/results/results.db``, beside the runs
that ``flagperf_results_dir`` keeps; ``FLAGPERF_RESULTS_DB`` or ``--db`` names another file),
or any SQLAlchemy URL, e.g. a team's PostgreSQL server
(``postgresql+psycopg://user@host/flagperf``; ``pip install 'flagperf-ansible[postgresql]'``).

Writers never interleave: every write is one transaction that first takes the database's
write lock (``writing``): ``BEGIN IMMEDIATE`` on SQLite (readers go on, in WAL mode),
``pg_advisory_xact_lock`` on PostgreSQL; a second writer waits for the first to commit.

The schema is versioned with Alembic; its scripts ship in ``migrations/`` and ``migrate``
brings a database to the newest one under the write lock (so two first ingests do not both
create the tables). A new revision: ``alembic.command.revision(alembic_config(URL), MESSAGE,
autogenerate=True)`` against a database at the current head, then edit what it wrote.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from flagperf_ansible.config.errors import ConfigError

#: Names the database when ``--db`` does not.
URL_ENV = "FLAGPERF_RESULTS_DB"
DEFAULT_FILE = "results.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
#: The newest revision in ``migrations/versions/`` (a test checks it is Alembic's head): a
#: database already there is used without loading Alembic.
HEAD = "0001"
#: The PostgreSQL advisory lock every writer takes (any constant: "flagperf" in ASCII).
LOCK_KEY = 0x666C6167706572
#: How long a SQLite writer waits for another one's lock, in seconds.
SQLITE_WAIT_S = 120


def default_database() -> Path:
    """``<checkout>/results/results.db``: in the results folder that ``flagperf_results_dir``
    names by default (relative to the checkout)."""
    from flagperf_ansible.config.settings import Settings
    from flagperf_ansible.paths import project_dir

    folder = Path(Settings.model_fields["flagperf_results_dir"].default)
    return (folder if folder.is_absolute() else project_dir() / folder) / DEFAULT_FILE


def database_url(value: str | None = None) -> str:
    """The SQLAlchemy URL of ``value`` (a URL with ``://``, or a SQLite file's path), else of
    ``$FLAGPERF_RESULTS_DB``, else of ``default_database()``.

    Raises:
        ConfigError: not a URL SQLAlchemy reads.
    """
    value = value or os.environ.get(URL_ENV) or str(default_database())
    if "://" not in value:
        return f"sqlite:///{Path(value).expanduser().resolve()}"
    try:
        make_url(value)
    except ArgumentError as err:
        raise ConfigError(f"not a database URL: {err}", "command line", "--db") from None
    return value


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for another database (or SQLite in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def shown(url: str) -> str:
    """The URL as printed: without its password."""
    return make_url(url).render_as_string(hide_password=True)


def connect(url: str) -> Engine:
    """An engine for ``url`` (``database_url``). SQLite: the file's folder is created, foreign
    keys enforced (``ON DELETE CASCADE``), WAL journal (readers do not wait for a writer), and
    a writer waits up to ``SQLITE_WAIT_S`` for another.

    Raises:
        ConfigError: the URL names a driver that is not installed.
    """
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            return create_engine(parsed, pool_pre_ping=True)
    except NoSuchModuleError as err:
        raise ConfigError(f"{err} (for PostgreSQL: pip install 'flagperf-ansible[postgresql]')",
                          shown(url)) from None
    except ModuleNotFoundError as err:
        raise ConfigError(f"the database driver {err.name} is not installed (for PostgreSQL: "
                          "pip install 'flagperf-ansible[postgresql]')", shown(url)) from None
    if sqlite_file(url) is not None:
        sqlite_file(url).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed, connect_args={"timeout": SQLITE_WAIT_S})

    @event.listens_for(engine, "connect")
    def _sqlite_connect(dbapi_connection, _record) -> None:
        # pysqlite's own transaction handling is off: ``_sqlite_begin`` says BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_WAIT_S * 1000}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _sqlite_begin(connection: Connection) -> None:
        # A writer takes the lock when it begins, not at its first write: two writers that
        # both read first would otherwise deadlock, one of them failing with "locked".
        write = connection.get_execution_options().get("flagperf_write")
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


@contextmanager
def writing(engine: Engine) -> Iterator[Connection]:
    """One transaction holding the database's write lock (see the module docstring);
    committed when the block ends, rolled back when it raises."""
    with engine.connect() as connection:
        connection.execution_options(flagperf_write=True)
        with connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
            yield connection


def alembic_config(url: str):
    """Alembic's configuration for this package's migrations and ``url``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def current_revision(engine: Engine) -> str | None:
    """The database's schema revision (Alembic's ``alembic_version``), None before the first
    migration."""
    from sqlalchemy import inspect

    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):
            return None
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def migrate(engine: Engine) -> str:
    """Bring the database to the newest schema (Alembic ``upgrade head``) under the write lock;
    returns the revision. A database already there is only read.

    Raises:
        ConfigError: the database is at a revision this version does not know (written by a
            newer flagperf-ansible), or is not reachable.
    """
    from sqlalchemy.exc import OperationalError

    url = engine.url.render_as_string(hide_password=False)
    try:
        if current_revision(engine) == HEAD:
            return HEAD
        from alembic import command
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        config = alembic_config(url)
        scripts = ScriptDirectory.from_config(config)
        head = scripts.get_current_head()
        with writing(engine) as connection:
            current = MigrationContext.configure(connection).get_current_revision()
            known = {revision.revision for revision in scripts.walk_revisions()}
            if current is not None and current not in known:
                raise ConfigError(f"the database is at schema revision {current}, which this "
                                  f"flagperf-ansible does not know (its newest is {head}): "
                                  "upgrade flagperf-ansible", shown(url))
            if current != head:
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
    except OperationalError as err:
        raise ConfigError(f"cannot open the database: {str(err.orig).strip()}",
                          shown(url)) from None
    return head
