"""Alembic's environment for the results database: migrations run on the connection that
``engine.migrate`` hands over (holding the write lock), or, for ``alembic revision``, on one
opened from the configuration's URL."""

from alembic import context
from sqlalchemy import create_engine

from flagperf_ansible.results.db.schema import metadata

connection = context.config.attributes.get("connection")


def run(bound) -> None:
    # render_as_batch: SQLite alters a table by copying it, which Alembic's batch mode does.
    context.configure(connection=bound, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if connection is not None:
    run(connection)
else:
    with create_engine(context.config.get_main_option("sqlalchemy.url")).connect() as opened:
        run(opened)
        opened.commit()
