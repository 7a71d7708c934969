"""Reads of the trace tables that several stages share."""

from __future__ import annotations

import duckdb
import pyarrow as pa


def retrieval_contexts(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, list]:
    """Chunk ids and text given to generation (text from the trace, else the knowledge base:
    an empty text in the trace is no text)."""
    con.register("_wanted_traces", pa.table({"trace_id": pa.array(trace_ids, pa.string())}))
    try:
        rows = con.execute("""
            SELECT k.trace_id, list({'chunk_id': k.chunk_id, 'doc_id': k.doc_id,
                                     'doc_version': k.doc_version, 'text': coalesce(nullif(k.text, ''), d.text)}
                                    ORDER BY coalesce(k.rerank_rank, k.rank))
            FROM trace_chunks k JOIN _wanted_traces USING (trace_id)
            LEFT JOIN document_chunks d USING (chunk_id)
            WHERE coalesce(k.selected, true) GROUP BY 1""").fetchall()
    finally:
        con.unregister("_wanted_traces")
    return dict(rows)
