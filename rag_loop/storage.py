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
from rag_loop.tables import INGESTION_DDL

_SCALARS: dict[Any, str] = {
    str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN",
    # kept as text by the parser, validated with TRY_CAST so a bad value gets its own reason
    datetime: "VARCHAR",
}


def create_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create every ingestion table that does not exist yet."""
    con.execute(INGESTION_DDL)


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
