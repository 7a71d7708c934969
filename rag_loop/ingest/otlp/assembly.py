"""OTLP spans into traces: stage every span, assemble a trace once its root has arrived.

Spans are staged in `otlp_spans` (one row per trace id + span id: an exporter's retry is a
duplicate, listed in `trace_duplicates`). A trace id is assembled into `raw_traces` when its
root span (no parent) is there, or, without it, once `grace` has passed since its newest
span ended; a span that arrives after its trace was assembled assembles it again. What became
of every trace id is in `otlp_traces`: ingested, duplicate (of a trace already stored),
quarantined (with the reason) or not_a_request (indexing and embedding traces). An ingested
trace whose retrieval output could not be read has the reason `retrieval_unknown: <why>`
(the record's `retrieval_unreadable`), and is counted in `AssemblyCounts.retrieval_unknown`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import duckdb
import pyarrow as pa

from rag_loop.ingest.lines import Rejected, oversized_reason, preview
from rag_loop.ingest.otlp.mapping import request_record
from rag_loop.ingest.otlp.spans import SpanBatch
from rag_loop.ingest.parallel import ordered_map
from rag_loop.ingest.records import BatchCounts, fits_model, load_batch, load_typed_records, quarantine_rejected
from rag_loop.store.ddl import span_day

DEFAULT_GRACE = timedelta(hours=1)
TRACE_FORMAT = "otlp_trace"  # quarantine/duplicate rows of assembled traces (not of a file read)
# the spans of the ready traces (temp table `_ready`), as `assemble_spans` reads them in SPAN_ORDER
READY_SPANS_SQL = """
    SELECT s.trace_id, r.has_root, r.spans, s.span_id, s.parent_span_id, s.name, s.start_ns, s.end_ns,
           s.status_code, s.status_message, s.attributes, s.resource, s.events, s.source_file,
           s.source_line
    FROM otlp_spans s JOIN _ready r USING (trace_id)"""
SPAN_ORDER = "s.trace_id, s.start_ns NULLS FIRST, s.span_id"
_encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(..., ensure_ascii=False), built once


@dataclass
class AssemblyCounts:
    """What became of the trace ids that were ready this run, and of those still waiting."""

    ingested: int = 0
    partial: int = 0  # of ingested: assembled without a root span after the grace period
    reassembled: int = 0  # of ingested: assembled before, a late span arrived
    duplicates: int = 0
    quarantined: int = 0
    not_a_request: int = 0
    waiting: int = 0  # no root span yet, within the grace period
    retrieval_unknown: int = 0  # of ingested: retrieval output unreadable (not "nothing retrieved")

    def as_batch_counts(self) -> BatchCounts:
        return BatchCounts(ingested=self.ingested, duplicates=self.duplicates,
                           quarantined=self.quarantined)


def stage_spans(con: duckdb.DuckDBPyConnection, batch: SpanBatch, source_file: str) -> BatchCounts:
    """Store the spans of `batch` not staged before; list repeats in `trace_duplicates`.
    Counts spans: each one read lands in exactly one count.

    A span read again from the same file and line (a file that grew) is neither stored nor
    listed twice.
    """
    counts = quarantine_rejected(con, batch.rejected, source_file, "otlp")
    if not batch.spans.num_rows:
        return counts
    # the verdicts are worked out on the keys alone; the spans' wide columns (attributes,
    # resource, events) are read once, by the insert of the new ones (position: place in batch)
    spans = batch.spans.append_column("position", pa.array(range(batch.spans.num_rows), pa.int64()))
    con.register("_span_batch", spans)
    try:
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _span_verdict AS
            SELECT b.position, b.trace_id, b.span_id, b.source_line, b.start_ns,
                   s.trace_id IS NOT NULL AS seen, s.source_file = ? AND s.source_line = b.source_line AS reread
            FROM (SELECT position, trace_id, span_id, source_line, start_ns FROM _span_batch) b
            LEFT JOIN otlp_spans s USING (trace_id, span_id)""", [source_file])
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _span_new AS
            SELECT position, trace_id, start_ns FROM _span_verdict WHERE NOT seen
            QUALIFY row_number() OVER (PARTITION BY trace_id, span_id ORDER BY position) = 1""")
        con.execute("""
            INSERT INTO otlp_spans BY NAME
            SELECT b.* EXCLUDE (position), ? AS source_file, now() AS received_at
            FROM _span_batch b SEMI JOIN _span_new n USING (position)""", [source_file])
        mark_pending(con, "SELECT trace_id, start_ns FROM _span_new")
        con.execute("""
            INSERT INTO trace_duplicates (source_file, line_no, trace_id, format, seen_at, span_id)
            SELECT ?, source_line, trace_id, 'otlp', now(), span_id FROM _span_verdict
            WHERE position NOT IN (SELECT position FROM _span_new) AND NOT coalesce(reread, false)
            """, [source_file])
        total, new, reread = con.execute("""
            SELECT count(*), (SELECT count(*) FROM _span_new), count(*) FILTER (reread)
            FROM _span_verdict""").fetchall()[0]
    finally:
        con.unregister("_span_batch")
        con.execute("DROP TABLE IF EXISTS _span_verdict; DROP TABLE IF EXISTS _span_new")
    counts.ingested += new + reread
    counts.duplicates += total - new - reread
    return counts


def mark_pending(con: duckdb.DuckDBPyConnection, stored_spans_sql: str) -> None:
    """The trace ids of the spans just stored (`stored_spans_sql` selects their trace_id and
    start_ns) wait for their next assembly (`otlp_pending`), with the spans' days."""
    con.execute(f"""INSERT INTO otlp_pending (trace_id, day)
                    SELECT DISTINCT trace_id, {span_day()} FROM ({stored_spans_sql})
                    EXCEPT SELECT trace_id, day FROM otlp_pending""")


def assemble_ready(con: duckdb.DuckDBPyConnection, now_ns: int, grace: timedelta = DEFAULT_GRACE,
                   max_record_bytes: int = 1 << 20, batch_traces: int = 20_000,
                   pool: Callable[[], Executor | None] = lambda: None,
                   assembler: Assembler | None = None,
                   load_stored: Callable[[duckdb.DuckDBPyConnection, str, str], None] | None = None,
                   load_pending: Callable[[duckdb.DuckDBPyConnection], None] | None = None
                   ) -> AssemblyCounts:
    """Assemble every trace id that is ready and new (or has new spans), inside one transaction
    the caller ends; only the pending trace ids (`mark_pending`) are looked at, and those still
    waiting stay pending. `assembler` turns the ready traces' spans into records (default
    `assemble_here(pool)`); each batch it gives is stored before the next is asked for.
    `load_stored(con, trace_ids_sql, children_of_sql)` first makes the ready traces' stored rows
    readable, when they are kept outside the database (rag_loop.ingest.pipeline.TraceStore), as
    `load_pending(con)` does the pending traces' stored spans and states before anything is
    looked at."""
    grace_ns = int(grace.total_seconds() * 1e9)
    if load_pending is not None:
        load_pending(con)
    elif load_stored is None and not con.execute("SELECT 1 FROM otlp_pending LIMIT 1").fetchall():
        return AssemblyCounts()  # nothing pending: a run with no new OTLP spans pays one query
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _trace_stats AS
        SELECT s.trace_id, count(*) AS spans, bool_or(coalesce(s.parent_span_id, '') = '') AS has_root,
               max(coalesce(s.end_ns, s.start_ns)) AS newest_ns, t.trace_id IS NOT NULL AS assembled_before
        FROM otlp_spans s
        LEFT JOIN (SELECT * FROM otlp_traces SEMI JOIN otlp_pending USING (trace_id)) t USING (trace_id)
        WHERE s.trace_id IN (SELECT trace_id FROM otlp_pending)
        GROUP BY s.trace_id, t.trace_id, t.spans
        HAVING t.trace_id IS NULL OR count(*) > t.spans""")
    counts = AssemblyCounts()
    counts.waiting = con.execute(
        "SELECT count(*) FROM _trace_stats WHERE NOT has_root AND coalesce(newest_ns, 0) + ? > ?",
        [grace_ns, now_ns]).fetchall()[0][0]
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _ready AS SELECT * FROM _trace_stats
        WHERE has_root OR coalesce(newest_ns, 0) + ? <= ?""", [grace_ns, now_ns])
    if load_stored is not None:  # a trace assembled before may change: its children too
        load_stored(con, "SELECT trace_id FROM _ready", "SELECT trace_id FROM _ready WHERE assembled_before")
    _forget_assembled(con)
    ready = con.execute("SELECT count(*) FROM _ready").fetchall()[0][0]
    for assembled in (assembler or assemble_here(pool))(con, ready, batch_traces):
        _store_traces(con, assembled, max_record_bytes, counts)
    counts.reassembled = con.execute("""
        SELECT count(*) FROM _ready JOIN otlp_traces USING (trace_id)
        WHERE assembled_before AND state = 'ingested'""").fetchall()[0][0]
    con.execute("""DELETE FROM otlp_pending WHERE trace_id NOT IN
                   (SELECT trace_id FROM _trace_stats EXCEPT SELECT trace_id FROM _ready)""")  # waiting stay
    con.execute("DROP TABLE IF EXISTS _trace_stats; DROP TABLE IF EXISTS _ready")
    return counts


def _forget_assembled(con: duckdb.DuckDBPyConnection) -> None:
    """A trace assembled again replaces what its earlier assembly stored or set aside."""
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _earlier AS
        SELECT t.* FROM otlp_traces t JOIN _ready r USING (trace_id) WHERE r.assembled_before""")
    if not con.execute("SELECT count(*) FROM _earlier").fetchall()[0][0]:
        return
    for table in ("raw_traces", "trace_chunks", "trace_spans", "trace_feedback"):
        owned = " AND source_format = 'otlp'" if table == "raw_traces" else ""
        con.execute(f"""DELETE FROM {table} WHERE trace_id IN
                        (SELECT trace_id FROM _earlier WHERE state = 'ingested'){owned}""")
    for table in ("quarantine", "trace_duplicates"):
        con.execute(f"""DELETE FROM {table} x USING _earlier e
                        WHERE x.format = '{TRACE_FORMAT}' AND x.source_file = e.source_file
                          AND x.line_no = e.source_line AND x.span_id = e.record_span_id""")
    con.execute("DELETE FROM otlp_traces WHERE trace_id IN (SELECT trace_id FROM _earlier)")


def assemble_here(pool: Callable[[], Executor | None]) -> Assembler:
    """The assembler that runs `assemble_spans` in this process, or in `pool()`'s processes
    when there is more than one batch."""
    def assemble(con: duckdb.DuckDBPyConnection, ready: int, batch_traces: int) -> Iterator[list[Assembled]]:
        tables = ((table,) for table in _ready_span_tables(con, batch_traces))
        yield from ordered_map(pool() if ready > batch_traces else None, assemble_spans, tables,
                               in_flight=2)
    return assemble


def _ready_span_tables(con: duckdb.DuckDBPyConnection, batch_traces: int) -> Iterator[pa.Table]:
    """The ready traces' spans, `batch_traces` traces at a time, each batch fetched whole (the
    caller writes between batches). One join over `otlp_spans` copies them out in batch order,
    so that each batch then reads its own row groups only."""
    con.execute("""CREATE OR REPLACE TEMP TABLE _ready_batches AS
                   SELECT trace_id, (row_number() OVER (ORDER BY trace_id) - 1) // ? AS batch
                   FROM _ready""", [batch_traces])
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _ready_spans AS
                    SELECT b.batch, s.* FROM ({READY_SPANS_SQL}) s JOIN _ready_batches b USING (trace_id)
                    ORDER BY b.batch""")
    try:
        batches = con.execute("SELECT count(DISTINCT batch) FROM _ready_batches").fetchall()[0][0]
        for batch in range(batches):
            yield con.sql(f"""SELECT * EXCLUDE (batch) FROM _ready_spans s WHERE batch = ?
                              ORDER BY {SPAN_ORDER}""", params=[batch]).to_arrow_table()
    finally:
        con.execute("DROP TABLE IF EXISTS _ready_spans; DROP TABLE IF EXISTS _ready_batches")


def assemble_spans(spans: pa.Table) -> list[Assembled]:
    """Each trace of `spans` (rows of otlp_spans, sorted by trace id) as a native record, or
    classified not_a_request. Pure: runs in worker processes."""
    rows = spans.to_pylist()
    resources: dict[str, dict] = {}  # the few distinct resource attribute sets, decoded once
    assembled = []
    start = 0
    for end in range(1, len(rows) + 1):
        if end < len(rows) and rows[end]["trace_id"] == rows[start]["trace_id"]:
            continue
        trace = rows[start:end]
        start = end
        for row in trace:
            row["attrs"] = json.loads(row["attributes"]) if row["attributes"] else {}
            resource = row["resource"] or "{}"
            if resource not in resources:
                resources[resource] = json.loads(resource)
            row["resource"] = resources[resource]
            row["events"] = json.loads(row["events"]) if row["events"] else []
        place = _record_span(trace)
        result = Assembled(trace[0]["trace_id"], trace[0]["has_root"], trace[0]["spans"],
                           place["source_file"], place["source_line"], place["span_id"])
        record = request_record(result.trace_id, trace)
        if record is not None:
            result.retrieval_unreadable = record.get("retrieval_unreadable")
            result.record = _encode(record)
            result.typed = fits_model(record)
        else:
            result.state = "not_a_request"
        assembled.append(result)
    return assembled


def _record_span(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """The span that places a trace: its root, else its earliest span."""
    roots = [s for s in spans if not s["parent_span_id"]]
    return roots[0] if roots else spans[0]


@dataclass
class Assembled:
    """One ready trace id, its record, and what became of it (a row of `otlp_traces`)."""

    trace_id: str
    complete: bool
    spans: int
    source_file: str
    source_line: int
    record_span_id: str
    record: str | None = None  # the native JSON record, for requests
    state: str = "ingested"
    reason: str | None = None
    retrieval_unreadable: str | None = None  # the record's: why its retrieval is unknown
    typed: bool = False  # the record's values have the model's types (`fits_model`): parsed once

    def row(self) -> tuple:
        return (self.trace_id, self.state, self.complete, self.spans, self.reason,
                self.source_file, self.source_line, self.record_span_id)


# (con, ready traces, batch size) -> the ready traces' `Assembled`, in batches of about
# `batch_traces` traces: how the spans in `_ready` become records (here, or on an engine)
Assembler = Callable[[duckdb.DuckDBPyConnection, int, int], Iterator[list[Assembled]]]


def _store_traces(con: duckdb.DuckDBPyConnection, done: list[Assembled], max_record_bytes: int,
                  counts: AssemblyCounts) -> None:
    """Load the records through the line loader, grouped by their root's file; record states."""
    to_load: dict[str, list[Assembled]] = {}
    for trace in done:
        if trace.record is None:
            continue
        size = len(trace.record.encode())
        if size > max_record_bytes:
            trace.state, trace.reason = "quarantined", oversized_reason(size, max_record_bytes)
            quarantine_rejected(con, [Rejected(trace.source_line, trace.reason, preview(trace.record),
                                               trace.record_span_id)], trace.source_file, TRACE_FORMAT)
            continue
        to_load.setdefault(trace.source_file, []).append(trace)
    for source_file, records in to_load.items():
        _load_records(con, source_file, records)
    for trace in done:
        field_name = {"ingested": "ingested", "duplicate": "duplicates",
                      "quarantined": "quarantined", "not_a_request": "not_a_request"}[trace.state]
        setattr(counts, field_name, getattr(counts, field_name) + 1)
        counts.partial += trace.state == "ingested" and not trace.complete
        if trace.state == "ingested" and trace.retrieval_unreadable:
            trace.reason = f"retrieval_unknown: {trace.retrieval_unreadable}"
            counts.retrieval_unknown += 1
    columns = ("trace_id", "state", "complete", "spans", "reason", "source_file", "source_line",
               "record_span_id")
    states = pa.Table.from_pylist([dict(zip(columns, t.row())) for t in done])
    con.register("_trace_states", states)
    try:
        con.execute("INSERT INTO otlp_traces BY NAME SELECT *, now() AS assembled_at FROM _trace_states")
    finally:
        con.unregister("_trace_states")


def _load_records(con: duckdb.DuckDBPyConnection, source_file: str,
                  records: list[Assembled]) -> None:
    """Store the assembled records of one file; the loader's verdicts become trace states.
    Typed records (`Assembled.typed`) take `load_typed_records`, the others (a `rag.*`
    attribute of the wrong type...) the line loader, which names the problem."""
    for typed in (True, False):
        group = [t for t in records if bool(t.typed) is typed]
        if not group:
            continue
        table = pa.table({
            "line_no": pa.array(range(1, len(group) + 1), pa.int64()),
            "raw": pa.array([t.record for t in group], pa.string()),
            "source_line": pa.array([t.source_line for t in group], pa.int64()),
            "span_id": pa.array([t.record_span_id for t in group], pa.string())})
        if typed:
            load_typed_records(con, table, source_file, "otlp", TRACE_FORMAT)
        else:
            load_batch(con, table, source_file, "otlp", set_aside_format=TRACE_FORMAT)
        verdicts = dict(con.execute("""
            SELECT line_no, CASE WHEN reason IS NOT NULL THEN reason
                                 WHEN line_no IN (SELECT line_no FROM _keep) THEN ''
                                 ELSE 'duplicate' END FROM _verdict""").fetchall())
        for key, trace in enumerate(group, start=1):
            verdict = verdicts[key]
            if verdict == "duplicate":
                trace.state = "duplicate"
            elif verdict:
                trace.state, trace.reason = "quarantined", verdict
