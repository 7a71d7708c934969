"""An incident's record: its window and slices, its failing traces (`incident_traces`: each
failing request of the window matching the slices, why it failed, whether selection chose it, its
intent; the requests that did not fail are only counted, in `incidents.affected`: an incident on a
busy day stores its failures, not the day's traffic), opening and closing.

A window is half-open, [start, end): `--from 2026-11-12 --to 2026-11-13` with bare dates takes
both days (a bare `--to` date means the end of that day). A trace *failed* when it has a bad
signal (`trace_signals.signals`), a failing judged metric (its newest judgement), an accepted
label with a failure type other than `none`, or a thumbs-down.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

import duckdb
import pandas as pd

from rag_loop.store.ddl import INCIDENTS_DDL
from rag_loop.store.tables import has_table, transaction

# slice keys: raw_traces columns, and `intent` (the trace's cluster in trace_clusters)
SLICE_COLUMNS = ("language", "tenant", "query_type", "risk_level", "environment", "service",
                 "rag_version", "prompt_version", "index_version", "model_name")
SLICE_KEYS = (*SLICE_COLUMNS, "intent")
MAX_TITLE_CHARS, MAX_ACTIONS_CHARS, MAX_WINDOW = 200, 10_000, timedelta(days=366)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
ID_PATTERN = re.compile(r"INC-\d{4,}")


class IncidentError(ValueError):
    """A request the incident record cannot take, in the user's words."""


def parse_instant(text: str, end: bool = False) -> datetime:
    """A date (YYYY-MM-DD: its midnight UTC; as the end of a window, the next midnight) or an ISO
    date-time (naive: UTC)."""
    value = str(text).strip()
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            day = date.fromisoformat(value)
            return datetime.combine(day + timedelta(days=1 if end else 0), time(), UTC)
        instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as error:
        raise IncidentError(f"{value[:40]!r} is no date (YYYY-MM-DD) or ISO date-time") from error
    return instant.replace(tzinfo=UTC) if instant.tzinfo is None else instant.astimezone(UTC)


def parse_slices(items: Sequence[str]) -> dict[str, list[str]]:
    """`key=value` items (a key given twice: either value) into {key: [values]}."""
    slices: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise IncidentError(f"{str(item)[:60]!r}: a slice is key=value, e.g. language=vi")
        if key not in SLICE_KEYS:
            raise IncidentError(f"unknown slice key {key[:40]!r}; known: {', '.join(SLICE_KEYS)}")
        if _CONTROL.search(value) or len(value) > 200:
            raise IncidentError(f"slice {key}: a control character or over 200 characters")
        slices.setdefault(key, []).append(value)
    return slices


def checked_text(name: str, value: str | None, most: int, required: bool = False) -> str | None:
    """`value` stripped, or an IncidentError: required and empty, too long, a control character."""
    text = (value or "").strip()
    if not text:
        if required:
            raise IncidentError(f"{name}: say what it is")
        return None
    if len(text) > most:
        raise IncidentError(f"{name}: {len(text):,} characters, at most {most:,}")
    if found := _CONTROL.search(text):
        raise IncidentError(f"{name}: a control character (U+{ord(found.group()):04X}) at position "
                            f"{found.start() + 1}: remove it")
    return text


@dataclass(frozen=True)
class IncidentRequest:
    """What `rag-loop incident open` was asked: the window, slices, a query text filter, a title."""

    start: datetime
    end: datetime
    slices: dict[str, list[str]] = field(default_factory=dict)
    title: str | None = None
    query_contains: str | None = None
    opened_by: str | None = None
    gating_release: str | None = None  # named by the user; default: inferred (facts.gating_release)

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise IncidentError(f"the window ends ({self.end.isoformat()}) before it starts "
                                f"({self.start.isoformat()}): --to must be after --from")
        if self.end - self.start > MAX_WINDOW:
            raise IncidentError(f"the window is {(self.end - self.start).days} days, at most {MAX_WINDOW.days}")
        checked_text("title", self.title, MAX_TITLE_CHARS)
        checked_text("query text", self.query_contains, 200)
        if self.gating_release is not None and not re.fullmatch(r"v\d{4,}", self.gating_release):
            raise IncidentError(f"{self.gating_release[:20]!r} is no release version (vNNNN)")

    def window_text(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} .. {self.end:%Y-%m-%d %H:%M} UTC (end excluded)"

    def default_title(self) -> str:
        where = "; ".join(f"{k}={'|'.join(v)}" for k, v in self.slices.items())
        return f"Quality incident {self.start:%Y-%m-%d %H:%M} .. {self.end:%Y-%m-%d %H:%M} UTC" + (
            f" ({where})" if where else "")


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(INCIDENTS_DDL)


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    return {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = $t AND schema_name = current_schema()",
        {"t": table}).fetchall()}


TRACE_COLUMNS = ["trace_id", "timestamp", *SLICE_COLUMNS, "user_id", "session_id", "language_source",
                 "original_query",
                 "cluster_id", "candidate", "signals", "failing_metrics", "failure_type", "thumbs_down",
                 "feedback_category", "reasons", "failing"]


def window_traces(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime,
                  slices: dict[str, list[str]] | None = None, query_contains: str | None = None) -> pd.DataFrame:
    """Every request in [start, end) matching the slices and query text, with why it failed
    (`reasons`), whether selection chose it (`candidate`) and its intent (`cluster_id`)."""
    slices = slices or {}
    if not has_table(con, "raw_traces"):
        return pd.DataFrame(columns=TRACE_COLUMNS)
    have = _columns(con, "raw_traces")
    col = {c: (f"CAST(t.{c} AS VARCHAR)" if c in have else "NULL::VARCHAR")
           for c in (*SLICE_COLUMNS, "user_id", "session_id", "language_source")}
    clustered = has_table(con, "trace_clusters")
    where, params = ['t."timestamp" >= $start', 't."timestamp" < $end'], {"start": start, "end": end}
    for number, (key, values) in enumerate(sorted(slices.items())):
        params[f"s{number}"] = list(values)
        column = ("tc.cluster_id" if clustered else "NULL::VARCHAR") if key == "intent" else col[key]
        where.append(f"{column} IN (SELECT unnest(${'s' + str(number)}::VARCHAR[]))")
    if query_contains:
        params["text"] = query_contains
        where.append("contains(lower(t.original_query), lower($text))")
    signals = "s.signals" if has_table(con, "trace_signals") else "NULL::VARCHAR[]"
    judged = ("""SELECT trace_id, list(metric ORDER BY metric) FILTER (NOT passed) AS failing_metrics
                 FROM (SELECT * FROM trace_judgments WHERE status = 'judged' AND passed IS NOT NULL
                       QUALIFY row_number() OVER (PARTITION BY trace_id, metric
                                                  ORDER BY judged_at DESC NULLS LAST) = 1)
                 GROUP BY 1""" if has_table(con, "trace_judgments")
              else "SELECT NULL::VARCHAR AS trace_id, NULL::VARCHAR[] AS failing_metrics")
    labelled = ("SELECT trace_id, failure_type FROM current_labels WHERE decision = 'accept'"
                if has_table(con, "current_labels") else
                "SELECT NULL::VARCHAR AS trace_id, NULL::VARCHAR AS failure_type")
    feedback = ("""SELECT trace_id, bool_or(lower(rating) IN ('down', 'thumbs_down', 'negative', '-1', '0'))
                          AS thumbs_down, any_value(category) FILTER (category IS NOT NULL) AS feedback_category
                   FROM trace_feedback GROUP BY 1""" if has_table(con, "trace_feedback") else
                "SELECT NULL::VARCHAR AS trace_id, NULL::BOOLEAN AS thumbs_down, NULL::VARCHAR AS feedback_category")
    candidates = ("SELECT DISTINCT trace_id FROM failure_candidates" if has_table(con, "failure_candidates")
                  else "SELECT NULL::VARCHAR AS trace_id")
    frame = con.execute(f"""
        WITH judged AS ({judged}), labelled AS ({labelled}), feedback AS ({feedback}),
             candidates AS ({candidates})
        SELECT t.trace_id, t."timestamp", {", ".join(f"{v} AS {k}" for k, v in col.items())},
               t.original_query, {'tc.cluster_id' if clustered else 'NULL::VARCHAR'} AS cluster_id,
               c.trace_id IS NOT NULL AS candidate, coalesce({signals}, []) AS signals,
               coalesce(j.failing_metrics, []) AS failing_metrics, l.failure_type,
               coalesce(f.thumbs_down, false) AS thumbs_down, f.feedback_category
        FROM raw_traces t
        {'LEFT JOIN trace_signals s USING (trace_id)' if signals != 'NULL::VARCHAR[]' else ''}
        {'LEFT JOIN trace_clusters tc USING (trace_id)' if clustered else ''}
        LEFT JOIN judged j USING (trace_id) LEFT JOIN labelled l USING (trace_id)
        LEFT JOIN feedback f USING (trace_id) LEFT JOIN candidates c USING (trace_id)
        WHERE {" AND ".join(where)}
        ORDER BY t."timestamp", t.trace_id""", params).df()
    frame["reasons"] = [
        [*list(s), *(f"judged:{m}" for m in metrics),
         *([f"labelled:{ft}"] if isinstance(ft, str) and ft != "none" else []),
         *(["thumbs_down"] if down and "thumbs_down" not in s else [])]
        for s, metrics, ft, down in zip(frame["signals"], frame["failing_metrics"], frame["failure_type"],
                                        frame["thumbs_down"])]
    frame["signals"] = frame["signals"].map(list)
    frame["failing_metrics"] = frame["failing_metrics"].map(list)
    frame["failing"] = frame["reasons"].map(bool).astype(bool)  # bool even when empty: a mask, not columns
    frame["candidate"] = frame["candidate"].astype(bool)
    return frame[TRACE_COLUMNS]


def next_incident_id(con: duckdb.DuckDBPyConnection) -> str:
    ensure_tables(con)
    numbers = [int(i[4:]) for (i,) in con.execute("SELECT incident_id FROM incidents").fetchall()
               if ID_PATTERN.fullmatch(i)]
    return f"INC-{max(numbers, default=0) + 1:04d}"


def store_incident(con: duckdb.DuckDBPyConnection, request: IncidentRequest, traces: pd.DataFrame,
                   gating_release: str | None, now: datetime) -> str:
    """Insert the incident (with its counts of affected and failing requests) and its failing
    traces; its id. The facts are recomputed from the window when the postmortem is written, so
    only what the queue and the releases read is stored: which traces failed."""
    ensure_tables(con)
    with transaction(con):
        incident_id = next_incident_id(con)
        con.execute("""INSERT INTO incidents (incident_id, title, status, window_from, window_to, slices,
                                              query_contains, opened_at, opened_by, affected, failing,
                                              gating_release)
                       VALUES (?, ?, 'open', ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    [incident_id, checked_text("title", request.title, MAX_TITLE_CHARS) or request.default_title(),
                     request.start, request.end, json.dumps(request.slices, ensure_ascii=False),
                     request.query_contains, now, request.opened_by, len(traces),
                     int(traces["failing"].sum()) if len(traces) else 0, gating_release])
        failing = traces[traces["failing"]] if len(traces) else traces
        if len(failing):
            rows = failing[["trace_id", "timestamp", "failing", "candidate", "cluster_id", "reasons"]].assign(
                incident_id=incident_id)
            con.register("_incident_rows", rows)
            try:
                con.execute("""INSERT INTO incident_traces (incident_id, trace_id, "timestamp", failing,
                                                            candidate, cluster_id, reasons)
                               SELECT incident_id, trace_id, "timestamp", failing, candidate, cluster_id,
                                      reasons FROM _incident_rows""")
            finally:
                con.unregister("_incident_rows")
    return incident_id


def incident_row(con: duckdb.DuckDBPyConnection, incident_id: str) -> dict:
    """The stored incident, or IncidentError."""
    if has_table(con, "incidents"):
        rows = con.execute("SELECT * FROM incidents WHERE incident_id = ?", [incident_id]).df()
        if len(rows):
            row = rows.iloc[0].to_dict()
            return {k: (None if not isinstance(v, list | dict) and pd.isna(v) else v) for k, v in row.items()}
    raise IncidentError(f"no incident {incident_id[:40]!r}")


def request_of(row: dict) -> IncidentRequest:
    """The stored incident's request (to recompute its facts)."""
    start, end = (pd.Timestamp(row[k]).to_pydatetime().astimezone(UTC) for k in ("window_from", "window_to"))
    return IncidentRequest(start, end, json.loads(row["slices"] or "{}"), row["title"], row["query_contains"],
                           row["opened_by"], row["gating_release"])
