"""The trace lake: trace-sized tables as Parquet, partitioned by UTC day
(`<lake>/<table>/day=YYYY-MM-DD/*.parquet`, Hive-style, so Spark and DuckDB both read `day`
from the path; `_schema.parquet` beside them has the columns and no rows), plus the small
tables the stages join (`<lake>/documents/part-0.parquet`). An export from the database, and a
Spark stage, write one file per day (`part-0.parquet`); Spark ingestion adds a file to each day
it stores traces of (rag_loop.engines.raw_lake).

A file is replaced by writing it beside the old one and renaming it over it, so a reader sees
the old file or the new one, never half of either; a day whose rows have not changed since the
last export (same count, same newest ingestion time) is not rewritten. `_days.json` keeps
those fingerprints, and the columns the files have: once a table has a column more (a newer
rag-loop), every day is written again. A reader of several files takes each file's columns by
name (a file without a column gives NULL there).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import duckdb

from rag_loop.store.ddl import utc_day
from rag_loop.store.tables import relation_kind, transaction

# table → its rows with their UTC day (child tables carry their trace's)
DAY_OF = {
    "raw_traces": f"SELECT *, {utc_day()} AS day FROM raw_traces",
    "trace_chunks": "SELECT * FROM trace_chunks",
    "trace_spans": "SELECT * FROM trace_spans",
    "trace_feedback": "SELECT * FROM trace_feedback",
}
WHOLE = ("documents",)  # small tables, one file each
LAKE_TABLES = (*DAY_OF, *WHOLE)  # what trace_lake exports; the Spark engine adds its stages' tables
PART = "part-0.parquet"
FILES = "*.parquet"  # a day's files (hidden ones, being written, end in .tmp)
SCHEMA = "_schema.parquet"  # no rows, the table's columns: what a reader gets while no day exists
FINGERPRINTS = "_days.json"
COLUMNS_KEY = "columns"  # in FINGERPRINTS beside the days: the trace tables' columns the files have
LAKE_VIEW = "rag-loop lake: "  # the comment on a database view of a lake table's day files


def day_file(lake: Path, table: str, day: date) -> Path:
    return lake / table / f"day={day.isoformat()}" / PART


def lake_days(lake: Path, table: str) -> list[date]:
    """The days `table` has in the lake (a file), in order."""
    return sorted({date.fromisoformat(p.parent.name.removeprefix("day="))
                   for p in (lake / table).glob(f"day=*/{FILES}")})


def day_files(lake: Path, table: str, day: date) -> list[Path]:
    """The files of a day of `table`, in name order."""
    return sorted(day_file(lake, table, day).parent.glob(FILES))


def replace_day(con: duckdb.DuckDBPyConnection, query: str, lake: Path, table: str, day: date,
                parameters: list | None = None) -> None:
    """`query`'s rows as the day's only file (the others go after it is in place)."""
    target = day_file(lake, table, day)
    write_parquet(con, query, target, parameters)
    for other in day_files(lake, table, day):
        if other != target:
            other.unlink()


def export_table(con: duckdb.DuckDBPyConnection, lake: Path, table: str, skip: Iterable[date] = ()) -> list[date]:
    """A day-partitioned table of the database (it has `day`) as the lake's day files, but for
    the days in `skip`: what a stage computed on DuckDB gives the Spark engine to build on.
    Returns the days written."""
    days = [d for (d,) in con.execute(f'SELECT DISTINCT day FROM "{table}" WHERE day IS NOT NULL').fetchall()]
    written = sorted(set(days) - set(skip))
    for day in written:
        replace_day(con, f'SELECT * EXCLUDE (day) FROM "{table}" WHERE day = ?', lake, table, day, [day])
    return written


def write_parquet(con: duckdb.DuckDBPyConnection, query: str, target: Path, parameters: list | None = None) -> None:
    """`query`'s rows as the Parquet file `target`, which readers see whole or not at all
    (written hidden beside it, then renamed over it)."""
    staged = hidden_parquet(con, query, target, parameters)
    try:
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


def hidden_parquet(con: duckdb.DuckDBPyConnection, query: str, target: Path, parameters: list | None = None) -> Path:
    """`query`'s rows as a hidden Parquet file beside `target` (neither engine reads it), for
    the caller to rename over `target`; returns its path."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{uuid.uuid4().hex}.tmp")
    try:
        con.execute(f"COPY ({query}) TO {quoted(staged)} (FORMAT parquet)", parameters or [])
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def quoted(path: Path) -> str:
    """A path as a SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"


def _fingerprints(path: Path) -> dict:
    """The stored day fingerprints; none (every day rewritten) if the file is missing or unreadable."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def export_lake(con: duckdb.DuckDBPyConnection, lake: Path, days: Iterable[date] | None = None) -> dict[str, int]:
    """Write the changed days (or just `days`) of every trace table, and the whole small
    tables, from the database to the lake. Returns days written and days unchanged. Trace
    tables that Spark ingestion keeps in this lake (the database has views of their files)
    are there already: only the small tables are written."""
    lake.mkdir(parents=True, exist_ok=True)
    if all(in_lake(con, lake, table) for table in DAY_OF):
        _export_whole(con, lake)
        return {"days_written": 0, "days_unchanged": 0}
    current = {str(day): [count, str(newest)] for day, count, newest in con.execute(
        f"SELECT {utc_day()} AS day, count(*), max(ingested_at) FROM raw_traces GROUP BY day ORDER BY day"
    ).fetchall()}
    stored_path = lake / FINGERPRINTS
    stored = _fingerprints(stored_path)
    columns = _columns(con)
    if stored.setdefault(COLUMNS_KEY, columns) != columns:  # a column added: every day's files lack it
        stored = {COLUMNS_KEY: columns}
        days = None
    wanted = set(map(str, days)) & set(current) if days is not None else set(current)
    changed = sorted(d for d in wanted if stored.get(d) != current[d]
                     or any(day_files(lake, t, date.fromisoformat(d)) != [day_file(lake, t, date.fromisoformat(d))]
                            for t in DAY_OF))
    for table, query in DAY_OF.items():
        for day in changed:
            replace_day(con, f"SELECT * EXCLUDE (day) FROM ({query}) WHERE day = $1", lake, table,
                        date.fromisoformat(day), [date.fromisoformat(day)])
    for table, query in DAY_OF.items():
        write_parquet(con, f"SELECT * EXCLUDE (day) FROM ({query}) LIMIT 0", lake / table / SCHEMA)
    _export_whole(con, lake)
    stored.update({d: current[d] for d in changed})
    staged = stored_path.with_name(f".{FINGERPRINTS}.tmp")
    staged.write_text(json.dumps(stored, indent=1, sort_keys=True))
    os.replace(staged, stored_path)
    return {"days_written": len(changed), "days_unchanged": len(wanted) - len(changed)}


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Each trace table's columns and types, as the lake's day files have them."""
    return {table: [f"{name} {kind}" for name, kind, *_ in con.execute(f"DESCRIBE ({query})").fetchall()]
            for table, query in DAY_OF.items()}


def _export_whole(con: duckdb.DuckDBPyConnection, lake: Path) -> None:
    for table in WHOLE:
        write_parquet(con, f"SELECT * FROM {table}", lake / table / PART)


def in_lake(con: duckdb.DuckDBPyConnection, lake: Path, name: str) -> bool:
    """Whether the database's `name` is a view of this lake's files of `name`."""
    return lake_view_folder(con, name) == lake.resolve() / name


def expose_lake_table(con: duckdb.DuckDBPyConnection, lake: Path, name: str, columns: Sequence[str]) -> None:
    """The database's `name` becomes a marked view of the lake's table `name` (its day files, or
    its schema file while it has none) with `columns` in that order, in place of the table of
    that name if there is one, in one transaction."""
    expose_lake_tables(con, lake, {name: columns})


def expose_lake_tables(con: duckdb.DuckDBPyConnection, lake: Path, columns: Mapping[str, Sequence[str]]) -> None:
    """`expose_lake_table` for each table (name: its columns), all in one transaction."""
    with transaction(con):
        for name in columns:
            if relation_kind(con, name) == "table":
                con.execute(f'DROP TABLE "{name}"')
        create_lake_views(con, lake, columns)


def create_lake_views(con: duckdb.DuckDBPyConnection, lake: Path, columns: Mapping[str, Sequence[str]],
                      catalog: str | None = None) -> None:
    """(Re)create the marked view of each lake table (name: its columns) in the database's
    schema, or in `catalog`'s (a name that a temp table of the connection shadows); inside
    the caller's transaction. A view made while its table had no day reads the schema file
    until made again; a column no day file has yet (one added since they were written) is NULL,
    of its type in the schema file."""
    for name, listed in columns.items():
        view = f'"{catalog}".main."{name}"' if catalog else f'"{name}"'
        rows = lake_query(lake.resolve(), name)
        present = {column for column, *_ in con.execute(f"DESCRIBE ({rows})").fetchall()}
        schema = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet("
                                  f"{quoted(lake / name / SCHEMA)}))").fetchall()) if set(listed) - present else {}
        selected = ", ".join(f'"{c}"' if c in present else f'NULL::{schema[c]} AS "{c}"' for c in listed)
        con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT {selected} FROM ({rows})")
        mark_lake_view(con, view, lake.resolve() / name)


def mark_lake_view(con: duckdb.DuckDBPyConnection, view: str, folder: Path) -> None:
    """Say on the database's view `view` (SQL: a quoted, maybe qualified, name) that it reads
    the day files of the lake table `folder`."""
    comment = (LAKE_VIEW + str(folder)).replace("'", "''")
    con.execute(f"COMMENT ON VIEW {view} IS '{comment}'")


def lake_view_folder(con: duckdb.DuckDBPyConnection, name: str) -> Path | None:
    """The lake table folder whose day files the database's view `name` reads, as
    `mark_lake_view` said; None for a table, or a view it did not mark."""
    comments = con.execute("SELECT comment FROM duckdb_views() WHERE view_name = ? AND NOT internal "
                           "AND schema_name = current_schema()", [name]).fetchall()
    comment = comments[0][0] if comments else None
    return Path(comment.removeprefix(LAKE_VIEW)) if comment and comment.startswith(LAKE_VIEW) else None


def day_file_fingerprints(folder: Path) -> dict[date, str]:
    """Per day of the lake table `folder`, its files' names, sizes and modification times: every
    change of a day writes a file (renamed over an old one, or added), so a day's fingerprint
    changes with its rows, and reading it opens no file."""
    lake, table = folder.parent, folder.name
    return {day: " ".join(f"file:{path.name}:{stat.st_size}:{stat.st_mtime_ns}"
                          for path in day_files(lake, table, day) for stat in [path.stat()])
            for day in lake_days(lake, table)}


def read_lake(con: duckdb.DuckDBPyConnection, lake: Path, table: str) -> duckdb.DuckDBPyRelation:
    """A table of the lake as a DuckDB relation (day-partitioned tables carry `day`)."""
    return con.sql(lake_query(lake, table))


def lake_query(lake: Path, table: str, days: Sequence[date] | None = None) -> str:
    """DuckDB SQL reading a table of the lake, or only those days of a day-partitioned one
    (each must have a file)."""
    if table in WHOLE:
        return f"SELECT * FROM read_parquet({quoted(lake / table / PART)})"
    if days is None and not lake_days(lake, table):
        return f"SELECT *, NULL::DATE AS day FROM read_parquet({quoted(lake / table / SCHEMA)})"
    files = quoted(lake / table / f"day=*/{FILES}") if days is None else \
        "[" + ", ".join(quoted(path) for day in days for path in day_files(lake, table, day)) + "]"
    return (f"SELECT * FROM read_parquet({files}, hive_partitioning = true, hive_types = {{'day': DATE}}, "
            "union_by_name = true)")  # a file from before a column was added has NULL in it


def spark_columns(con: duckdb.DuckDBPyConnection, relation: str) -> Any:
    """The Spark schema of the database relation `relation` (SQL: a quoted, maybe qualified,
    name) but `day`, which Spark takes from the day folders: what to read a lake table's files
    with, so that a file from before a column gives NULL there (Spark would otherwise take one
    file's columns for all). pyspark is imported here only."""
    from pyspark.sql.pandas.types import from_arrow_schema
    listed = ", ".join(f'"{c}"' for c, *_ in con.execute(f"DESCRIBE {relation}").fetchall() if c != "day")
    return from_arrow_schema(con.sql(f"SELECT {listed} FROM {relation} LIMIT 0").arrow().read_all().schema)
