"""The PostgreSQL server the tests that need one use (the distributed mode's metadata DB, the asset manager's
PostgreSQL path): each makes a database of its own there and drops it afterwards."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager

POSTGRES = os.environ.get("AIGC_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
"""An admin URL: the tests create and drop their own databases."""


def admin_connection():
    """An autocommit connection to POSTGRES; raises if the server is unusable (the caller skips, saying so)."""
    import psycopg2

    connection = psycopg2.connect(POSTGRES, connect_timeout=5)
    connection.autocommit = True
    return connection


@contextmanager
def scratch_database(admin, prefix: str):
    """A new empty database, as a SQLAlchemy URL (psycopg2 named: SQLAlchemy 2.1's default PostgreSQL driver is
    psycopg 3); dropped on leaving, with whatever still holds it disconnected, and ``admin`` closed."""
    database = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{database}"')
    try:
        yield POSTGRES.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg2://", 1) + f"/{database}"
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.close()
