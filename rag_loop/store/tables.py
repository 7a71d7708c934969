"""Table helpers every stage uses: does a table exist, replace one from a frame, the ingestion
tables."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import date

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
    (a view of that name, the trace lake's table in a lake-backed deployment, is left as it is)."""
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
