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


def trace_details(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, dict]:
    """What a curator needs to see of a trace beyond its query, answer and context: the
    rewritten query, status and error, feedback, and every retrieved chunk with its scores,
    whether it reached the LLM and whether its document has a newer version."""
    con.register("_wanted_traces", pa.table({"trace_id": pa.array(trace_ids, pa.string())}))
    try:
        rows = con.sql("""
            WITH newest AS (SELECT doc_id, arg_max(version, source_updated_at) AS newest_version
                            FROM documents GROUP BY 1),
            chunks AS (
                SELECT k.trace_id, list({'chunk_id': k.chunk_id, 'doc_id': k.doc_id, 'doc_version': k.doc_version,
                                         'score': k.score, 'rank': k.rank, 'rerank_score': k.rerank_score,
                                         'rerank_rank': k.rerank_rank, 'selected': k.selected,
                                         'newest_version': n.newest_version,
                                         'text': coalesce(nullif(k.text, ''), d.text)}
                                        ORDER BY k.rank NULLS LAST) AS retrieved
                FROM trace_chunks k JOIN _wanted_traces USING (trace_id)
                LEFT JOIN document_chunks d USING (chunk_id) LEFT JOIN newest n ON n.doc_id = k.doc_id
                GROUP BY 1),
            feedback AS (SELECT trace_id, list({'rating': rating, 'category': category, 'comment': comment})
                             AS feedback FROM trace_feedback JOIN _wanted_traces USING (trace_id) GROUP BY 1)
            SELECT t.trace_id, t.rewritten_query, t.status, t.error, t.is_fallback, t."timestamp", t.language,
                   t.rag_version, t.prompt_version, t.index_version, c.retrieved, f.feedback
            FROM raw_traces t JOIN _wanted_traces USING (trace_id)
            LEFT JOIN chunks c USING (trace_id) LEFT JOIN feedback f USING (trace_id)""").to_arrow_table()
    finally:
        con.unregister("_wanted_traces")
    return {row.pop("trace_id"): row for row in rows.to_pylist()}
