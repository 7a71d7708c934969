"""Table helpers every stage uses: does a table exist, replace one from a frame, the ingestion
tables."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import date
from functools import cache

import duckdb
import pandas as pd

from rag_loop.store.ddl import (
    ADDED_COLUMNS,
    CHILD_DAY_BACKFILL,
    CHILD_TABLES,
    DRIFT_DAY_COLUMNS,
    INGESTION_DDL,
    PENDING_FROM_SPANS,
)


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create every ingestion table that does not exist yet, and bring older ones up to date
    (a view of that name, the trace lake's table in a lake-backed deployment, is left as it is).
    An up-to-date database costs one catalog query and no write (`_up_to_date`)."""
    if not _up_to_date(con):
        _create_or_update(con)


def _create_or_update(con: duckdb.DuckDBPyConnection) -> None:
    """Every statement `create_tables` may need, each a no-op where it has nothing to do."""
    con.execute(INGESTION_DDL)
    if relation_kind(con, "otlp_pending") is None:
        con.execute(PENDING_FROM_SPANS)
    for table, columns in ADDED_COLUMNS.items():
        if relation_kind(con, table) == "table":
            for column in columns:
                con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column}")
    add_child_days(con)


def add_child_days(con: duckdb.DuckDBPyConnection) -> None:
    """Child tables from before `day` get the column, their rows their trace's day, and the
    column becomes NOT NULL as in a new database (unless a row has no trace to take it from).
    An up-to-date database costs one catalog query and no write."""
    tables = con.execute("""
        SELECT t.table_name, c.is_nullable FROM duckdb_tables() t
        LEFT JOIN duckdb_columns() c ON c.schema_name = t.schema_name AND c.table_name = t.table_name
                                     AND c.column_name = 'day'
        WHERE t.schema_name = current_schema() AND t.table_name IN (SELECT unnest(?))""",
                         [list(CHILD_TABLES)]).fetchall()
    for table, nullable in tables:
        if nullable is False:
            continue
        con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS day DATE")
        con.execute(CHILD_DAY_BACKFILL.format(table=table))
        if not con.execute(f"SELECT count(*) FROM {table} WHERE day IS NULL").fetchall()[0][0]:
            con.execute(f"ALTER TABLE {table} ALTER COLUMN day SET NOT NULL")


_CATALOG = """
    SELECT t.table_name, c.column_name, c.is_nullable FROM duckdb_tables() t
    JOIN duckdb_columns() c USING (database_name, schema_name, table_name)
    WHERE t.database_name = current_database() AND t.schema_name = current_schema()
      AND t.table_name IN (SELECT unnest($names))
    UNION ALL
    SELECT view_name, NULL, NULL FROM duckdb_views()
    WHERE database_name = current_database() AND schema_name = current_schema() AND NOT internal
      AND view_name IN (SELECT unnest($names))"""


@cache
def _ingestion_schema() -> dict[str, dict[str, bool]]:
    """What `create_tables` makes of a new database: each table's columns and whether they are
    nullable, read from the catalog of a scratch in-memory database (once a process)."""
    with duckdb.connect() as scratch:
        _create_or_update(scratch)
        return _schema(scratch, [name for (name,) in scratch.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = current_schema()").fetchall()])


def _schema(con: duckdb.DuckDBPyConnection, names: list[str]) -> dict[str, dict[str, bool] | None]:
    """Each of the relations `names` that exists: its columns and their nullability, None for a view."""
    schema: dict[str, dict[str, bool] | None] = {}
    for name, column, nullable in con.execute(_CATALOG, {"names": names}).fetchall():
        if column is None:
            schema[name] = None
        elif schema.setdefault(name, {}) is not None:
            schema[name][column] = nullable
    return schema


def _up_to_date(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether every table a new database has is here (or a view of that name) with every
    column, NOT NULL where a new database's is: then `create_tables` has nothing to do. A
    column or table a newer version declares is missing here, and is added by the full path."""
    expected = _ingestion_schema()
    found = _schema(con, list(expected))
    for name, columns in expected.items():
        if name not in found:
            return False
        present = found[name]
        if present is None:  # a view: left as it is
            continue
        if any(column not in present or (present[column] and not nullable)
               for column, nullable in columns.items()):
            return False
    return True


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block's statements in one transaction: committed at its end, rolled back if it raises."""
    con.execute("BEGIN")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether `name` can be read: a table, or a view (a Spark stage's rows in the trace lake)."""
    return relation_kind(con, name) is not None


def relation_kind(con: duckdb.DuckDBPyConnection, name: str) -> str | None:
    """"table", "view" or None: what `name` is in the database's current schema."""
    kinds = con.execute("""
        SELECT 'table' FROM duckdb_tables() WHERE schema_name = current_schema() AND table_name = $name
        UNION ALL
        SELECT 'view' FROM duckdb_views() WHERE schema_name = current_schema() AND view_name = $name
                                          AND NOT internal""", {"name": name}).fetchall()
    return kinds[0][0] if kinds else None


def replace_table(con: duckdb.DuckDBPyConnection, name: str, frame) -> None:
    """(Re)create table `name` from a pandas DataFrame or Arrow table."""
    con.register("_replacement", frame)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _replacement")
    finally:
        con.unregister("_replacement")


def replace_day(con: duckdb.DuckDBPyConnection, table: str, day: date, frame: pd.DataFrame) -> None:
    """Rows of one day replace that day's rows (a rerun of a day is idempotent)."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {table} (day DATE, {DRIFT_DAY_COLUMNS[table]})")
    replace_days(con, table, [day], frame.assign(day=day))


def replace_days(con: duckdb.DuckDBPyConnection, table: str, days: Collection[date], frame: pd.DataFrame) -> None:
    """`frame`, the rows of `days`, in place of those days' rows of `table`, in one transaction
    (a rerun of those days is idempotent; a failure leaves the table as it was)."""
    if not frame.empty:
        con.register("_day_rows", frame)
    try:
        with transaction(con):
            con.execute(f"DELETE FROM {table} WHERE day IN (SELECT unnest($days::DATE[]))", {"days": sorted(days)})
            if not frame.empty:
                con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM _day_rows")
    finally:
        if not frame.empty:
            con.unregister("_day_rows")
