"""Connect arguments for an Airflow metadata database on SQLite (``make airflow``, ``make demo``,
the end-to-end stack).

SQLite lets one connection write at a time, and Python's sqlite3 gives up on a lock after 5 s.
With a scheduler, a dag-processor and an api-server writing to one file on a busy 2-core
machine, a CLI write such as ``airflow backfill create`` can wait longer than that and fail
with "database is locked". A minute's patience turns that into a short wait.

``[database] sql_alchemy_connect_args`` (and its ``_async`` twin) point here, for SQLite only:
PostgreSQL's drivers have no ``timeout`` argument.
"""

CONNECT_ARGS = {"timeout": 60}
"""sqlite3.connect (and aiosqlite.connect, which passes them on) keyword arguments."""
