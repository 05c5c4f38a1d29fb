"""The results database: runs kept as data that can be queried, with their provenance.

``schema`` (the tables), ``engine`` (connecting: a SQLite file by default, any SQLAlchemy URL;
the write lock; migrating with Alembic, whose scripts ship in ``migrations/``), ``records``
(a run folder, a FlagPerf results folder or MLPerf logs read into one plain record, refused
in one line when broken or half written), ``store`` (a record written in one transaction,
once), ``query`` (what the leaderboard shows: results, trends, published figures).
"""
