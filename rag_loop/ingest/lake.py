"""Ingestion into a lake-backed deployment: the files of a run parsed by DuckDB, first copy wins
decided in DuckDB against the stored copies of the days concerned only, and the new rows
appended to the Delta lake (one commit per table); the control database gets exactly the rows,
and the caller exactly the report, that `ingest_directory` gives an embedded deployment. Both
engines ingest this way: the traffic-sized stages run on Spark, ingestion does not (a Spark
ingestion took 1.5–2.4× this one's time on a native first run and 1.8–5.4× on incremental runs,
0.7–1.1× on an OTLP first run, and could not write an object store: bench/RESULTS.md,
2026-12-04).

1. The new files are listed as `ingest_directory` lists them.
2. Each is read by the embedded path's own per-file reader (`read_file`) into the run's
   in-memory DuckDB, its tables empty for each file (repeats inside a file resolved there), and
   its tables are staged as `<staging>/<folder>/file-<order>.parquet` in a local temporary folder. A native file
   stages its traces and their children; an OTLP file its spans.
3. One window over the staged copies and the stored ones picks each trace id's (each span's)
   first copy (`resolve`): stored copies first, then by file order, then by line; a staged
   copy of the line a stored copy came from (a file read again) is dropped as the embedded path
   drops it. **The stored copies are read from the days the staged copies fall on only** (a
   trace's day is its timestamp's, a span's its start's): a resent record carries the same
   timestamp, so the same day, and the lookup costs what those days hold, not the whole
   history. What that means: a trace id reused with a timestamp of another day is not seen as
   a repeat, and is stored a second time (an embedded deployment keeps its first copy only).
4. What stays goes into the run's temp tables (rag_loop.store.lake_traces), written to the lake
   by `LakeTraces.flush`, and the rest (ingested_files, quarantine, duplicates, pending traces)
   into the control database, in one transaction for all files: a failure leaves the database
   and the lake's versions unchanged, and the run is redone whole.
5. The OTLP traces that are ready are assembled as on the embedded path (`run_ingestion`), the
   stored spans, states and rows they need loaded from the lake first (the `TraceStore` seam).
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from rag_loop.ingest.language import EVERY_LANGUAGE, LanguageSettings, label_languages
from rag_loop.ingest.otlp.assembly import DEFAULT_GRACE, TRACE_FORMAT, mark_pending
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
from rag_loop.ingest.records import BatchCounts
from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import CHILD_TABLES, span_day, utc_day
from rag_loop.store.deployment import migrate, require_home
from rag_loop.store.files import quoted, write_parquet
from rag_loop.store.lake import Lake
from rag_loop.store.lake_traces import LakeTraces
from rag_loop.store.tables import create_tables

# what a file stages (table: folder), each row with the file's `file_order` added
STAGED_TABLES = {table: table for table in ("raw_traces", "trace_chunks", "trace_spans", "trace_feedback",
                                            "quarantine", "trace_duplicates", "mapping_coverage")}
SPAN_TABLES = {"otlp_spans": "otlp_spans", "quarantine": "otlp_quarantine",
               "trace_duplicates": "otlp_duplicates"}


def ingest_directory_into_lake(con: duckdb.DuckDBPyConnection, directory: Path, lake: Lake | Path,
                               max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, log: Log = quiet,
                               batch_bytes: int = DEFAULT_BATCH_BYTES, grace: timedelta = DEFAULT_GRACE,
                               now: datetime | None = None, memory_limit: str | None = DEFAULT_MEMORY_LIMIT,
                               workers: int | None = None,
                               languages: LanguageSettings = EVERY_LANGUAGE) -> IngestReport:
    """`ingest_directory(con, directory, ...)` with raw_traces, its child tables, otlp_spans and
    otlp_traces kept in the Delta lake `lake` (a Lake, or a local folder) as the module says:
    a new database becomes the lake's on the first run; one that records another home is
    refused (WrongHome: `rag-loop lake migrate` moves its tables)."""
    lake = Lake.of(lake)
    lake.attach(con)
    require_home(con, lake)
    migrate(con, lake, "lake")  # a kept table a newer release added, made empty in the file since: to the lake
    traces = LakeTraces(lake)

    def read_files(pool: LazyPool) -> IngestReport:
        report = IngestReport()
        listed = list(listed_files(con, directory, report))
        new = [entry for entry in listed if isinstance(entry, NewFile)]
        with tempfile.TemporaryDirectory(prefix="rag-loop-ingest-") as staging:
            stored, report.languages = _store_files(con, new, Path(staging), max_record_bytes, batch_bytes,
                                                    memory_limit, pool, log, traces, languages)
        report.files = [stored[e.order] if isinstance(e, NewFile) else e for e in listed]
        return report

    with traces.shadowing(con):
        return run_ingestion(con, read_files, max_record_bytes, log, memory_limit, grace, now, workers,
                             traces=traces, languages=languages)


def _store_files(con: duckdb.DuckDBPyConnection, files: list[NewFile], run: Path, max_record_bytes: int,
                 batch_bytes: int, memory_limit: str | None, pool: LazyPool, log: Log, traces: LakeTraces,
                 languages: LanguageSettings) -> tuple[dict[int, FileReport], dict[str, int]]:
    """Read `files`, staged in `run`, and store them in one transaction (the traces in the lake,
    through `traces`, their languages decided before); their reports by file order, and the
    traces whose language was decided, by source."""
    if not files:
        return {}, {}
    read = _stage_files(files, run, max_record_bytes, batch_bytes, memory_limit, pool)
    native = [f for f in files if read[f.order].format != "otlp"]
    otlp = [f for f in files if read[f.order].format == "otlp"]
    con.execute("BEGIN")
    _forget_earlier_reads(con, [f.relative for f in files])
    losers = _store_staged_traces(con, run, traces) if native else {}
    changes = _store_staged_spans(con, run, traces) if otlp else {}
    reports = {f.order: _counted(read[f.order], losers.get(f.order, 0), 0) for f in native}
    reports |= {f.order: _counted(read[f.order], *changes.get(f.order, (0, 0))) for f in otlp}
    mark_ingested(con, [(f, reports[f.order]) for f in files])
    decided = label_languages(con, languages)
    traces.flush(con, keep_spans=True)  # the run's new spans stay loaded for the assembly after
    con.execute("COMMIT")
    for file in files:
        log_file(log, reports[file.order])
    return reports, decided


def _stage_files(files: list[NewFile], run: Path, max_record_bytes: int, batch_bytes: int,
                 memory_limit: str | None, pool: LazyPool) -> dict[int, FileReport]:
    """Read each file as the embedded path does, into one in-memory DuckDB whose tables are
    emptied after each file (one per file cost ~40 ms to make), and stage its tables that have
    rows (an empty one for a folder of none: the folders are read by glob); the reports by file
    order."""
    reports: dict[int, FileReport] = {}
    empty: dict[str, str | None] = {}  # a folder's table while no file of it is staged, else None
    with duckdb.connect() as con:
        create_tables(con)
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET preserve_insertion_order = true")  # read_json's row ids are line numbers
        if memory_limit:
            con.execute(f"SET memory_limit = '{memory_limit}'")
        tables = [name for (name,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for file in files:
            report = reports[file.order] = read_file(con, file.path, file.relative, max_record_bytes,
                                                     batch_bytes, pool)
            con.execute("COMMIT")
            folders = SPAN_TABLES if report.format == "otlp" else STAGED_TABLES
            filled = con.execute(" UNION ALL ".join(f"SELECT '{folder}', EXISTS (FROM {table})"
                                                    for table, folder in folders.items())).fetchall()
            for (table, folder), (_, rows) in zip(folders.items(), filled, strict=True):
                if rows:
                    write_parquet(con, f"SELECT *, {int(file.order)}::BIGINT AS file_order FROM {table}",
                                  staged_file(run, folder, file.order))
                    empty[folder] = None
                else:
                    empty.setdefault(folder, table)
            for table in tables:
                con.execute(f'DELETE FROM "{table}"')
        for folder, table in empty.items():
            if table is not None:
                write_parquet(con, f"SELECT *, 0::BIGINT AS file_order FROM {table}", staged_file(run, folder, 0))
    return reports


def staged_file(run: Path, folder: str, order: int) -> Path:
    return run / folder / f"file-{order:08d}.parquet"  # zero-padded: read back in file order


def staged(run: Path, folder: str) -> str:
    """The staged files of `folder` as a DuckDB table expression."""
    return f"read_parquet({quoted(run / folder / 'file-*.parquet')}, union_by_name = true)"


def resolve(con: duckdb.DuckDBPyConnection, run: Path, stored: str, key: tuple[str, ...],
            firsts: str, repeats: str, table: str) -> None:
    """Every staged copy's verdict, as the temp table `table` (tier, file_order, line_no, key...,
    verdict: keep, reread or duplicate): the staged folders `firsts` (key, source_file,
    source_line: each file's first copies) and `repeats` (key, source_file, line_no: its
    repeats) against the stored copies `stored` (SQL: key, source_file, source_line) of the keys
    staged. A key keeps its first copy: a stored one, else by file order, then by line."""
    columns = ", ".join(key)
    here = "{'file': source_file, 'line': line_no}"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {table} AS
        WITH copies AS (
            SELECT {columns}, 0 AS tier, NULL::BIGINT AS file_order, source_file, source_line AS line_no
            FROM ({stored}) SEMI JOIN (SELECT {columns} FROM {staged(run, firsts)}) USING ({columns})
            UNION ALL
            SELECT {columns}, 1, file_order, source_file, source_line FROM {staged(run, firsts)}
            UNION ALL
            SELECT {columns}, 2, file_order, source_file, line_no FROM {staged(run, repeats)})
        SELECT tier, file_order, line_no, {columns}, verdict FROM (
            SELECT *, CASE WHEN tier = 1 AND row_number() OVER (PARTITION BY {columns}
                                                                ORDER BY tier, file_order, line_no) = 1
                           THEN 'keep'
                           WHEN list_contains(list({here}) FILTER (WHERE tier = 0) OVER (PARTITION BY {columns}),
                                              {here})
                           THEN 'reread'
                           ELSE 'duplicate' END AS verdict
            FROM copies)
        WHERE tier > 0""")


def verdict(table: str, tier: int, wanted: str, key: str) -> str:
    """A join clause keeping the staged rows of `tier` whose verdict in `table` is `wanted`."""
    return (f"SEMI JOIN (SELECT * FROM {table} WHERE tier = {tier} AND verdict = '{wanted}') "
            f"USING ({key})")


def _store_set_aside(con: duckdb.DuckDBPyConnection, run: Path, verdicts: str, key: str,
                     folders: tuple[str, str, str], lost: str) -> None:
    """The staged quarantine rows, and the staged copies that are duplicates, inserted (inside
    the caller's transaction, wall-clock columns at its time): the repeats whose verdict in
    `verdicts` is duplicate, and the first copies that lost, as `lost` selects them (the
    trace_duplicates columns but seen_at). `folders`: quarantine, repeats, first copies."""
    quarantine, repeats, firsts = folders
    con.execute(f"""INSERT INTO quarantine BY NAME SELECT * EXCLUDE (file_order)
                    REPLACE (now() AS quarantined_at) FROM {staged(run, quarantine)}""")
    con.execute(f"""
        INSERT INTO trace_duplicates BY NAME
        SELECT * EXCLUDE (file_order) REPLACE (now() AS seen_at) FROM {staged(run, repeats)}
        {verdict(verdicts, 2, 'duplicate', f'file_order, line_no, {key}')}
        UNION ALL BY NAME
        SELECT {lost}, now() AS seen_at FROM {staged(run, firsts)}
        {verdict(verdicts, 1, 'duplicate', f'file_order, {key}')}""")


def _days(con: duckdb.DuckDBPyConnection, run: Path, folder: str, day: str) -> list:
    return [d for (d,) in con.execute(f"SELECT DISTINCT {day} FROM {staged(run, folder)}").fetchall()
            if d is not None]


def _store_staged_traces(con: duckdb.DuckDBPyConnection, run: Path, traces: LakeTraces) -> dict[int, int]:
    """Resolve the staged traces against the lake's of their days and insert what stays, inside
    the caller's transaction; returns each file's staged traces that lost (duplicates now)."""
    stored = traces.stored("raw_traces", "trace_id, source_file, source_line",
                           _days(con, run, "raw_traces", utc_day()))
    resolve(con, run, stored, ("trace_id",), "raw_traces", "trace_duplicates", "_resolved")
    try:
        kept = verdict("_resolved", 1, "keep", "file_order, trace_id")
        con.execute(f"""INSERT INTO raw_traces BY NAME SELECT * EXCLUDE (file_order)
                        REPLACE (now() AS ingested_at) FROM {staged(run, 'raw_traces')} {kept}""")
        for table in CHILD_TABLES:
            con.execute(f"INSERT INTO {table} BY NAME SELECT * EXCLUDE (file_order) "
                        f"FROM {staged(run, table)} {kept}")
        _store_set_aside(con, run, "_resolved", "trace_id", ("quarantine", "trace_duplicates", "raw_traces"),
                         "source_file, source_line AS line_no, trace_id, source_format AS format, "
                         "NULL::VARCHAR AS span_id")
        coverage = staged(run, "mapping_coverage")  # a mapped file's, replacing its earlier read's
        con.execute(f"DELETE FROM mapping_coverage WHERE source_file IN (SELECT source_file FROM {coverage})")
        con.execute(f"INSERT INTO mapping_coverage BY NAME SELECT * EXCLUDE (file_order) FROM {coverage}")
        return dict(con.execute("""
            SELECT file_order, count(*) FROM _resolved
            WHERE tier = 1 AND verdict <> 'keep' GROUP BY file_order""").fetchall())
    finally:
        con.execute("DROP TABLE IF EXISTS _resolved")


def _store_staged_spans(con: duckdb.DuckDBPyConnection, run: Path, traces: LakeTraces) -> dict[int, tuple[int, int]]:
    """Resolve the staged spans against the lake's of their days and insert what stays, inside
    the caller's transaction. Returns, by file order, the file's first copies that lost (now
    duplicates) and its repeats found stored from their own line (read again: ingested)."""
    stored = traces.stored("otlp_spans", "trace_id, span_id, source_file, source_line",
                           _days(con, run, "otlp_spans", span_day()))
    resolve(con, run, stored, ("trace_id", "span_id"), "otlp_spans", "otlp_duplicates", "_span_verdicts")
    try:
        kept = verdict("_span_verdicts", 1, "keep", "file_order, trace_id, span_id")
        con.execute(f"""INSERT INTO otlp_spans BY NAME SELECT * EXCLUDE (file_order)
                        REPLACE (now() AS received_at) FROM {staged(run, 'otlp_spans')} {kept}""")
        mark_pending(con, f"SELECT trace_id, start_ns FROM {staged(run, 'otlp_spans')} {kept}")
        _store_set_aside(con, run, "_span_verdicts", "trace_id, span_id",
                         ("otlp_quarantine", "otlp_duplicates", "otlp_spans"),
                         "source_file, source_line AS line_no, trace_id, 'otlp' AS format, span_id")
        return {order: (lost, found) for order, lost, found in con.execute("""
            SELECT file_order, count(*) FILTER (tier = 1 AND verdict = 'duplicate'),
                   count(*) FILTER (tier = 2 AND verdict = 'reread')
            FROM _span_verdicts GROUP BY file_order""").fetchall()}
    finally:
        con.execute("DROP TABLE IF EXISTS _span_verdicts")


def _forget_earlier_reads(con: duckdb.DuckDBPyConnection, relatives: list[str]) -> None:
    """`_forget_earlier_read` of the embedded path, for every file of the run at once."""
    for table in ("quarantine", "trace_duplicates"):
        con.execute(f"""DELETE FROM {table} WHERE format <> ?
                        AND source_file IN (SELECT unnest(?::VARCHAR[]))""", [TRACE_FORMAT, relatives])


def _counted(report: FileReport, lost: int, found: int) -> FileReport:
    """The file's report with `lost` of its first copies counted as duplicates (they lost to a
    stored copy or an earlier file's), and `found` of its repeats as ingested (read before,
    from the same line)."""
    moved = lost - found
    counts = report.counts
    return FileReport(report.path, report.format,
                      BatchCounts(counts.ingested - moved, counts.duplicates + moved, counts.quarantined),
                      reader=report.reader, fallbacks=report.fallbacks)
