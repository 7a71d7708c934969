"""Ingestion with the parsing on Spark: each new trace file is read by one Spark task, "first
copy wins" across files is a Spark window, and OTLP traces are assembled by Spark tasks; the
control database gets exactly the rows, and the caller exactly the report, that
`ingest_directory` would give.

1. The driver lists the files and picks the new ones, as `ingest_directory` does.
2. Each new file is read by a Spark task, one file per task, with the DuckDB path's own
   per-file reader (`read_file`) on an in-memory DuckDB; the task writes that file's tables as
   `<staging>/<run>/<folder>/file-<order>.parquet` and returns one small row (format, reader,
   fallbacks, counts). Repeats inside a file are already resolved there. A native file stages
   its traces and their children; an OTLP file its spans (rag_loop.engines.spans).
3. A Spark window over the staged copies and those already stored picks each trace id's (each
   span's) first copy: rag_loop.engines.resolve. Losers' chunks, spans and feedback are dropped.
4. The traces that stay are added to the trace lake, where raw_traces and its child tables
   live as Delta tables (rag_loop.engines.raw_lake: the database has views of their current
   versions' files; one commit per table), and the rest
   (ingested_files, quarantine, duplicates, spans) is stored in the control database, in one
   transaction for all files: a failure leaves the database unchanged, and the run is redone
   whole. The run's staging folder is removed.
5. The OTLP traces that are ready are assembled by Spark tasks grouped by trace id, and stored
   as on the DuckDB path (`assemble_ready` with `spark_assembler`), into the lake too.

The executors must see the trace folder and the lake at the same paths as the driver (local
mode, or a shared file system: give both as absolute paths), and run a Python that has
rag_loop (`PYSPARK_PYTHON`). A task gets the file's path as listed, so that the messages
quoting it (readers' fallbacks, unreadable files' reasons) are the DuckDB path's own.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from rag_loop.engines.raw_lake import LakeTraces, expose_kept_tables
from rag_loop.engines.resolve import resolve, staged, staged_file, store_set_aside, verdict
from rag_loop.engines.spans import SPAN_TABLES, spark_assembler, store_staged_spans
from rag_loop.ingest.language import EVERY_LANGUAGE, LanguageSettings, label_languages
from rag_loop.ingest.lines import Rejected
from rag_loop.ingest.otlp.assembly import DEFAULT_GRACE, TRACE_FORMAT
from rag_loop.ingest.parallel import LazyPool
from rag_loop.ingest.pipeline import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_MEMORY_LIMIT,
    FileReport,
    IngestReport,
    NewFile,
    listed_files,
    log_file,
    mark_ingested,
    read_file,
    run_ingestion,
)
from rag_loop.ingest.records import BatchCounts, quarantine_rejected
from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import CHILD_TABLES
from rag_loop.store.files import write_parquet
from rag_loop.store.lake import Lake
from rag_loop.store.tables import create_tables

# what a task stages of its file (table: folder), each row with the file's `file_order` added
STAGED_TABLES = {table: table for table in ("raw_traces", "trace_chunks", "trace_spans",
                                            "trace_feedback", "quarantine", "trace_duplicates")}
# a task's row: what became of its file; `failure` when the task could not read it at all
TASK_ROW = pa.schema([("file_order", pa.int64()), ("format", pa.string()), ("reader", pa.string()),
                      ("fallbacks", pa.list_(pa.string())), ("ingested", pa.int64()),
                      ("duplicates", pa.int64()), ("quarantined", pa.int64()),
                      ("failure", pa.string())])

@dataclass(frozen=True)
class TaskSettings:
    """What a task needs besides its file; pickled into the task."""

    max_record_bytes: int
    batch_bytes: int
    memory_limit: str | None
    run: str = ""  # the run's staging folder


def ingest_directory_on_spark(session: Any, con: duckdb.DuckDBPyConnection, directory: Path,
                              lake: Lake | Path, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                              log: Log = quiet, batch_bytes: int = DEFAULT_BATCH_BYTES,
                              grace: timedelta = DEFAULT_GRACE, now: datetime | None = None,
                              memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
                              workers: int | None = None,
                              languages: LanguageSettings = EVERY_LANGUAGE) -> IngestReport:
    """`ingest_directory(con, directory, ...)` with the files parsed, and the OTLP traces
    assembled, by Spark tasks (`session`), staged under `<lake>/.ingest/<run id>/`, with
    raw_traces and its child tables kept in the trace lake `lake` (a local one: a Lake, or
    its folder), as Delta tables (the database's empty tables become views of the lake's
    files on the first run; tables with rows are refused, WrongHome: `rag-loop lake migrate`
    moves them); `memory_limit` is each
    task's DuckDB's. `workers` is accepted for `ingest_directory`'s signature: the
    parallelism is Spark's.

    A file whose task fails (its worker crashed, its DuckDB failed) is quarantined whole and
    tried again on the next run, as a file that cannot be opened is; a failure while storing
    the files rolls all of them back. The staging folder is removed either way.

    All files are stored in one transaction where the DuckDB path commits file by file, with
    the same result: a native file stages traces and an OTLP file spans, which no file of the
    other format reads or writes, and OTLP traces are assembled after every file was read, on
    either path.
    """
    lake = Lake.of(lake)
    staging = lake.path(".ingest")  # a plain local folder, not a lake table
    expose_kept_tables(con, lake)
    traces = LakeTraces(session, lake, staging / f"lake-{uuid.uuid4().hex}")

    def read_files(pool: LazyPool) -> IngestReport:
        report = IngestReport()
        listed = list(listed_files(con, directory, report))
        new = [entry for entry in listed if isinstance(entry, NewFile)]
        stored, report.languages = _store_on_spark(session, con, new, staging,
                                                   TaskSettings(max_record_bytes, batch_bytes, memory_limit), log,
                                                   traces, languages)
        report.files = [stored[e.order] if isinstance(e, NewFile) else e for e in listed]
        return report

    try:
        with traces.shadowing(con):
            return run_ingestion(con, read_files, max_record_bytes, log, memory_limit, grace, now, workers,
                                 assembler=spark_assembler(session, staging), traces=traces,
                                 languages=languages)
    finally:
        shutil.rmtree(traces.run, ignore_errors=True)


def _store_on_spark(session: Any, con: duckdb.DuckDBPyConnection, files: list[NewFile], staging: Path,
                    settings: TaskSettings, log: Log, traces: LakeTraces,
                    languages: LanguageSettings) -> tuple[dict[int, FileReport], dict[str, int]]:
    """Parse `files` on Spark and store them in one transaction (the traces in the lake,
    through `traces`, their languages decided before); their reports by file order, and the
    traces whose language was decided, by source."""
    if not files:
        return {}, {}
    run = staging / uuid.uuid4().hex
    try:
        rows = _parse_on_spark(session, files, run, replace(settings, run=str(run)))

        def read(fmt: str) -> list[NewFile]:
            return [f for f in files if (rows[f.order]["format"] == "otlp") == (fmt == "otlp")]

        def any_read(of: list[NewFile]) -> bool:
            return any(not rows[f.order]["failure"] for f in of)
        native, otlp = read("native"), read("otlp")
        con.execute("BEGIN")
        _forget_earlier_reads(con, [f.relative for f in files])
        losers = _store_staged(session, con, run, traces) if any_read(native) else {}
        changes = store_staged_spans(session, con, run, traces.stored("otlp_spans")) if any_read(otlp) else {}
        reports = {f.order: _file_report(f, rows[f.order], losers.get(f.order, 0)) for f in native}
        reports |= {f.order: _span_file_report(f, rows[f.order], *changes.get(f.order, (0, 0)))
                    for f in otlp}
        _quarantine_failures(con, [(f, rows[f.order]) for f in files if rows[f.order]["failure"]])
        mark_ingested(con, [(f, reports[f.order]) for f in files])
        decided = label_languages(con, languages)
        traces.flush(con, keep_spans=True)  # the run's new spans stay loaded for the assembly after
        con.execute("COMMIT")
    finally:
        shutil.rmtree(run, ignore_errors=True)
    for file in files:
        log_file(log, reports[file.order])
    return reports, decided


# --- the tasks: one file each -------------------------------------------------------------


def _parse_on_spark(session: Any, files: list[NewFile], run: Path,
                    settings: TaskSettings) -> dict[int, dict]:
    """Each file's task row by file order. When the job fails (a task crashed its worker), the
    files whose task finished are kept and the others run again one job each, so that only a
    file whose own task fails is given up for this run."""
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        rows = _listing(session, files).mapInArrow(task_function(settings),
                                                   from_arrow_schema(TASK_ROW)).collect()
        return {row.file_order: row.asDict() for row in rows}
    except Exception as error:  # noqa: BLE001 - Py4J, PySpark or Spark Connect: the job failed
        done = _finished_rows(run)
        rows = {f.order: done[f.order] for f in files if f.order in done}
        for file in (f for f in files if f.order not in done):
            if len(files) > 1:
                rows |= _parse_on_spark(session, [file], run, settings)
            else:
                _discard_staged(run, file.order)
                rows[file.order] = _failed_row(file.order, error)
        return rows


def _listing(session: Any, files: list[NewFile]) -> Any:
    """(file_order, relative, path) of `files`, one row per partition; paths as bytes, since
    a file name need not be UTF-8."""
    from pyspark.sql import functions

    position = functions.col("id").cast("int") + 1

    def column(values: list) -> Any:
        return functions.element_at(functions.lit(values), position)

    return session.range(0, len(files), 1, len(files)).select(
        column([f.order for f in files]).cast("long").alias("file_order"),
        column([f.relative for f in files]).alias("relative"),
        column([bytearray(os.fsencode(f.path)) for f in files]).alias("path"))


def task_function(settings: TaskSettings) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function `mapInArrow` runs on each partition of the listing."""
    return partial(_parse_partition, settings)


def _parse_partition(settings: TaskSettings,
                     batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for order, relative, path in zip(*(batch.column(c).to_pylist()
                                           for c in ("file_order", "relative", "path"))):
            row = _parse_file(settings, order, relative, Path(os.fsdecode(path)))
            yield pa.RecordBatch.from_pylist([row], TASK_ROW)


def _parse_file(settings: TaskSettings, order: int, relative: str, path: Path) -> dict:
    """Read one file as the DuckDB path does, into an in-memory DuckDB, and stage its tables.
    The row is also written last, as `reports/file-<order>.parquet`: the file's staged tables
    are complete (kept if a later task crashes the job)."""
    run = Path(settings.run)
    try:
        with duckdb.connect() as con:
            _prepare(con, settings.memory_limit)
            report = read_file(con, path, relative, settings.max_record_bytes,
                               settings.batch_bytes, LazyPool(1))
            con.execute("COMMIT")
            for table, folder in (SPAN_TABLES if report.format == "otlp" else STAGED_TABLES).items():
                write_parquet(con, f"SELECT *, {int(order)}::BIGINT AS file_order FROM {table}",
                              staged_file(run, folder, order))
        row = {"file_order": order, "format": report.format, "reader": report.reader,
               "fallbacks": report.fallbacks, "ingested": report.counts.ingested,
               "duplicates": report.counts.duplicates, "quarantined": report.counts.quarantined,
               "failure": None}
    except Exception as error:  # noqa: BLE001 - this file is given up for this run, not the others
        row = _failed_row(order, error)
    _write_row(row, staged_file(run, "reports", order))
    return row


def _prepare(con: duckdb.DuckDBPyConnection, memory_limit: str | None) -> None:
    """The task's DuckDB as `run_ingestion` sets up the control database, on the task's cores."""
    from pyspark import TaskContext

    create_tables(con)
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = true")  # read_json's row ids are line numbers
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    context = TaskContext.get()
    if context is not None:
        con.execute(f"SET threads = {int(context.cpus())}")


def _failed_row(order: int, error: BaseException) -> dict:
    return {"file_order": order, "format": "unknown", "reader": "retry", "fallbacks": [],
            "ingested": 0, "duplicates": 0, "quarantined": 1, "failure": _why(error)}


def _why(error: BaseException) -> str:
    """The error as the DuckDB path quarantines a file it cannot read: its repr; for a failed
    Spark job, the cause its first lines give (a Java stack trace follows)."""
    if not type(error).__module__.startswith(("py4j", "pyspark")):
        return repr(error)
    lines = [line.strip(" :") for line in str(error).splitlines() if "Exception" in line or "Error" in line]
    cause = re.sub(r"^.*most recent failure: .*?\): ", "", lines[0]) if lines else str(error)
    return f"{type(error).__name__}({cause[:300]!r})"


def _write_row(row: dict, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    hidden = target.with_name(f".{uuid.uuid4().hex}.tmp")
    pq.write_table(pa.Table.from_pylist([row], TASK_ROW), hidden)
    os.replace(hidden, target)


def _finished_rows(run: Path) -> dict[int, dict]:
    """The rows of the tasks that finished, from their report files."""
    rows = [pq.read_table(p).to_pylist()[0] for p in (run / "reports").glob("file-*.parquet")]
    return {row["file_order"]: row for row in rows}


def _discard_staged(run: Path, order: int) -> None:
    """What a crashed task of the file may have staged."""
    for folder in (*STAGED_TABLES.values(), *SPAN_TABLES.values()):
        staged_file(run, folder, order).unlink(missing_ok=True)


# --- first copy wins, and into the control database ----------------------------------------


def _store_staged(session: Any, con: duckdb.DuckDBPyConnection, run: Path, traces: LakeTraces) -> dict[int, int]:
    """Resolve the staged traces against the stored ones (the lake's, read by Spark) on Spark
    and insert what stays, inside the caller's transaction; returns each file's staged traces
    that lost (duplicates now). The traces kept have no stored copy: nothing stored is loaded."""
    stored = traces.stored()
    resolve(session, con, run, "raw_traces" if stored is None else stored, ("trace_id",), "raw_traces",
            "trace_duplicates", "_resolved")
    try:
        _insert_resolved(con, run)
        return dict(con.execute("""
            SELECT file_order, count(*) FROM _resolved
            WHERE tier = 1 AND verdict <> 'keep' GROUP BY file_order""").fetchall())
    finally:
        con.execute("DROP TABLE IF EXISTS _resolved")


def _insert_resolved(con: duckdb.DuckDBPyConnection, run: Path) -> None:
    """The staged rows that stay, stored as the DuckDB path stores them (wall-clock columns at
    this transaction's time)."""
    kept = verdict("_resolved", 1, "keep", "file_order, trace_id")
    con.execute(f"""INSERT INTO raw_traces BY NAME SELECT * EXCLUDE (file_order)
                    REPLACE (now() AS ingested_at) FROM {staged(run, 'raw_traces')} {kept}""")
    for table in CHILD_TABLES:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * EXCLUDE (file_order) "
                    f"FROM {staged(run, table)} {kept}")
    store_set_aside(con, run, "_resolved", "trace_id", ("quarantine", "trace_duplicates", "raw_traces"),
                    "source_file, source_line AS line_no, trace_id, source_format AS format, "
                    "NULL::VARCHAR AS span_id")


def _forget_earlier_reads(con: duckdb.DuckDBPyConnection, relatives: list[str]) -> None:
    """`_forget_earlier_read` of the DuckDB path, for every file of the run at once."""
    for table in ("quarantine", "trace_duplicates"):
        con.execute(f"""DELETE FROM {table} WHERE format <> ?
                        AND source_file IN (SELECT unnest(?::VARCHAR[]))""", [TRACE_FORMAT, relatives])


def _file_report(file: NewFile, row: dict, lost: int) -> FileReport:
    """The file's report: its task's counts, with its traces that lost to an earlier copy
    counted as duplicates."""
    return _span_file_report(file, row, lost, 0)


def _span_file_report(file: NewFile, row: dict, lost: int, found: int) -> FileReport:
    """The file's report: its task's counts, with `lost` of its first copies counted as
    duplicates, and `found` of its repeats as ingested (read before, from the same line)."""
    moved = lost - found
    counts = BatchCounts(row["ingested"] - moved, row["duplicates"] + moved, row["quarantined"])
    return FileReport(file.relative, row["format"], counts, reader=row["reader"],
                      fallbacks=list(row["fallbacks"]))


def _quarantine_failures(con: duckdb.DuckDBPyConnection, failed: list[tuple[NewFile, dict]]) -> None:
    """A file whose task failed is quarantined whole, as one the DuckDB path cannot open, and
    tried again on the next run."""
    for file, row in failed:
        rejected = [Rejected(0, f"unreadable_file: {row['failure']}"[:500], "")]
        quarantine_rejected(con, rejected, file.relative, row["format"])
