"""DuckDB tables of the ingestion stage, and the struct type that parses native traces.

Every function takes an open DuckDB connection: the caller (an asset, a test, a benchmark)
owns the connection and the transaction.
"""

from __future__ import annotations

import json
import types
import typing
from datetime import datetime
from typing import Any

import duckdb
import pyarrow as pa
from pydantic import BaseModel

from rag_loop.schema import Trace

TRACE_COLUMNS = """
    trace_id VARCHAR NOT NULL, request_id VARCHAR, session_id VARCHAR, conversation_id VARCHAR,
    turn_id BIGINT, "timestamp" TIMESTAMPTZ NOT NULL, environment VARCHAR,
    rag_version VARCHAR, prompt_version VARCHAR, model_name VARCHAR, response_model VARCHAR,
    provider VARCHAR, embedding_model VARCHAR, reranker_model VARCHAR, index_version VARCHAR,
    chunking_version VARCHAR, retrieval_config_version VARCHAR,
    original_query VARCHAR NOT NULL, rewritten_query VARCHAR, filters JSON,
    answer VARCHAR, citations VARCHAR[], temperature DOUBLE, input_tokens BIGINT,
    output_tokens BIGINT, llm_calls BIGINT, final_input_tokens BIGINT, final_output_tokens BIGINT,
    finish_reason VARCHAR, status VARCHAR, error VARCHAR,
    is_fallback BOOLEAN, latency_ms DOUBLE, cost_usd DOUBLE,
    language VARCHAR, tenant VARCHAR, query_type VARCHAR, risk_level VARCHAR,
    source_format VARCHAR, source_file VARCHAR, source_line BIGINT, ingested_at TIMESTAMPTZ
"""

DDL = f"""
CREATE TABLE IF NOT EXISTS raw_traces ({TRACE_COLUMNS});
CREATE TABLE IF NOT EXISTS trace_chunks (
    trace_id VARCHAR NOT NULL, doc_id VARCHAR, chunk_id VARCHAR, doc_version VARCHAR,
    score DOUBLE, rank BIGINT, rerank_score DOUBLE, rerank_rank BIGINT, selected BOOLEAN,
    text VARCHAR, doc_id_from VARCHAR);
-- columns added after the first release: databases made before get them here
ALTER TABLE trace_chunks ADD COLUMN IF NOT EXISTS doc_id_from VARCHAR;
ALTER TABLE raw_traces ADD COLUMN IF NOT EXISTS llm_calls BIGINT;
ALTER TABLE raw_traces ADD COLUMN IF NOT EXISTS final_input_tokens BIGINT;
ALTER TABLE raw_traces ADD COLUMN IF NOT EXISTS final_output_tokens BIGINT;
CREATE TABLE IF NOT EXISTS trace_spans (
    trace_id VARCHAR NOT NULL, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR,
    kind VARCHAR, start_time TIMESTAMPTZ, duration_ms DOUBLE, status VARCHAR);
CREATE TABLE IF NOT EXISTS trace_feedback (
    trace_id VARCHAR NOT NULL, rating VARCHAR, category VARCHAR, comment VARCHAR);
CREATE TABLE IF NOT EXISTS quarantine (
    source_file VARCHAR, line_no BIGINT, format VARCHAR, reason VARCHAR, raw VARCHAR,
    quarantined_at TIMESTAMPTZ, span_id VARCHAR);
ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS span_id VARCHAR;
CREATE TABLE IF NOT EXISTS trace_duplicates (
    source_file VARCHAR, line_no BIGINT, trace_id VARCHAR, format VARCHAR,
    seen_at TIMESTAMPTZ, span_id VARCHAR);
ALTER TABLE trace_duplicates ADD COLUMN IF NOT EXISTS span_id VARCHAR;
-- OTLP: every span received (the unit of ingestion), and what became of each trace id
CREATE TABLE IF NOT EXISTS otlp_spans (
    trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL, parent_span_id VARCHAR, name VARCHAR,
    start_ns BIGINT, end_ns BIGINT, status_code VARCHAR, status_message VARCHAR,
    attributes JSON, resource JSON, events JSON, source_file VARCHAR, source_line BIGINT,
    received_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS otlp_traces (
    trace_id VARCHAR NOT NULL, state VARCHAR, complete BOOLEAN, spans BIGINT, reason VARCHAR,
    source_file VARCHAR, source_line BIGINT, record_span_id VARCHAR, assembled_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS ingested_files (
    path VARCHAR, size BIGINT, mtime_ns BIGINT, format VARCHAR, records BIGINT,
    ingested BIGINT, duplicates BIGINT, quarantined BIGINT, ingested_at TIMESTAMPTZ);
CREATE TABLE IF NOT EXISTS documents (
    doc_id VARCHAR NOT NULL, version VARCHAR NOT NULL, title VARCHAR, language VARCHAR,
    source_updated_at TIMESTAMPTZ NOT NULL, indexed_at TIMESTAMPTZ,
    PRIMARY KEY (doc_id, version));
CREATE TABLE IF NOT EXISTS document_chunks (
    chunk_id VARCHAR PRIMARY KEY, doc_id VARCHAR NOT NULL, version VARCHAR NOT NULL,
    text VARCHAR NOT NULL);
"""

_SCALARS: dict[Any, str] = {
    str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN",
    # kept as text by the parser, validated with TRY_CAST so a bad value gets its own reason
    datetime: "VARCHAR",
}


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create every ingestion table that does not exist yet."""
    con.execute(DDL)


def duckdb_type(annotation: Any) -> Any:
    """DuckDB `json_transform` structure for a type annotation of the trace model."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return duckdb_type(inner)
    if origin is list:
        return [duckdb_type(typing.get_args(annotation)[0])]
    if origin is dict:
        return "JSON"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {name: duckdb_type(f.annotation) for name, f in annotation.model_fields.items()}
    return _SCALARS[annotation]


def trace_struct() -> str:
    """The JSON structure string that parses a native trace line in DuckDB."""
    return json.dumps(duckdb_type(Trace))


def retrieval_contexts(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, list]:
    """Chunk ids and text given to generation (text from the trace, else the knowledge base)."""
    con.register("_wanted_traces", pa.table({"trace_id": pa.array(trace_ids, pa.string())}))
    try:
        rows = con.execute("""
            SELECT k.trace_id, list({'chunk_id': k.chunk_id, 'doc_id': k.doc_id,
                                     'doc_version': k.doc_version, 'text': coalesce(k.text, d.text)}
                                    ORDER BY coalesce(k.rerank_rank, k.rank))
            FROM trace_chunks k JOIN _wanted_traces USING (trace_id)
            LEFT JOIN document_chunks d USING (chunk_id)
            WHERE coalesce(k.selected, true) GROUP BY 1""").fetchall()
    finally:
        con.unregister("_wanted_traces")
    return dict(rows)


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = ?", [name]).fetchall())


def replace_table(con: duckdb.DuckDBPyConnection, name: str, frame) -> None:
    """(Re)create table `name` from a pandas DataFrame or Arrow table."""
    con.register("_replacement", frame)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM _replacement")
    finally:
        con.unregister("_replacement")
