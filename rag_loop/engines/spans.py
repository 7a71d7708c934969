"""OTLP ingestion on Spark: the spans a run's tasks staged, stored first copy wins; and the
traces that are ready, assembled by Spark tasks grouped by trace id.

Both give what the DuckDB path gives (`stage_spans`, `assemble_here`): the same span verdicts,
and the same `Assembled` traces from the same function (`assemble_spans`) over the same spans
in the same order, which `assemble_ready` then stores as on the DuckDB path.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from rag_loop.engines.resolve import resolve, staged, store_set_aside, verdict
from rag_loop.ingest.otlp.assembly import READY_SPANS_SQL, Assembled, Assembler, assemble_spans, mark_pending
from rag_loop.store.files import quoted, write_parquet

# what a task stages of an OTLP file (table: folder)
SPAN_TABLES = {"otlp_spans": "otlp_spans", "quarantine": "otlp_quarantine",
               "trace_duplicates": "otlp_duplicates"}
ASSEMBLED = pa.schema([("trace_id", pa.string()), ("complete", pa.bool_()), ("spans", pa.int64()),
                       ("source_file", pa.string()), ("source_line", pa.int64()),
                       ("record_span_id", pa.string()), ("record", pa.string()),
                       ("state", pa.string()), ("reason", pa.string()),
                       ("retrieval_unreadable", pa.string()), ("typed", pa.bool_())])


def store_staged_spans(session: Any, con: duckdb.DuckDBPyConnection, run: Path,
                       stored: Any | None = None) -> dict[int, tuple[int, int]]:
    """Resolve the staged spans against the stored ones (`stored`: a Spark frame of them, the
    trace lake's; else the database's table) on Spark and insert what stays, inside the
    caller's transaction. Returns, by file order, the file's first copies that lost (now
    duplicates) and its repeats found stored from their own line (read again: ingested)."""
    resolve(session, con, run, "otlp_spans" if stored is None else stored, ("trace_id", "span_id"),
            "otlp_spans", "otlp_duplicates", "_span_verdicts")
    try:
        kept = verdict("_span_verdicts", 1, "keep", "file_order, trace_id, span_id")
        con.execute(f"""INSERT INTO otlp_spans BY NAME SELECT * EXCLUDE (file_order)
                        REPLACE (now() AS received_at) FROM {staged(run, 'otlp_spans')} {kept}""")
        mark_pending(con, f"SELECT trace_id, start_ns FROM {staged(run, 'otlp_spans')} {kept}")
        store_set_aside(con, run, "_span_verdicts", "trace_id, span_id",
                        ("otlp_quarantine", "otlp_duplicates", "otlp_spans"),
                        "source_file, source_line AS line_no, trace_id, 'otlp' AS format, span_id")
        return {order: (lost, found) for order, lost, found in con.execute("""
            SELECT file_order, count(*) FILTER (tier = 1 AND verdict = 'duplicate'),
                   count(*) FILTER (tier = 2 AND verdict = 'reread')
            FROM _span_verdicts GROUP BY file_order""").fetchall()}
    finally:
        con.execute("DROP TABLE IF EXISTS _span_verdicts")


def spark_assembler(session: Any, staging: Path) -> Assembler:
    """The assembler whose `assemble_spans` runs in Spark tasks: the ready spans are staged
    under `staging`, shuffled by trace id and sorted within each task as `assemble_spans`
    reads them; the traces come back in trace id order, as on the DuckDB path."""
    def assemble(con: duckdb.DuckDBPyConnection, ready: int, batch_traces: int) -> Iterator[list[Assembled]]:
        if not ready:
            return
        run = staging / f"assembly-{uuid.uuid4().hex}"
        try:
            _assemble_on_spark(session, con, run)
            with duckdb.connect() as reader:  # the caller writes to `con` between batches
                result = reader.execute(f"SELECT * FROM read_parquet({quoted(run / 'assembled' / '*.parquet')}) "
                                        "ORDER BY trace_id")
                while rows := result.fetchmany(batch_traces):
                    yield [Assembled(**dict(zip(ASSEMBLED.names, row))) for row in rows]
        finally:
            shutil.rmtree(run, ignore_errors=True)
    return assemble


def _assemble_on_spark(session: Any, con: duckdb.DuckDBPyConnection, run: Path) -> None:
    from pyspark.sql import functions
    from pyspark.sql.pandas.types import from_arrow_schema

    write_parquet(con, f"""SELECT * REPLACE (attributes::VARCHAR AS attributes, resource::VARCHAR AS resource,
                                          events::VARCHAR AS events) FROM ({READY_SPANS_SQL})""",
                  run / "spans" / "part-0.parquet")
    spans = session.read.parquet(str(run / "spans"))
    (spans.repartition("trace_id")
     .sortWithinPartitions("trace_id", functions.asc_nulls_first("start_ns"), "span_id")
     .mapInArrow(assemble_partition, from_arrow_schema(ASSEMBLED))
     .write.parquet(str(run / "assembled")))


def assemble_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`assemble_spans` over a task's spans, sorted by trace id: a trace whose spans go on in
    the next batch waits for it."""
    pending: pa.Table | None = None
    for batch in batches:
        table = pa.Table.from_batches([batch])
        table = table if pending is None else pa.concat_tables([pending, table])
        if not table.num_rows:
            continue
        cut = pc.index(table.column("trace_id"), table.column("trace_id")[-1]).as_py()
        pending = table.slice(cut)
        if cut:
            yield _batch(assemble_spans(table.slice(0, cut)))
    if pending is not None and pending.num_rows:
        yield _batch(assemble_spans(pending))


def _batch(assembled: list[Assembled]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([dataclasses.asdict(a) for a in assembled], ASSEMBLED)
