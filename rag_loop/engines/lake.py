"""The trace lake: trace-sized tables as Parquet, one file per table and UTC day
(`<lake>/<table>/day=YYYY-MM-DD/part-0.parquet`, Hive-style, so Spark and DuckDB both read
`day` from the path; `_schema.parquet` beside them has the columns and no rows), plus the small
tables the stages join (`<lake>/documents/part-0.parquet`).

A day is replaced by writing its file beside the old one and renaming it over it, so a reader
sees the old day or the new one, never half of either; a day whose rows have not changed since
the last export (same count, same newest ingestion time) is not rewritten. `_days.json` keeps
those fingerprints.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path

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
SCHEMA = "_schema.parquet"  # no rows, the table's columns: what a reader gets while no day exists
FINGERPRINTS = "_days.json"
LAKE_VIEW = "rag-loop lake: "  # the comment on a database view of a lake table's day files


def day_file(lake: Path, table: str, day: date) -> Path:
    return lake / table / f"day={day.isoformat()}" / PART


def lake_days(lake: Path, table: str) -> list[date]:
    """The days `table` has in the lake, in order."""
    return sorted(date.fromisoformat(p.parent.name.removeprefix("day="))
                  for p in (lake / table).glob(f"day=*/{PART}"))


def export_table(con: duckdb.DuckDBPyConnection, lake: Path, table: str, skip: Iterable[date] = ()) -> list[date]:
    """A day-partitioned table of the database (it has `day`) as the lake's day files, but for
    the days in `skip`: what a stage computed on DuckDB gives the Spark engine to build on.
    Returns the days written."""
    days = [d for (d,) in con.execute(f'SELECT DISTINCT day FROM "{table}" WHERE day IS NOT NULL').fetchall()]
    written = sorted(set(days) - set(skip))
    for day in written:
        write_parquet(con, f'SELECT * EXCLUDE (day) FROM "{table}" WHERE day = ?', day_file(lake, table, day), [day])
    return written


def write_parquet(con: duckdb.DuckDBPyConnection, query: str, target: Path, parameters: list | None = None) -> None:
    """`query`'s rows as the Parquet file `target`, which readers see whole or not at all
    (written hidden beside it, then renamed over it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{uuid.uuid4().hex}.tmp")  # hidden: neither engine reads it
    try:
        con.execute(f"COPY ({query}) TO {quoted(staged)} (FORMAT parquet)", parameters or [])
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


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
    tables, from the database to the lake. Returns days written and days unchanged."""
    lake.mkdir(parents=True, exist_ok=True)
    current = {str(day): [count, str(newest)] for day, count, newest in con.execute(
        f"SELECT {utc_day()} AS day, count(*), max(ingested_at) FROM raw_traces GROUP BY day ORDER BY day"
    ).fetchall()}
    stored_path = lake / FINGERPRINTS
    stored = _fingerprints(stored_path)
    wanted = set(map(str, days)) & set(current) if days is not None else set(current)
    changed = sorted(d for d in wanted if stored.get(d) != current[d]
                     or any(not day_file(lake, t, date.fromisoformat(d)).exists() for t in DAY_OF))
    for table, query in DAY_OF.items():
        for day in changed:
            write_parquet(con, f"SELECT * EXCLUDE (day) FROM ({query}) WHERE day = $1",
                     day_file(lake, table, date.fromisoformat(day)), [date.fromisoformat(day)])
    for table, query in DAY_OF.items():
        write_parquet(con, f"SELECT * EXCLUDE (day) FROM ({query}) LIMIT 0", lake / table / SCHEMA)
    for table in WHOLE:
        write_parquet(con, f"SELECT * FROM {table}", lake / table / PART)
    stored.update({d: current[d] for d in changed})
    staged = stored_path.with_name(f".{FINGERPRINTS}.tmp")
    staged.write_text(json.dumps(stored, indent=1, sort_keys=True))
    os.replace(staged, stored_path)
    return {"days_written": len(changed), "days_unchanged": len(wanted) - len(changed)}


def expose_lake_table(con: duckdb.DuckDBPyConnection, lake: Path, name: str, columns: Sequence[str]) -> None:
    """The database's `name` becomes a marked view of the lake's table `name` (its day files, or
    its schema file while it has none) with `columns` in that order, in place of the table of
    that name if there is one, in one transaction."""
    listed = ", ".join(f'"{c}"' for c in columns)
    with transaction(con):
        if relation_kind(con, name) == "table":
            con.execute(f'DROP TABLE "{name}"')
        con.execute(f'CREATE OR REPLACE VIEW "{name}" AS SELECT {listed} FROM ({lake_query(lake.resolve(), name)})')
        mark_lake_view(con, name, lake.resolve() / name)


def mark_lake_view(con: duckdb.DuckDBPyConnection, name: str, folder: Path) -> None:
    """Say on the database's view `name` that it reads the day files of the lake table `folder`."""
    comment = (LAKE_VIEW + str(folder)).replace("'", "''")
    con.execute(f"""COMMENT ON VIEW "{name}" IS '{comment}'""")


def lake_view_folder(con: duckdb.DuckDBPyConnection, name: str) -> Path | None:
    """The lake table folder whose day files the database's view `name` reads, as
    `mark_lake_view` said; None for a table, or a view it did not mark."""
    comments = con.execute("SELECT comment FROM duckdb_views() WHERE view_name = ? AND NOT internal "
                           "AND schema_name = current_schema()", [name]).fetchall()
    comment = comments[0][0] if comments else None
    return Path(comment.removeprefix(LAKE_VIEW)) if comment and comment.startswith(LAKE_VIEW) else None


def day_file_fingerprints(folder: Path) -> dict[date, str]:
    """Per day file of the lake table `folder`, its size and modification time: every rewrite of
    a day renames a new file over it, so a day's fingerprint changes when its file is replaced,
    and reading it opens no file."""
    lake, table = folder.parent, folder.name
    return {day: f"file:{stat.st_size}:{stat.st_mtime_ns}"
            for day in lake_days(lake, table) for stat in [day_file(lake, table, day).stat()]}


def read_lake(con: duckdb.DuckDBPyConnection, lake: Path, table: str) -> duckdb.DuckDBPyRelation:
    """A table of the lake as a DuckDB relation (day-partitioned tables carry `day`)."""
    return con.sql(lake_query(lake, table))


def lake_query(lake: Path, table: str, days: Sequence[date] | None = None) -> str:
    """DuckDB SQL reading a table of the lake, or only those days of a day-partitioned one
    (each must have its file)."""
    if table in WHOLE:
        return f"SELECT * FROM read_parquet({quoted(lake / table / PART)})"
    if days is None and not lake_days(lake, table):
        return f"SELECT *, NULL::DATE AS day FROM read_parquet({quoted(lake / table / SCHEMA)})"
    files = quoted(lake / table / f"day=*/{PART}") if days is None else \
        "[" + ", ".join(quoted(day_file(lake, table, day)) for day in days) + "]"
    return f"SELECT * FROM read_parquet({files}, hive_partitioning = true, hive_types = {{'day': DATE}})"
