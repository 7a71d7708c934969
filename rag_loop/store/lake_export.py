"""The control database's trace tables written to the trace lake (rag_loop.store.lake), for the
Spark engine's stages to read: each changed day of raw_traces and its child tables replaced by
predicate (one Delta commit per table), the small tables whole.

A day is written again when its traces' count or newest ingestion time differs between the
database and the lake (a trace stored again, e.g. an OTLP trace assembled after a late span,
has a new ingestion time; its chunks, spans and feedback are stored with it). Delta keeps the
schema: a column added to the database makes every day written again (with the values the
database gave its rows), and files written before it read NULL there.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

import duckdb

from rag_loop.store.ddl import utc_day
from rag_loop.store.lake import Lake, files_query, in_lake

# table → its rows with their UTC day (child tables carry their trace's)
DAY_OF = {
    "raw_traces": f"SELECT *, {utc_day()} AS day FROM raw_traces",
    "trace_chunks": "SELECT * FROM trace_chunks",
    "trace_spans": "SELECT * FROM trace_spans",
    "trace_feedback": "SELECT * FROM trace_feedback",
}
WHOLE = ("documents",)  # small tables, unpartitioned


def export_lake(con: duckdb.DuckDBPyConnection, lake: Lake, days: Iterable[date] | None = None) -> dict[str, int]:
    """Write the changed days (or just `days`) of every trace table, and the whole small
    tables, from the database to the lake. Returns days written and days unchanged. Trace
    tables that ingestion keeps in this lake (the database has views of them) are there
    already: only the small tables are written."""
    if all(in_lake(con, lake, table) for table in DAY_OF):
        _export_whole(con, lake)
        return {"days_written": 0, "days_unchanged": 0}
    fingerprint = "SELECT day, count(*), max(ingested_at) FROM ({}) WHERE day IS NOT NULL GROUP BY day"
    current = {day: rest for day, *rest in con.execute(fingerprint.format(DAY_OF["raw_traces"])).fetchall()}
    schema = lake.schema("raw_traces")
    stored = {} if schema is None else {day: rest for day, *rest in con.execute(fingerprint.format(
        files_query(lake.files("raw_traces"), schema, ["day", "ingested_at"], con))).fetchall()}
    wanted = set(days) & set(current) if days is not None else set(current)
    changed = {day for day in wanted if stored.get(day) != current[day]}
    if schema is not None and not _columns(con, "raw_traces") <= set(schema.names):
        changed = set(current)  # a column added: every day's rows gain it
    gone = set() if days is not None else set(stored) - set(current)  # another database's days
    for table, query in reversed(DAY_OF.items()):  # raw_traces last: its days say the others are written
        missing = lake.delta(table) is None
        rows = con.sql(f"SELECT * FROM ({query}) WHERE day IN (SELECT unnest($days::DATE[]))",
                       params={"days": sorted(set(current) if missing else changed)}).to_arrow_reader()
        lake.write(table, rows, days=None if missing else changed | gone)
    _export_whole(con, lake)
    return {"days_written": len(changed), "days_unchanged": len(wanted) - len(changed)}


def export_table(con: duckdb.DuckDBPyConnection, lake: Lake, table: str, skip: Iterable[date] = ()) -> list[date]:
    """A day-partitioned table of the database (it has `day`) as the lake's table, but for the
    days in `skip` (one commit): what a stage computed on DuckDB gives the Spark engine to build
    on. Returns the days written."""
    days = {d for (d,) in con.execute(f'SELECT DISTINCT day FROM "{table}" WHERE day IS NOT NULL').fetchall()}
    written = sorted(days - set(skip))
    rows = con.sql(f'SELECT * FROM "{table}" WHERE day IN (SELECT unnest($days::DATE[]))',
                   params={"days": written}).to_arrow_reader()
    lake.write(table, rows, days=written if lake.delta(table) else None)
    return written


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {name for name, *_ in con.execute(f'DESCRIBE "{table}"').fetchall()}


def _export_whole(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    for table in WHOLE:
        lake.write(table, con.sql(f"SELECT * FROM {table}").to_arrow_reader(), partitioned=False)
