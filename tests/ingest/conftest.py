"""Ingestion tests query what was ingested; none reopens its database, so `con` is in memory:
an on-disk database syncs its WAL at each file's COMMIT, and the idle waits add up (issue 44).
Ingestion into a database file stays covered (test_bad_lines_named, the summary test in
otlp/test_assembly, test_assets, the e2e tests)."""

import duckdb
import pytest


@pytest.fixture
def con():
    """An in-memory database (overrides the root conftest's on-disk one for tests/ingest)."""
    with duckdb.connect() as connection:
        yield connection
