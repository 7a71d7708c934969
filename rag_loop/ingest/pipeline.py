"""Ingest every new trace file of a directory: incremental, idempotent, nothing lost.

A file is identified by its path relative to the directory, its size and its mtime; a file
already in `ingested_files` is skipped. Each file is stored in one transaction together with
its `ingested_files` row, so a crash never leaves half a file behind.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

import duckdb
import pyarrow as pa

from rag_loop.ingest.field_map import MappingError
from rag_loop.ingest.language import EVERY_LANGUAGE, LanguageSettings, label_languages
from rag_loop.ingest.language import preload as preload_language_model
from rag_loop.ingest.lines import NeedsExactReader, Rejected, first_lines, iter_line_batches, read_as_glob
from rag_loop.ingest.mapped import MAPPED_FORMAT, is_mapping_file, mapping_for, store_mapped_file
from rag_loop.ingest.native import read_native_file, read_native_lines, store_read_file
from rag_loop.ingest.otlp.assembly import (
    DEFAULT_GRACE,
    TRACE_FORMAT,
    Assembler,
    AssemblyCounts,
    assemble_ready,
    stage_spans,
)
from rag_loop.ingest.otlp.spans import read_spans
from rag_loop.ingest.parallel import LazyPool
from rag_loop.ingest.records import BatchCounts, insert_rows, load_batch, quarantine_rejected
from rag_loop.logs import Log, quiet
from rag_loop.store.deployment import require_home
from rag_loop.store.tables import create_tables

TRACE_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
DEFAULT_MAX_RECORD_BYTES = 1 << 20
# the raw_traces_quarantine_rate check: share of the records read that were quarantined
QUARANTINE_WARN_RATE, QUARANTINE_ERROR_RATE = 0.01, 0.10
DEFAULT_BATCH_BYTES = 32 << 20
# DuckDB's, while ingesting. Peak RSS at 1M traces: 1.1 GB by read_json, 3.3 GB by batches;
# 2GB makes read_json ~10 % faster but lets the batch readers pass 4 GB.
DEFAULT_MEMORY_LIMIT = "1GB"
# fastest first: DuckDB's read_json of the whole file, DuckDB's read_csv lines parsed in SQL,
# Arrow-split batches, Python line by line (see README "How a file is read"); OTLP is read
# span by span and assembled into traces after every file is staged
READERS = {"native": ("read_json", "read_csv", "batches", "lines"), "otlp": ("spans",)}
_SQL_READERS = {"read_json": read_native_file, "read_csv": read_native_lines}
PARALLEL_FILE_BYTES = 16 << 20  # an OTLP file above this (as stored) is parsed by worker processes
OTLP_BLOCK_BYTES = 8 << 20  # lines parsed per task
ASSEMBLY_BATCH_TRACES = 20_000  # traces assembled per task; more than one batch uses the workers
_UNREADABLE = (OSError, EOFError, zlib.error, pa.ArrowInvalid)
# the database itself failing stops a run; any other error quarantines the file being read
DATABASE_FAILURES = (duckdb.IOException, duckdb.FatalException, duckdb.InternalException,
                     duckdb.OutOfMemoryException)


@dataclass
class FileReport:
    path: str
    format: str
    counts: BatchCounts  # OTLP: spans stored, repeated, quarantined (traces are assembled later)
    skipped: bool = False
    reader: str = ""  # the reader that stored the file (see READERS)
    fallbacks: list[str] = field(default_factory=list)  # readers that gave up, and why


@dataclass
class IngestReport:
    files: list[FileReport] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # files whose name is not a trace file
    assembly: AssemblyCounts = field(default_factory=AssemblyCounts)  # OTLP traces this run
    languages: dict[str, int] = field(default_factory=dict)  # traces whose language was decided, by source

    def spans(self) -> BatchCounts:
        """OTLP spans read this run: stored, repeated (exporter retries), quarantined."""
        total = BatchCounts()
        for report in self.files:
            if not report.skipped and report.format == "otlp":
                total += report.counts
        return total

    def by_format(self) -> dict[str, BatchCounts]:
        """Records per format: native lines; OTLP traces assembled plus spans quarantined."""
        totals: dict[str, BatchCounts] = {}
        for report in self.files:
            if not report.skipped and report.format != "otlp":
                totals.setdefault(report.format, BatchCounts())
                totals[report.format] += report.counts
        if any(not r.skipped and r.format == "otlp" for r in self.files) or self.assembly.ingested:
            totals["otlp"] = self.assembly.as_batch_counts()
            totals["otlp"].quarantined += self.spans().quarantined
        return totals

    def total(self) -> BatchCounts:
        total = BatchCounts()
        for counts in self.by_format().values():
            total += counts
        return total


OTLP_EXPORT = re.compile(rb'^\s*\{\s*"resourceSpans"\s*:')  # an export request's one key


def detect_format(path: Path, lines: int = 10) -> str:
    """`otlp` when more of the first lines are OTLP exports than native records (a Collector
    file may start with a cut-off line; junk lines count for neither), else `native`. A line
    that opens as an export request is not a native record whatever its spans hold (a hostile
    `"trace_id"` key inside a span)."""
    head = first_lines(path, lines)
    otlp = sum(b'"resourceSpans"' in line for line in head)
    native = sum(line.lstrip().startswith(b"{") and b'"trace_id"' in line and not OTLP_EXPORT.match(line)
                 for line in head)
    return "otlp" if otlp > native else "native"


def trace_files(directory: Path) -> tuple[list[Path], list[str]]:
    """Trace files under `directory` in a stable order, and what else was found: other files'
    names, and folders or links that could not be followed, with why."""
    files, ignored = [], []

    def unreadable(error: OSError) -> None:
        ignored.append(f"{display_name(Path(error.filename or '?'), directory)}: "
                       f"not readable ({type(error).__name__})")

    for folder, subfolders, names in os.walk(directory, onerror=unreadable):
        ignored.extend(f"{display_name(Path(folder) / d, directory)}: hidden"
                       for d in sorted(subfolders) if d.startswith("."))
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(names):
            path = Path(folder) / name
            if name.startswith("."):
                ignored.append(f"{display_name(path, directory)}: hidden")
            elif not path.is_file():  # a broken or looping link, a socket...
                ignored.append(f"{display_name(path, directory)}: not a regular file")
            elif is_mapping_file(path):
                continue  # read with the files it maps
            elif name.endswith(TRACE_SUFFIXES) or _mapped(path, directory):
                files.append(path)
            else:
                ignored.append(display_name(path, directory))
    return sorted(files), ignored


def _mapped(path: Path, directory: Path) -> bool:
    """Whether a mapping file of the folder (or one above it, up to `directory`) reads this
    file; a mapping that cannot be used counts, so that the file is reported, not ignored."""
    try:
        return mapping_for(path, len(path.relative_to(directory).parts) - 1) is not None
    except MappingError:
        return True


def display_name(path: Path, directory: Path) -> str:
    """A file's name relative to `directory`, as valid UTF-8 (undecodable bytes as \\xNN)."""
    relative = os.path.relpath(path, directory)
    return os.fsencode(relative).decode("utf-8", "backslashreplace")


def ingest_directory(con: duckdb.DuckDBPyConnection, directory: Path,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                     log: Log = quiet,
                     batch_bytes: int = DEFAULT_BATCH_BYTES,
                     memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
                     grace: timedelta = DEFAULT_GRACE, now: datetime | None = None,
                     workers: int | None = None,
                     languages: LanguageSettings = EVERY_LANGUAGE) -> IngestReport:
    """Ingest the files of `directory` not ingested before, in path order, then assemble the
    OTLP traces that are ready (root span arrived, or `grace` passed since their newest span
    ended, by `now`: the wall clock unless given), and decide the language of the traces that
    do not give one (`languages`: rag_loop.ingest.language).

    `batch_bytes` bounds the lines parsed at once and `memory_limit` DuckDB's buffers while
    ingesting (restored afterwards; None leaves the connection's setting): memory against speed.
    Large OTLP files and many ready traces are parsed and assembled by `workers` processes
    (default: one per core; 1: all in this process).
    """
    require_home(con, None)  # a lake-backed deployment's traces are not this path's to write
    return run_ingestion(
        con, lambda pool: _ingest_directory(con, directory, max_record_bytes, log, batch_bytes, pool),
        max_record_bytes, log, memory_limit, grace, now, workers, languages=languages)


class TraceStore(Protocol):
    """Where raw_traces, its child tables, otlp_spans and otlp_traces are kept when not in the database (the Spark
    engine's trace lake): during a run those names are temp tables that hold the stored rows
    of the trace ids the run touches."""

    def load(self, con: duckdb.DuckDBPyConnection, trace_ids: str, children_of: str | None = None) -> None:
        """The stored raw_traces rows of the trace ids `trace_ids` (SQL) selects into the temp
        tables, and the child tables' rows of those `children_of` selects."""

    def load_pending(self, con: duckdb.DuckDBPyConnection) -> None:
        """The stored otlp_spans and otlp_traces rows of the pending trace ids (otlp_pending)
        into the temp tables."""

    def flush(self, con: duckdb.DuckDBPyConnection) -> None:
        """What the run changed in the temp tables, written where the rows are kept, inside
        the run's transaction before it commits."""


def run_ingestion(con: duckdb.DuckDBPyConnection, read_files: Callable[[LazyPool], IngestReport],
                  max_record_bytes: int, log: Log, memory_limit: str | None, grace: timedelta,
                  now: datetime | None, workers: int | None,
                  assembler: Assembler | None = None, traces: TraceStore | None = None,
                  languages: LanguageSettings = EVERY_LANGUAGE) -> IngestReport:
    """`read_files(pool)` (which stores the new files) with ingestion's tables and settings, then
    the assembly of the OTLP traces that are ready by `assembler` (default: in this process and
    `pool`) and the languages of the traces stored without one, in one transaction; an open
    transaction is rolled back on any failure. Both engines run their files through here."""
    settings = {"preserve_insertion_order": "true"}  # read_json's row ids are line numbers
    if memory_limit:
        settings["memory_limit"] = f"'{memory_limit}'"
    now_ns = int(now.timestamp() * 1e9) if now else time.time_ns()
    pool = LazyPool(workers)
    with _settings(con, settings):
        try:
            create_tables(con)
            con.execute("SET TimeZone = 'UTC'")  # timestamps without an offset are UTC
            report = read_files(pool)
            con.execute("BEGIN")
            report.assembly = assemble_ready(con, now_ns, grace, max_record_bytes,
                                             ASSEMBLY_BATCH_TRACES, pool=pool.get, assembler=assembler,
                                             load_stored=traces.load if traces else None,
                                             load_pending=traces.load_pending if traces else None)
            report.languages = dict(Counter(report.languages) + Counter(label_languages(con, languages)))
            if traces is not None:
                traces.flush(con)
            con.execute("COMMIT")
        except BaseException:
            _rollback(con)  # the error is the statement's own, not a later one on an aborted transaction
            raise
        finally:
            pool.close()
    log(f"OTLP traces: {report.assembly}; languages decided: {report.languages or 'none to decide'}")
    return report


@contextmanager
def _settings(con: duckdb.DuckDBPyConnection, settings: dict[str, str]) -> Iterator[None]:
    """DuckDB settings (name -> SQL literal) for the duration of the block, restored after."""
    names = list(settings)
    current = con.execute(f"SELECT {', '.join(f'current_setting({n!r})' for n in names)}").fetchall()[0]
    previous = dict(zip(names, current, strict=True))
    con.execute("; ".join(f"SET {name} = {value}" for name, value in settings.items()))
    try:
        yield
    finally:
        con.execute("; ".join(f"SET {name} = '{value}'" for name, value in previous.items()))


def _ingest_directory(con: duckdb.DuckDBPyConnection, directory: Path, max_record_bytes: int,
                      log: Log, batch_bytes: int, pool: LazyPool) -> IngestReport:
    report = IngestReport()
    for entry in listed_files(con, directory, report):
        if isinstance(entry, NewFile):
            entry = store_file(con, entry, max_record_bytes, batch_bytes, pool, log)
        report.files.append(entry)
    return report


@dataclass(frozen=True)
class NewFile:
    """A trace file not ingested yet (or changed since), as it was when looked at."""

    order: int  # its place in the listing (path order)
    path: Path
    relative: str  # its name as stored (`display_name`)
    size: int
    mtime_ns: int


def listed_files(con: duckdb.DuckDBPyConnection, directory: Path,
                 report: IngestReport) -> Iterator[FileReport | NewFile]:
    """The trace files of `directory` in path order: a skipped FileReport for each one ingested
    before (same name, size and mtime), a NewFile for the others. What is not a trace file, or
    is gone since the listing, goes to `report.ignored`. Lazy: each file's size and mtime are
    taken just before the caller reads it."""
    files, ignored = trace_files(directory)
    report.ignored.extend(ignored)
    names = [display_name(path, directory) for path in files]
    # one query for the whole listing instead of one per file (~0.5 ms each; a sensor's run lists every file)
    formats: dict[tuple[str, int, int], str | None] = {}
    for name, size, mtime_ns, fmt in con.execute(
            "SELECT path, size, mtime_ns, format FROM ingested_files WHERE path IN (SELECT unnest(?::VARCHAR[]))",
            [names]).fetchall() if names else ():
        formats.setdefault((name, size, mtime_ns), fmt)
    for order, (path, relative) in enumerate(zip(files, names, strict=True)):
        try:
            stat = path.stat()
        except OSError as error:  # gone or unreachable since the listing
            report.ignored.append(f"{relative}: not readable ({type(error).__name__})")
            continue
        key = (relative, stat.st_size, stat.st_mtime_ns)
        if key in formats:
            yield FileReport(relative, formats[key], BatchCounts(), skipped=True)
        else:
            yield NewFile(order, path, relative, stat.st_size, stat.st_mtime_ns)


def store_file(con: duckdb.DuckDBPyConnection, file: NewFile, max_record_bytes: int,
               batch_bytes: int, pool: LazyPool, log: Log = quiet) -> FileReport:
    """Read one file and commit it together with its `ingested_files` row."""
    file_report = read_file(con, file.path, file.relative, max_record_bytes, batch_bytes, pool)
    mark_ingested(con, [(file, file_report)])
    con.execute("COMMIT")
    log_file(log, file_report)
    return file_report


def read_file(con: duckdb.DuckDBPyConnection, path: Path, relative: str,
              max_record_bytes: int, batch_bytes: int, pool: LazyPool) -> FileReport:
    """Store one file inside a transaction that the caller commits; a file that cannot be
    read at all is quarantined whole. The database itself failing raises."""
    try:
        return _ingest_file(con, path, relative, max_record_bytes, batch_bytes, pool)
    except DATABASE_FAILURES:
        raise
    except Exception as error:  # noqa: BLE001 - one bad file must not block the others
        _rollback(con)
        return _unreadable_file(con, relative, "unknown", error, [])


def mark_ingested(con: duckdb.DuckDBPyConnection, stored: list[tuple[NewFile, FileReport]]) -> None:
    """The `ingested_files` rows of files read, but for those to try again (see `_unreadable_file`)."""
    rows = [[file.relative, file.size, file.mtime_ns, report.format,
             report.counts.ingested + report.counts.duplicates + report.counts.quarantined,
             report.counts.ingested, report.counts.duplicates, report.counts.quarantined]
            for file, report in stored if report.reader != "retry"]
    insert_rows(con, "INSERT INTO ingested_files SELECT *, now() FROM _ingest_rows", rows, _INGESTED_ROW)


_INGESTED_ROW = pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime_ns", pa.int64()),
                           ("format", pa.string()), *((name, pa.int64()) for name in
                                                      ("records", "ingested", "duplicates", "quarantined"))])


def log_file(log: Log, report: FileReport) -> None:
    log(f"{report.path}: {report.format} by {report.reader}, {report.counts}"
        + "".join(f"; {why}" for why in report.fallbacks))


def _ingest_file(con: duckdb.DuckDBPyConnection, path: Path, relative: str,
                 max_record_bytes: int, batch_bytes: int, pool: LazyPool) -> FileReport:
    """Store one file inside a transaction that the caller commits.

    Readers are tried fastest first; one that cannot read the file exactly raises
    `NeedsExactReader`, its work is rolled back and the next one reads the file.
    """
    fallbacks: list[str] = []
    try:
        mapping = mapping_for(path, len(Path(relative).parts) - 1)
    except MappingError as error:
        return _unreadable_file(con, relative, MAPPED_FORMAT, error, fallbacks)
    if mapping is not None:
        try:
            _begin(con, relative)
            counts = store_mapped_file(con, path, relative, mapping, max_record_bytes)
            return FileReport(relative, MAPPED_FORMAT, counts, reader="mapping")
        except (*_UNREADABLE, ValueError, RecursionError) as error:
            _rollback(con)
            return _unreadable_file(con, relative, MAPPED_FORMAT, error, fallbacks)
    try:
        fmt = detect_format(path)
    except _UNREADABLE as error:
        return _unreadable_file(con, relative, "unreadable", error, fallbacks)
    for reader in READERS[fmt]:
        try:
            counts = _load(con, fmt, reader, path, relative, max_record_bytes, batch_bytes, pool)
            return FileReport(relative, fmt, counts, reader=reader, fallbacks=fallbacks)
        except NeedsExactReader as why:
            _rollback(con)
            fallbacks.append(f"{reader}: {why}")
        except _UNREADABLE as error:
            _rollback(con)
            return _unreadable_file(con, relative, fmt, error, fallbacks)
    raise AssertionError("the line reader never asks for another")


def _unreadable_file(con, relative: str, fmt: str, error: Exception,
                     fallbacks: list[str]) -> FileReport:
    """Quarantine the whole file (a corrupt gzip, a reader failure) as one record, line 0.

    A file that could not be opened at all (no permission), or whose mapping file cannot be
    used, is not marked as ingested: it is tried again on the next run, and its quarantine row
    replaced.
    """
    _begin(con, relative)
    rejected = [Rejected(0, f"unreadable_file: {error!r}"[:500], "")]
    reader = "retry" if isinstance(error, PermissionError | MappingError) else "none"
    return FileReport(relative, fmt, quarantine_rejected(con, rejected, relative, fmt),
                      reader=reader, fallbacks=fallbacks)


def _load(con, fmt: str, reader: str, path: Path, relative: str, max_record_bytes: int,
          batch_bytes: int, pool: LazyPool) -> BatchCounts:
    """Read the file with `reader` and store it inside a transaction the caller ends."""
    if fmt == "otlp":
        _begin(con, relative)
        big = path.stat().st_size > PARALLEL_FILE_BYTES
        return _stage_otlp(con, path, relative, max_record_bytes, pool.get() if big else None)
    if reader in _SQL_READERS:
        if display_name(path, path.parent) != path.name:
            raise NeedsExactReader("the file name is not UTF-8, DuckDB cannot open it")
        if read_as_glob(path):
            raise NeedsExactReader("DuckDB would read the path as a pattern, matching other files too")
        parsed = _SQL_READERS[reader](con, path, max_record_bytes)  # before BEGIN: see direct.py
        _begin(con, relative)
        return store_read_file(con, parsed, relative)
    _begin(con, relative)
    exact = reader == "lines"
    return _load_native(con, path, relative, max_record_bytes, exact, batch_bytes)


def _begin(con: duckdb.DuckDBPyConnection, relative: str) -> None:
    con.execute("BEGIN")
    _forget_earlier_read(con, relative)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        pass  # the reader gave up before it began a transaction


def _forget_earlier_read(con: duckdb.DuckDBPyConnection, relative: str) -> None:
    """A changed file is read again whole: what an earlier read of it set aside is re-derived
    (but not what the assembly of OTLP traces placed on its lines)."""
    for table in ("quarantine", "trace_duplicates"):
        con.execute(f"DELETE FROM {table} WHERE source_file = ? AND format <> ?",
                    [relative, TRACE_FORMAT])


def _load_native(con, path: Path, relative: str, max_record_bytes: int, exact: bool,
                 batch_bytes: int) -> BatchCounts:
    counts = BatchCounts()
    for batch in iter_line_batches(path, max_record_bytes, exact=exact, batch_bytes=batch_bytes):
        counts += quarantine_rejected(con, batch.rejected, relative, "native")
        counts += load_batch(con, batch.lines, relative, "native")
    return counts


def _stage_otlp(con, path: Path, relative: str, max_record_bytes: int,
                pool: Executor | None) -> BatchCounts:
    """Stage every span of an OTLP file; its traces are assembled once every file is read."""
    counts = BatchCounts()
    for batch in read_spans(path, max_record_bytes, pool=pool, block_bytes=OTLP_BLOCK_BYTES):
        # the traces' languages are identified after the assembly: the model loads meanwhile
        # (started once the workers are forked, not before: no thread is copied into them)
        preload_language_model()
        counts += stage_spans(con, batch, relative)
    return counts


def trace_table_summary(con: duckdb.DuckDBPyConnection) -> dict[str, object]:
    """Figures of the stored traces for the UI: totals, time range, quarantine rate."""
    traces, first, last = con.execute(
        'SELECT count(*), min("timestamp"), max("timestamp") FROM raw_traces').fetchall()[0]
    duplicates = con.execute("SELECT count(*) FROM trace_duplicates").fetchall()[0][0]
    quarantined = con.execute(
        "SELECT count(*) FROM quarantine WHERE format <> 'document'").fetchall()[0][0]
    records = traces + duplicates + quarantined
    return {"traces": traces, "duplicates": duplicates, "quarantined": quarantined,
            "quarantine_rate": quarantined / records if records else 0.0,
            "first_timestamp": str(first), "last_timestamp": str(last)}


QUARANTINED_SHOWN = 20


def quarantined_records(con: duckdb.DuckDBPyConnection, limit: int = QUARANTINED_SHOWN) -> tuple[list[str], int]:
    """The first `limit` quarantined records as `file:line: reason` (the line a text editor
    shows, 1-based; a file refused whole has no line; an OTLP span names its span id), in
    file and line order, and how many there are in all."""
    total = con.execute("SELECT count(*) FROM quarantine").fetchall()[0][0]
    rows = con.execute(f"""
        SELECT source_file, line_no, span_id, format, reason FROM quarantine
        ORDER BY source_file, line_no, span_id NULLS FIRST LIMIT {int(limit)}""").fetchall()
    return [f"{file}{f':{line}' if line else ' (whole file)'}{f' span {span}' if span else ''}: "
            f"{reason} [{fmt}]" for file, line, span, fmt, reason in rows], total
