"""Reads of the trace tables that several stages share."""

from __future__ import annotations

import duckdb
import pyarrow as pa

# The chunks of the wanted traces (`_wanted_traces`) with their text resolved: the trace's own
# (an empty text is no text), else the knowledge base's chunk of that chunk id, else the
# knowledge base's document of that doc id (the version the trace names, else the document's
# newest), its chunks' texts joined in chunk order (chunk ids, shorter first: `#2` before
# `#10`). An id-only trace (OTel GenAI documents `[{id, score}]`) is judged this way.
# `source`: what a curator cites for the chunk (the KB's chunk, else its document and version
# in the KB, else the chunk as traffic saw it: see label_rules.CITABLE_SOURCES).
RESOLVED_CHUNKS = """
WITH wanted AS (SELECT k.* FROM trace_chunks k SEMI JOIN _wanted_traces w USING (trace_id)),
newest AS (SELECT doc_id, arg_max(version, source_updated_at) AS newest_version FROM documents
           SEMI JOIN wanted USING (doc_id) GROUP BY 1),
document_text AS (
    SELECT c.doc_id, c.version, string_agg(c.text, chr(10) || chr(10) ORDER BY length(c.chunk_id), c.chunk_id) AS text
    FROM document_chunks c SEMI JOIN documents d USING (doc_id, version) SEMI JOIN wanted w USING (doc_id)
    GROUP BY 1, 2),
resolved AS (
    SELECT k.*, n.newest_version,
           coalesce(nullif(k.text, ''), c.text, t.text) AS resolved_text,
           CASE WHEN c.chunk_id IS NOT NULL THEN c.chunk_id
                WHEN n.doc_id IS NOT NULL AND t.version IS NOT NULL AND k.doc_version IS NOT NULL
                    THEN k.doc_id || '@' || k.doc_version
                WHEN n.doc_id IS NOT NULL THEN k.doc_id
                ELSE coalesce(k.chunk_id, k.doc_id || coalesce('@' || k.doc_version, '')) END AS source
    FROM wanted k LEFT JOIN document_chunks c ON c.chunk_id = k.chunk_id
    LEFT JOIN newest n ON n.doc_id = k.doc_id
    LEFT JOIN document_text t ON t.doc_id = k.doc_id AND t.version = coalesce(k.doc_version, n.newest_version))
"""


def retrieval_contexts(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, list]:
    """Chunk ids and text given to generation, in rank order (text from the trace, else the
    knowledge base's chunk, else its document: `RESOLVED_CHUNKS`)."""
    con.register("_wanted_traces", pa.table({"trace_id": pa.array(trace_ids, pa.string())}))
    try:
        rows = con.execute(f"""{RESOLVED_CHUNKS}
            SELECT trace_id, list({{'chunk_id': chunk_id, 'doc_id': doc_id, 'doc_version': doc_version,
                                   'text': resolved_text}} ORDER BY coalesce(rerank_rank, rank))
            FROM resolved WHERE coalesce(selected, true) GROUP BY 1""").fetchall()
    finally:
        con.unregister("_wanted_traces")
    return dict(rows)


def trace_details(con: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, dict]:
    """What a curator needs to see of a trace beyond its query, answer and context: the
    rewritten query, status and error, feedback, and every retrieved chunk with its scores,
    whether it reached the LLM, its text (resolved as the judge's), what to cite for it and
    whether its document has a newer version."""
    con.register("_wanted_traces", pa.table({"trace_id": pa.array(trace_ids, pa.string())}))
    try:
        rows = con.sql(f"""{RESOLVED_CHUNKS},
            chunks AS (
                SELECT trace_id, list({{'chunk_id': chunk_id, 'doc_id': doc_id, 'doc_version': doc_version,
                                       'score': score, 'rank': rank, 'rerank_score': rerank_score,
                                       'rerank_rank': rerank_rank, 'selected': selected,
                                       'newest_version': newest_version, 'source': source,
                                       'text': resolved_text}}
                                      ORDER BY rank NULLS LAST) AS retrieved
                FROM resolved GROUP BY 1),
            feedback AS (SELECT trace_id, list({{'rating': rating, 'category': category, 'comment': comment}})
                             AS feedback FROM trace_feedback JOIN _wanted_traces USING (trace_id) GROUP BY 1)
            SELECT t.trace_id, t.rewritten_query, t.status, t.error, t.is_fallback, t."timestamp", t.language,
                   t.rag_version, t.prompt_version, t.index_version, c.retrieved, f.feedback
            FROM raw_traces t JOIN _wanted_traces USING (trace_id)
            LEFT JOIN chunks c USING (trace_id) LEFT JOIN feedback f USING (trace_id)""").to_arrow_table()
    finally:
        con.unregister("_wanted_traces")
    return {row.pop("trace_id"): row for row in rows.to_pylist()}
