"""Ingestion with the parsing on Spark: each new native trace file is read by one Spark task,
and "first copy wins" across files is a Spark window; the control database gets exactly the
rows, and the caller exactly the report, that `ingest_directory` would give.

1. The driver lists the files and picks the new ones, as `ingest_directory` does.
2. Each native file is read by a Spark task, one file per task, with the DuckDB path's own
   per-file reader (`read_file`) on an in-memory DuckDB; the task writes that file's tables as
   `<staging>/<run>/<table>/file-<order>.parquet` and returns one small row (format, reader,
   fallbacks, counts). Repeats inside a file are already resolved there.
3. A Spark window over the staged traces and the ids already stored picks each trace id's first
   copy: stored first, then by file order, then by line. A staged trace that loses is listed
   as a duplicate unless the stored copy is the same record read again (same file and line);
   so is a staged duplicate. Losers' chunks, spans and feedback are dropped.
4. DuckDB reads the staged and resolved Parquet into the control database with the files'
   `ingested_files` rows, in one transaction for all native files: a failure leaves the
   database unchanged, and the run is redone whole. The run's staging folder is removed.
5. OTLP files keep the DuckDB path: staged span by span, one transaction per file, after the
   native files, then the traces that are ready are assembled.

The executors must see the trace folder and `staging` at the same paths as the driver (local
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

from rag_loop.engines.lake import quoted, write_parquet
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
    detect_format,
    listed_files,
    log_file,
    mark_ingested,
    read_file,
    run_ingestion,
    store_file,
)
from rag_loop.ingest.records import BatchCounts, quarantine_rejected
from rag_loop.logs import Log, quiet
from rag_loop.store.tables import create_tables

# what a task stores of its file, each with the file's `file_order` added
STAGED_TABLES = ("raw_traces", "trace_chunks", "trace_spans", "trace_feedback", "quarantine",
                 "trace_duplicates")
CHILD_TABLES = ("trace_chunks", "trace_spans", "trace_feedback")  # kept with their trace
# a task's row: what became of its file; `failure` when the task could not read it at all
TASK_ROW = pa.schema([("file_order", pa.int64()), ("format", pa.string()), ("reader", pa.string()),
                      ("fallbacks", pa.list_(pa.string())), ("ingested", pa.int64()),
                      ("duplicates", pa.int64()), ("quarantined", pa.int64()),
                      ("failure", pa.string())])

# Every staged trace (table 'raw_traces') and staged duplicate ('trace_duplicates') with its
# verdict: keep (the first copy: stored ones first, then by file order and line), duplicate, or
# reread (a stored copy is this very line: dropped, as the DuckDB path does). One window over
# each trace id's copies, stored and staged.
RESOLVE_SQL = """
    SELECT IF(tier = 1, 'raw_traces', 'trace_duplicates') AS staged_table, file_order, line_no,
           trace_id, verdict
    FROM (SELECT *,
                 CASE WHEN tier = 1 AND row_number() OVER (PARTITION BY trace_id
                                                           ORDER BY tier, file_order, line_no) = 1
                      THEN 'keep'
                      WHEN array_contains(collect_set(IF(tier = 0, struct(source_file, line_no), NULL))
                                          OVER (PARTITION BY trace_id), struct(source_file, line_no))
                      THEN 'reread'
                      ELSE 'duplicate' END AS verdict
          FROM (SELECT trace_id, 0 AS tier, CAST(NULL AS BIGINT) AS file_order, source_file,
                       source_line AS line_no FROM {stored}
                UNION ALL
                SELECT trace_id, 1, file_order, source_file, source_line FROM {traces}
                UNION ALL
                SELECT trace_id, 2, file_order, source_file, line_no FROM {duplicates}))
    WHERE tier > 0"""


@dataclass(frozen=True)
class TaskSettings:
    """What a task needs besides its file; pickled into the task."""

    max_record_bytes: int
    batch_bytes: int
    memory_limit: str | None
    run: str = ""  # the run's staging folder


def ingest_directory_on_spark(session: Any, con: duckdb.DuckDBPyConnection, directory: Path,
                              staging: Path, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                              log: Log = quiet, batch_bytes: int = DEFAULT_BATCH_BYTES,
                              grace: timedelta = DEFAULT_GRACE, now: datetime | None = None,
                              memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
                              workers: int | None = None) -> IngestReport:
    """`ingest_directory(con, directory, ...)` with the native files parsed by Spark tasks
    (`session`), staged under `staging/<run id>/`; `memory_limit` is each task's DuckDB's,
    `workers` the OTLP path's processes.

    A file whose task fails (its worker crashed, its DuckDB failed) is quarantined whole and
    tried again on the next run, as a file that cannot be opened is; a failure while storing
    the native files rolls all of them back. The staging folder is removed either way.

    The native files are stored before the OTLP files even where the path order mixes them,
    with the same result: an OTLP file only stages spans (in `otlp_spans`, and its own
    quarantine and duplicate rows), which no native file reads or writes, and its traces are
    assembled after every file was read, on either path.
    """
    def read_files(pool: LazyPool) -> IngestReport:
        report = IngestReport()
        listed = list(listed_files(con, directory, report))
        new = [entry for entry in listed if isinstance(entry, NewFile)]
        is_otlp = {file.order: _format(file.path) == "otlp" for file in new}
        settings = TaskSettings(max_record_bytes, batch_bytes, memory_limit)
        stored, late = _store_native(session, con, [f for f in new if not is_otlp[f.order]],
                                     staging, settings, log)
        otlp = [f for f in new if is_otlp[f.order]]
        for file in sorted(otlp + late, key=lambda f: f.order):
            stored[file.order] = store_file(con, file, max_record_bytes, batch_bytes, pool, log)
        report.files = [stored[e.order] if isinstance(e, NewFile) else e for e in listed]
        return report

    return run_ingestion(con, read_files, max_record_bytes, log, memory_limit, grace, now, workers)


def _format(path: Path) -> str | None:
    """The file's format, or None when it cannot be told: the task then meets the same failure
    and quarantines the file as the DuckDB path does."""
    try:
        return detect_format(path)
    except Exception:  # noqa: BLE001 - decided by the file's task
        return None


def _store_native(session: Any, con: duckdb.DuckDBPyConnection, files: list[NewFile],
                  staging: Path, settings: TaskSettings,
                  log: Log) -> tuple[dict[int, FileReport], list[NewFile]]:
    """Parse `files` on Spark and store them in one transaction: their reports by file order,
    and the files a task found to be OTLP after all (changed since the driver looked)."""
    if not files:
        return {}, []
    run = staging / uuid.uuid4().hex
    try:
        rows = _parse_on_spark(session, files, run, replace(settings, run=str(run)))
        late = [f for f in files if rows[f.order]["format"] == "otlp"]
        native = [f for f in files if f not in late]
        con.execute("BEGIN")
        _forget_earlier_reads(con, [f.relative for f in native])
        losers = _store_staged(session, con, run) if any(
            not rows[f.order]["failure"] for f in native) else {}
        reports = {f.order: _file_report(f, rows[f.order], losers.get(f.order, 0)) for f in native}
        _quarantine_failures(con, [(f, rows[f.order]) for f in native if rows[f.order]["failure"]])
        mark_ingested(con, [(f, reports[f.order]) for f in native])
        con.execute("COMMIT")
    finally:
        shutil.rmtree(run, ignore_errors=True)
    for file in native:
        log_file(log, reports[file.order])
    return reports, late


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
            if report.format != "otlp":  # the driver reads it again on the OTLP path
                for table in STAGED_TABLES:
                    write_parquet(con, f"SELECT *, {int(order)}::BIGINT AS file_order FROM {table}",
                          _staged_file(run, table, order))
        row = {"file_order": order, "format": report.format, "reader": report.reader,
               "fallbacks": report.fallbacks, "ingested": report.counts.ingested,
               "duplicates": report.counts.duplicates, "quarantined": report.counts.quarantined,
               "failure": None}
    except Exception as error:  # noqa: BLE001 - this file is given up for this run, not the others
        row = _failed_row(order, error)
    _write_row(row, _staged_file(run, "reports", order))
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


def _staged_file(run: Path, table: str, order: int) -> Path:
    return run / table / f"file-{order:08d}.parquet"  # zero-padded: read back in file order


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
    for table in STAGED_TABLES:
        _staged_file(run, table, order).unlink(missing_ok=True)


# --- first copy wins, and into the control database ----------------------------------------


def _store_staged(session: Any, con: duckdb.DuckDBPyConnection, run: Path) -> dict[int, int]:
    """Resolve the staged traces against the stored ones on Spark and insert what stays, inside
    the caller's transaction; returns each file's staged traces that lost (duplicates now)."""
    write_parquet(con, "SELECT trace_id, source_file, source_line FROM raw_traces",
          run / "stored" / "part-0.parquet")
    _resolve_on_spark(session, run)
    con.execute(f"CREATE OR REPLACE TEMP TABLE _resolved AS SELECT * FROM "
                f"read_parquet({quoted(run / 'resolved' / '*.parquet')})")
    try:
        _insert_resolved(con, run)
        return dict(con.execute("""
            SELECT file_order, count(*) FROM _resolved
            WHERE staged_table = 'raw_traces' AND verdict <> 'keep' GROUP BY file_order""").fetchall())
    finally:
        con.execute("DROP TABLE IF EXISTS _resolved")


def _resolve_on_spark(session: Any, run: Path) -> None:
    """Write every staged trace's and duplicate's verdict (RESOLVE_SQL) to `run/resolved`."""
    def staged(folder: str, schema: str) -> Any:  # just these columns, as Spark reads them
        return session.read.schema(schema).parquet(str(run / folder))

    key = "trace_id string, source_file string, source_line long"
    session.sql(RESOLVE_SQL, stored=staged("stored", key),
                traces=staged("raw_traces", f"{key}, file_order long"),
                duplicates=staged("trace_duplicates",
                                  "trace_id string, source_file string, line_no long, file_order long"),
                ).write.parquet(str(run / "resolved"))


def _insert_resolved(con: duckdb.DuckDBPyConnection, run: Path) -> None:
    """The staged rows that stay, stored as the DuckDB path stores them (wall-clock columns at
    this transaction's time)."""
    def staged(table: str) -> str:
        return f"read_parquet({quoted(run / table / 'file-*.parquet')})"

    def verdict(table: str, wanted: str, key: str) -> str:
        return (f"SEMI JOIN (SELECT * FROM _resolved WHERE staged_table = '{table}' "
                f"AND verdict = '{wanted}') USING ({key})")

    kept = verdict("raw_traces", "keep", "file_order, trace_id")
    con.execute(f"""INSERT INTO raw_traces BY NAME SELECT * EXCLUDE (file_order)
                    REPLACE (now() AS ingested_at) FROM {staged('raw_traces')} {kept}""")
    for table in CHILD_TABLES:
        con.execute(f"INSERT INTO {table} BY NAME SELECT * EXCLUDE (file_order) "
                    f"FROM {staged(table)} {kept}")
    con.execute(f"""INSERT INTO quarantine BY NAME SELECT * EXCLUDE (file_order)
                    REPLACE (now() AS quarantined_at) FROM {staged('quarantine')}""")
    con.execute(f"""
        INSERT INTO trace_duplicates BY NAME
        SELECT * EXCLUDE (file_order) REPLACE (now() AS seen_at) FROM {staged('trace_duplicates')}
        {verdict('trace_duplicates', 'duplicate', 'file_order, line_no, trace_id')}
        UNION ALL BY NAME
        SELECT source_file, source_line AS line_no, trace_id, source_format AS format,
               now() AS seen_at, NULL::VARCHAR AS span_id
        FROM {staged('raw_traces')} {verdict('raw_traces', 'duplicate', 'file_order, trace_id')}""")


def _forget_earlier_reads(con: duckdb.DuckDBPyConnection, relatives: list[str]) -> None:
    """`_forget_earlier_read` of the DuckDB path, for every file of the run at once."""
    for table in ("quarantine", "trace_duplicates"):
        con.execute(f"""DELETE FROM {table} WHERE format <> ?
                        AND source_file IN (SELECT unnest(?::VARCHAR[]))""", [TRACE_FORMAT, relatives])


def _file_report(file: NewFile, row: dict, lost: int) -> FileReport:
    """The file's report: its task's counts, with its traces that lost to an earlier copy
    counted as duplicates."""
    counts = BatchCounts(row["ingested"] - lost, row["duplicates"] + lost, row["quarantined"])
    return FileReport(file.relative, row["format"], counts, reader=row["reader"],
                      fallbacks=list(row["fallbacks"]))


def _quarantine_failures(con: duckdb.DuckDBPyConnection, failed: list[tuple[NewFile, dict]]) -> None:
    """A file whose task failed is quarantined whole, as one the DuckDB path cannot open, and
    tried again on the next run."""
    for file, row in failed:
        rejected = [Rejected(0, f"unreadable_file: {row['failure']}"[:500], "")]
        quarantine_rejected(con, rejected, file.relative, row["format"])
