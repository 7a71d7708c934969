"""Which days of a day-by-day table to compute again: the days whose inputs changed since the
last run, or whose rows are no longer what that run left.

A run records, per UTC day, a fingerprint of what the day's rows were computed from and one of
the rows it left (`DayState`). The next run computes a day again when the fingerprint of its
inputs differs (new or late traffic, traffic gone, other settings or documents) or when that
of its rows does (the table was rebuilt, restored or edited since); with no recorded state, or
one of another database, the whole table. Fingerprints are DuckDB hashes over the control
database's tables: a scan of a few columns, far cheaper than the stage itself; a Spark stage's
rows, which stay in the trace lake, are fingerprinted by their files in the Delta log instead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import duckdb

from rag_loop.store.ddl import utc_day
from rag_loop.store.deployment import TRACE_SIZED, recorded_lake
from rag_loop.store.tables import has_table

Fingerprints = dict[date, str]


@dataclass(frozen=True)
class DayState:
    """What a run of a day-by-day table recorded: the database, and per day the fingerprints
    of the inputs it computed the day from and of the rows it left."""

    database: str
    inputs: Fingerprints = field(default_factory=dict)
    rows: Fingerprints = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"database": self.database,
                "days": {d.isoformat(): [self.inputs.get(d), self.rows.get(d)]
                         for d in sorted(set(self.inputs) | set(self.rows))}}

    @classmethod
    def from_json(cls, data: Any) -> DayState | None:
        """The state `as_json` wrote; None when `data` is not one (then the whole table is
        computed: never a guess)."""
        try:
            days = {date.fromisoformat(day): pair for day, pair in data["days"].items()}
            inputs = {d: pair[0] for d, pair in days.items() if pair[0] is not None}
            rows = {d: pair[1] for d, pair in days.items() if pair[1] is not None}
            if not isinstance(data["database"], str) or not all(
                    isinstance(v, str) for v in (*inputs.values(), *rows.values())):
                return None
            return cls(data["database"], inputs, rows)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None


def days_to_compute(previous: DayState | None, current: DayState) -> list[date] | None:
    """The days to compute again, or None for the whole table: no state recorded, another
    database, or every day changed."""
    if previous is None or previous.database != current.database:
        return None
    days = set(current.inputs) | set(current.rows) | set(previous.inputs) | set(previous.rows)
    changed = sorted(d for d in days if current.inputs.get(d) != previous.inputs.get(d)
                     or current.rows.get(d) != previous.rows.get(d))
    return None if days and len(changed) == len(days) else changed


def compute_changed(con: duckdb.DuckDBPyConnection, table: str, previous: DayState | None,
                    current_inputs: DayState, compute: Callable[[list[date] | None], object]
                    ) -> tuple[DayState, list[date] | None]:
    """`compute(days)` for the days of `table` to compute again since `previous` (`compute(None)`:
    the whole table); `current_inputs` holds the database and today's input fingerprints.
    Returns the state to record and the days computed (None: all)."""
    current = DayState(current_inputs.database, current_inputs.inputs, table_fingerprints(con, table))
    days = days_to_compute(previous, current)
    if days is None or days:
        compute(days)
    return DayState(current.database, current.inputs, table_fingerprints(con, table)), days


def table_fingerprints(con: duckdb.DuckDBPyConnection, table: str, columns: str | None = None,
                       day: str = "day") -> Fingerprints:
    """Per day of `table` (`day`: a SQL expression of a date or an instant), its row count and
    the xor of its rows' hashes (of `columns`, default every column); empty when the table does
    not exist. A lake-backed deployment's trace-sized table (a view of the lake's) is
    fingerprinted by its files (`Lake.day_fingerprints`): no scan of the history on the run's machine."""
    if not has_table(con, table):
        return {}
    lake = recorded_lake(con) if columns is None and day == "day" and table in TRACE_SIZED else None
    if lake is not None:
        return lake.day_fingerprints(table)
    hashed = f"hash({columns})" if columns else "hash(t)"
    rows = con.execute(f"SELECT CAST({day} AS DATE) AS day, count(*), bit_xor({hashed}) FROM {table} t "
                       "GROUP BY 1").fetchall()
    return {d: f"{n}:{h}" for d, n, h in rows if d is not None}


def traffic_fingerprints(con: duckdb.DuckDBPyConnection) -> Fingerprints:
    """Per UTC day of raw_traces: its traces, when each was stored (a trace stored again,
    e.g. an OTLP trace assembled again after a late span, has a new ingestion time; its chunks,
    spans and feedback are stored with it) and its language (decided after storing: a database
    from before gets its traces' languages later). Traces kept in the trace lake (a lake-backed deployment's)
    are fingerprinted by their files: every change of a day's traces commits a new one."""
    lake = recorded_lake(con)
    if lake is not None:
        return lake.day_fingerprints("raw_traces")
    return table_fingerprints(con, "raw_traces", 'trace_id, "timestamp", ingested_at, language',
                              day=utc_day())


def whole_fingerprint(con: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """One fingerprint of a whole (small) table, e.g. the documents; None when it does not exist."""
    if not has_table(con, table):
        return None
    count, hashed = con.execute(f"SELECT count(*), bit_xor(hash(t)) FROM {table} t").fetchall()[0]
    return f"{count}:{hashed}"


def combined(*parts: object) -> str:
    """One fingerprint of several (settings, fingerprints, None for what is missing)."""
    return hashlib.md5(repr(parts).encode()).hexdigest()
