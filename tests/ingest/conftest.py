"""Ingestion tests query what was ingested; none reopens its database, so `con` is in memory:
an on-disk database syncs its WAL at each file's COMMIT, and the idle waits add up (issue 44).
Ingestion into a database file stays covered (test_bad_lines_named, the summary test in
otlp/test_assembly, test_assets, the e2e tests)."""

from collections.abc import Callable, Iterator

import duckdb
import pytest


@pytest.fixture
def con():
    """An in-memory database (overrides the root conftest's on-disk one for tests/ingest)."""
    with duckdb.connect() as connection:
        yield connection


@pytest.fixture(scope="module")
def emptied() -> Iterator[Callable[[str], duckdb.DuckDBPyConnection]]:
    """`emptied(name)`: the module's in-memory database of that name with no row in any table.
    For property tests that ingest per example: opening and closing a database costs ~15 CPU-ms
    and creating its tables ~5 ms, more than a small example's ingestion saves by starting new."""
    databases: dict[str, duckdb.DuckDBPyConnection] = {}

    def empty(name: str) -> duckdb.DuckDBPyConnection:
        if name not in databases:
            databases[name] = duckdb.connect()
        database = databases[name]
        for (table,) in database.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary").fetchall():
            database.execute(f"DELETE FROM {table}")
        return database

    yield empty
    for database in databases.values():
        database.close()
