"""Trace ingestion: native JSONL and OTLP JSON (plain or gzip) into DuckDB, with quarantine."""

from rag_loop.ingest.pipeline import IngestReport, ingest_directory

__all__ = ["IngestReport", "ingest_directory"]
