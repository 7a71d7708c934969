"""Stage 1: the knowledge base and production traces into DuckDB."""

import os
from datetime import timedelta
from pathlib import Path

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetSelection,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    SensorEvaluationContext,
    SkipReason,
    asset,
    asset_check,
    define_asset_job,
    sensor,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.ingest.documents import load_knowledge_base
from rag_loop.ingest.language import LanguageSettings, settings_from
from rag_loop.ingest.mapped import mapping_files
from rag_loop.ingest.otlp.assembly import DEFAULT_GRACE
from rag_loop.ingest.pipeline import (
    DEFAULT_MAX_RECORD_BYTES,
    QUARANTINE_ERROR_RATE,
    QUARANTINE_WARN_RATE,
    IngestReport,
    quarantined_records,
    trace_files,
    trace_table_summary,
)
from rag_loop.store.deployment import copy_small_tables
from rag_loop.store.files import directory_fingerprint
from rag_loop.store.tables import create_tables
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, EngineResource, RagLoopPaths, StorageResource
from rag_loop_dagster.assets.sensors import request_for_input
from rag_loop_dagster.assets.stage import stage_asset, stored_in


class LanguagesConfig(Config):
    languages: list[str] = Field(
        [code for code in os.environ.get("RAG_LOOP_LANGUAGES", "").split(",") if code.strip()],
        description="The ISO 639 codes your traffic is in (default: RAG_LOOP_LANGUAGES, comma-separated, "
                    "read when the code location loads). A trace (or a knowledge-base file) that gives no "
                    "language gets the one identified from its text among these; empty: among every "
                    "language the identifier knows (short queries are then less often right).")

    def language_settings(self) -> LanguageSettings:
        try:
            return settings_from(self.languages)
        except ValueError as error:
            raise Failure(description=f"languages: {error}") from error


class IngestConfig(LanguagesConfig):
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    otlp_grace_minutes: float = Field(
        DEFAULT_GRACE.total_seconds() / 60,
        description="An OTLP trace whose root span has not arrived is assembled anyway this long "
                    "after its newest span ended.")


@stage_asset(group_name="ingestion", description="Versioned knowledge-base documents and chunks.",
             parts={"documents": "One row per document version: source updated / indexed times",
                    "document_chunks": "Chunk text of each document version"})
def knowledge_base(context: AssetExecutionContext, config: LanguagesConfig, duckdb: DuckDBResource,
                   paths: RagLoopPaths) -> MaterializeResult:
    if not paths.knowledge_dir:
        context.log.info("no knowledge base (knowledge_dir is empty): freshness and stale-source "
                         "signals have no documents to check; curators cite the chunks traces retrieved")
        with duckdb.get_connection() as con:
            create_tables(con)
        return MaterializeResult(metadata={"dagster/row_count": 0, "knowledge_base": "no KB"})
    with duckdb.get_connection() as con:
        report = load_knowledge_base(con, Path(paths.knowledge_dir), config.language_settings())
        versions = con.sql("SELECT doc_id, version, source_updated_at, indexed_at, "
                           "indexed_at - source_updated_at AS lag FROM documents ORDER BY 1, 2").df()
    return MaterializeResult(metadata={
        "dagster/row_count": report.documents, "chunks": report.chunks,
        "quarantined": report.quarantined,
        "versions": MetadataValue.md(versions.to_markdown(index=False))})

@stage_asset(
    group_name="ingestion",
    description="Production traces (native JSONL, OTLP JSON, your own logs through a mapping file, gzip) "
                "with chunks, spans, feedback; "
                "bad records in `quarantine`. Incremental by file.",
    parts={"trace_chunks": "Retrieved chunks per trace: rank, scores, selected for the context",
           "trace_spans": "Spans of each trace (OTLP) or its recorded steps",
           "trace_feedback": "User feedback per trace: rating, category, comment",
           "quarantine": "Every record refused, with file, line and reason",
           "trace_duplicates": "Every record delivered again, stored once",
           "ingested_files": "Files read: size, mtime, counts (incremental ingestion)",
           "otlp_spans": "Every OTLP span received, keyed by trace and span id",
           "otlp_traces": "What became of each OTLP trace id: ingested, duplicate, quarantined, "
                          "not_a_request, waiting",
           "otlp_pending": "OTLP trace ids with spans not yet in an assembled record: what the next "
                           "assembly looks at",
           "mapping_coverage": "Files read through a mapping file: per field, the records its path "
                               "resolved, with the mapping's hash"})
def raw_traces(context: AssetExecutionContext, config: IngestConfig, duckdb: DuckDBResource,
               paths: RagLoopPaths, engine: EngineResource) -> MaterializeResult:
    if not paths.traces_dir:
        raise Failure(description="no trace folder: set RAG_LOOP_TRACES_DIR (or the paths "
                                  "resource's traces_dir in the run config)")
    languages = config.language_settings()
    with duckdb.get_connection() as con:
        report = engine.engine().ingest(
            con, Path(paths.traces_dir), max_record_bytes=config.max_record_bytes, log=context.log.info,
            grace=timedelta(minutes=config.otlp_grace_minutes), languages=languages)
        summary = trace_table_summary(con)
        quarantined, _ = quarantined_records(con)
        by_language = con.sql("SELECT language, language_source, count(*) AS traces FROM raw_traces "
                              "GROUP BY ALL ORDER BY traces DESC, language").df()
        where = stored_in(con, "raw_traces")
        preview = con.sql('SELECT trace_id, "timestamp", language, tenant, original_query, '
                          'status FROM raw_traces ORDER BY "timestamp" DESC LIMIT 10').df()
        coverage = con.sql("""SELECT mapping_hash, field, any_value(path) AS path, sum(records) AS records,
                                  round(sum(resolved) / nullif(sum(records), 0), 3) AS resolved_share
                           FROM mapping_coverage GROUP BY ALL ORDER BY mapping_hash, min(rowid)""").df()
    metadata: dict[str, object] = {
        "dagster/row_count": summary["traces"],
        "stored_in": where,
        "files_read": sum(not f.skipped for f in report.files),
        "files_skipped": sum(f.skipped for f in report.files),
        "files_ignored": MetadataValue.json(report.ignored),
        "files": MetadataValue.md(_files_table(report)),
        "run_ingested": report.total().ingested, "run_duplicates": report.total().duplicates,
        "run_quarantined": report.total().quarantined,
        **{f"{fmt}_{name}": getattr(counts, name) for fmt, counts in report.by_format().items()
           for name in ("ingested", "duplicates", "quarantined")},
        **_otlp_figures(report),
        **{f"run_languages_{source}": n for source, n in report.languages.items()},
        "languages": MetadataValue.md(by_language.to_markdown(index=False)),
        **summary,
        "quarantined_records": MetadataValue.json(quarantined),  # file:line: reason, the first 20
        "preview": MetadataValue.md(preview.to_markdown(index=False)),
    }
    if len(coverage):  # files of your own log shape, read through a mapping file
        metadata["mapping_coverage"] = MetadataValue.md(coverage.to_markdown(index=False))
    return MaterializeResult(metadata=metadata)


@asset(group_name="ingestion", deps=["raw_traces", "trace_chunks", "trace_spans", "trace_feedback", "documents"],
       description="The trace lake of a lake-backed deployment (RAG_LOOP_LAKE): ingestion keeps the traces "
                   "there as Delta Lake tables partitioned by UTC day; this copies the small tables the "
                   "Spark engine's stages join (documents) there whole. An embedded deployment has no "
                   "lake: nothing to do.")
def trace_lake(duckdb: DuckDBResource, storage: StorageResource) -> MaterializeResult:
    lake = storage.lake()
    if lake is None:
        return MaterializeResult(metadata={"lake": "none: an embedded deployment keeps every table in "
                                                   "the DuckDB file (RAG_LOOP_LAKE gives it a lake)"})
    with duckdb.get_connection() as con:
        report = {f"{name}_rows": rows for name, rows in copy_small_tables(con, lake).items()}
    days = lake.days("raw_traces")
    return MaterializeResult(metadata={
        **report, "days": len(days), "first_day": str(days[0]) if days else "none",
        "last_day": str(days[-1]) if days else "none", "lake": lake.root})


def _otlp_figures(report: IngestReport) -> dict[str, int]:
    """Spans read this run and what became of the trace ids that were ready or waiting."""
    spans, assembly = report.spans(), report.assembly
    return {"otlp_spans_stored": spans.ingested, "otlp_span_duplicates": spans.duplicates,
            "otlp_spans_quarantined": spans.quarantined,
            "otlp_traces_partial": assembly.partial, "otlp_traces_reassembled": assembly.reassembled,
            "otlp_traces_not_a_request": assembly.not_a_request,
            "otlp_traces_waiting": assembly.waiting,
            "otlp_traces_retrieval_unknown": assembly.retrieval_unknown}


def _files_table(report: IngestReport) -> str:
    """The files read this run: format, the reader that stored each, and why faster ones gave up."""
    rows = [{"file": f.path, "format": f.format, "reader": f.reader, "ingested": f.counts.ingested,
             "duplicates": f.counts.duplicates, "quarantined": f.counts.quarantined,
             "fallbacks": "; ".join(f.fallbacks)[:300]} for f in report.files if not f.skipped]
    return pd.DataFrame(rows).to_markdown(index=False) if rows else "no new files"


@asset_check(asset="raw_traces", description="Share of quarantined records: WARN above 1 %, "
                                           "ERROR above 10 %.")
def raw_traces_quarantine_rate(duckdb: DuckDBResource) -> AssetCheckResult:
    with duckdb.get_connection() as con:
        summary = trace_table_summary(con)
    rate = summary["quarantine_rate"]
    severity = AssetCheckSeverity.ERROR if rate > QUARANTINE_ERROR_RATE else AssetCheckSeverity.WARN
    return AssetCheckResult(passed=rate <= QUARANTINE_WARN_RATE, severity=severity, metadata={
        "quarantine_rate": rate, "quarantined": summary["quarantined"],
        "records": summary["traces"] + summary["duplicates"] + summary["quarantined"]})


@sensor(job_name="ingest_job", minimum_interval_seconds=60,
        description="Launches ingestion when trace files or their mapping files appear or change; "
                    "a failed run's files are tried again.")
def new_trace_files_sensor(context: SensorEvaluationContext, paths: RagLoopPaths):
    if not paths.traces_dir:
        return SkipReason("no trace folder configured (RAG_LOOP_TRACES_DIR)")
    fingerprint = directory_fingerprint(Path(paths.traces_dir), lambda d: [*trace_files(d)[0], *mapping_files(d)])
    return request_for_input(context, "ingest_job", fingerprint, "trace files")


ingest_job = define_asset_job("ingest_job", selection=AssetSelection.groups("ingestion"),
                              tags=DUCKDB_WRITER,
                              description="Load the knowledge base and new trace files, and refresh the trace lake.")
