"""The candidates of the intent stage: the selected traces with what clustering and curation
need (query, language, weight 1/π, signals, the judge's scores, a suggested failure type, the
curation priority), and their vectors."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from rag_loop.schema import Priority
from rag_loop.selection.suggestions import suggest_failure_type
from rag_loop.store.ddl import EMBEDDING_CACHE_DDL
from rag_loop.store.judgments import JUDGE_COLUMNS, judge_scores

UNKNOWN_LANGUAGE = "und"


MEMBERS_SQL = f"""
    SELECT c.trace_id, t.original_query AS query, coalesce(t.language, '{UNKNOWN_LANGUAGE}') AS language,
           t.answer, t.turn_id, t.rewritten_query, t."timestamp", c.priority, c.signals,
           1 / c.inclusion_probability AS weight, s.feedback_category, s.thumbs_down,
           c.signal_count, c.by_novelty,
           coalesce(top.reranked_out, false) AS top_chunk_reranked_out
    FROM failure_candidates c
    JOIN raw_traces t USING (trace_id)
    JOIN trace_signals s USING (trace_id)
    LEFT JOIN (SELECT trace_id, bool_or(rank = 1 AND selected = false) AS reranked_out
               FROM trace_chunks GROUP BY trace_id) top USING (trace_id)
    ORDER BY c.trace_id"""


def curation_priority(row: dict) -> str:
    """Seed 004 §15: P0 high-risk failures; P1 negative feedback with low faithfulness (where
    the judge has not scored the trace: thumbs-down plus another signal, as the selection
    stage decided); P2 novel; P3 the rest."""
    if row["priority"] == Priority.P0.value:
        return Priority.P0.value
    faithful = row.get("faithfulness_passed")
    judged = faithful is not None and not pd.isna(faithful)
    if row["thumbs_down"] and ((judged and not faithful) or (not judged and row["signal_count"] >= 2)):
        return Priority.P1.value
    return Priority.P2.value if row["by_novelty"] else Priority.P3.value


def candidate_members(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The selected traces with what clustering and curation need, the judge's scores where it
    judged them, a suggested failure type and the curation priority."""
    members = con.execute(MEMBERS_SQL).df().merge(judge_scores(con), on="trace_id", how="left")
    members["signals"] = members["signals"].map(list)
    members["judge_scores"] = members["judge_scores"].map(lambda s: s if isinstance(s, dict) else {})
    for column in JUDGE_COLUMNS:
        members[column] = members[column].astype(object).where(members[column].notna(), None)
    members["priority"] = [curation_priority(row) for row in members.to_dict("records")]
    suggestions = [suggest_failure_type(row) for row in members.to_dict("records")]
    members["suggested_failure_type"] = [str(s[0]) for s in suggestions]
    members["suggestion_reason"] = [s[1] for s in suggestions]
    return members


def load_vectors(con: duckdb.DuckDBPyConnection, language: str) -> tuple[list[str], np.ndarray]:
    """Trace ids and vectors of one language from `query_embeddings` + `embedding_cache`."""
    con.execute(EMBEDDING_CACHE_DDL)
    table = con.sql("""
        SELECT e.trace_id, c.vector FROM query_embeddings e
        JOIN embedding_cache c USING (model_id, text_hash)
        WHERE e.language = $language ORDER BY e.trace_id""", params={"language": language}).to_arrow_table()
    if table.num_rows == 0:
        return [], np.zeros((0, 0), np.float32)
    flat = table.column("vector").combine_chunks().flatten().to_numpy()
    return table.column("trace_id").to_pylist(), flat.reshape(table.num_rows, -1).astype(np.float32)
