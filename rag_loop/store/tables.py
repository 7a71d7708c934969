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
    NEW_PENDING,
    PENDING_FROM_SPANS,
)


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create every ingestion table that does not exist yet, and bring older ones up to date
    (a view of that name, the trace lake's table in a lake-backed deployment, is left as it is).
    An up-to-date database costs one catalog query (each table's CREATE statement as DuckDB
    writes it from the catalog, the same as a new database's), a new one the DDL besides; any
    other the columns' catalog query (`_missing`), which lists every internal view's columns."""
    expected, statements = _ingestion_schema()
    relations = {name: sql for name, sql in con.execute(_RELATIONS).fetchall() if name in expected}
    if all(relations.get(name, "") in (None, statement) for name, statement in statements.items()):
        return
    found = _schema(con, list(expected)) if relations else {}
    if _missing(expected, found):
        _create_or_update(con, found)


def _create_or_update(con: duckdb.DuckDBPyConnection, found: dict[str, dict[str, bool] | None]) -> None:
    """The statements `create_tables` needs, given what `_schema` `found` before: the tables' DDL
    (a no-op for those that exist; a new table has every column), the columns added since the
    first release that an existing table lacks, the child tables' days (`add_child_days`)."""
    con.execute(INGESTION_DDL)
    if "otlp_pending" not in found:  # from the stored spans, if there are any
        con.execute(PENDING_FROM_SPANS if "otlp_spans" in found else NEW_PENDING)
    for table, columns in ADDED_COLUMNS.items():
        present = found.get(table)
        if present is None:  # a new table, made with them just now; a view, left as it is
            continue
        for column in columns:
            if column.split()[0] not in present:
                con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column}")
    if any(found.get(table) is not None for table in CHILD_TABLES):
        add_child_days(con)


def add_child_days(con: duckdb.DuckDBPyConnection) -> None:
    """Child tables from before `day` get the column, their rows their trace's day, and the
    column becomes NOT NULL as in a new database (unless a row has no trace to take it from).
    An up-to-date database costs one catalog query (their CREATE statements, the same as a new
    database's) and no write."""
    _, statements = _ingestion_schema()
    listed = ", ".join(f"'{table}'" for table in CHILD_TABLES)
    if all(sql == statements[table] for table, sql in con.execute(
            "SELECT table_name, sql FROM duckdb_tables() "
            f"WHERE schema_name = current_schema() AND table_name IN ({listed})").fetchall()):
        return
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


# every relation of the current schema (a list parameter to filter them by costs more than they do)
_RELATIONS = """
    SELECT table_name, sql FROM duckdb_tables()
    WHERE database_name = current_database() AND schema_name = current_schema()
    UNION ALL
    SELECT view_name, NULL FROM duckdb_views()
    WHERE database_name = current_database() AND schema_name = current_schema() AND NOT internal"""

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
def _ingestion_schema() -> tuple[dict[str, dict[str, bool]], dict[str, str]]:
    """What `create_tables` makes of a new database: each table's columns and whether they are
    nullable, and its CREATE statement, read from the catalog of a scratch in-memory database
    (once a process)."""
    with duckdb.connect() as scratch:
        _create_or_update(scratch, {})
        statements = dict(scratch.execute(
            "SELECT table_name, sql FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = current_schema()").fetchall())
        return _schema(scratch, list(statements)), statements


def _schema(con: duckdb.DuckDBPyConnection, names: list[str]) -> dict[str, dict[str, bool] | None]:
    """Each of the relations `names` that exists: its columns and their nullability, None for a view."""
    schema: dict[str, dict[str, bool] | None] = {}
    for name, column, nullable in con.execute(_CATALOG, {"names": names}).fetchall():
        if column is None:
            schema[name] = None
        elif schema.setdefault(name, {}) is not None:
            schema[name][column] = nullable
    return schema


def _missing(expected: dict[str, dict[str, bool]], found: dict[str, dict[str, bool] | None]) -> bool:
    """Whether a table a new database has (`expected`) is not `found` (nor a view of that
    name), or lacks a column, or has it nullable where a new database's is NOT NULL: then
    `create_tables` has work to do. A column or table a newer version declares is missing."""
    for name, columns in expected.items():
        if name not in found:
            return True
        present = found[name]
        if present is None:  # a view: left as it is
            continue
        if any(column not in present or (present[column] and not nullable)
               for column, nullable in columns.items()):
            return True
    return False


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
