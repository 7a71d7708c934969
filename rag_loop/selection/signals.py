"""Bad-signal detectors: one boolean column per signal and trace, computed in DuckDB SQL.

Signals are cheap, deterministic symptoms (seed 004 §07), computed on every trace. They are
not ground truth: they decide where judging and curation budget goes (`sampling`).

`retrieval_unknown` (a column, not one of `SIGNALS`: it says nothing about the answer's
quality and does not drive sampling) marks a trace whose retrieval output could not be read
(`raw_traces.retrieval_unreadable`, e.g. OTLP documents cut off by an attribute length limit).
Such a trace is not an `empty_retrieval`: nothing is known about what was retrieved.
Likewise `citations_unknown`: the trace carries no citation list (real OpenInference and
GenAI instrumentations emit none) and its answer names no chunk id, so `no_citation` cannot
be computed and is false, not true. `signal_coverage` says per signal on how many traces its
input was there.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

SIGNALS = (
    "thumbs_down", "empty_retrieval", "low_rerank_score", "no_citation", "immediate_rephrase",
    "timeout", "fallback", "error", "latency_over_budget", "stale_source",
)
SLICE_COLUMNS = ("language", "tenant", "query_type", "risk_level", "rag_version",
                 "prompt_version", "index_version")


@dataclass(frozen=True)
class SignalSettings:
    """Thresholds of the detectors."""

    low_rerank_threshold: float = 0.2  # top rerank score below this is a weak retrieval
    rephrase_window_seconds: float = 90.0  # the next turn must start within this window
    rephrase_similarity: float = 0.2  # word Jaccard of the two queries
    latency_budget_ms: float = 8000.0


def _words(column: str) -> str:
    """SQL: the distinct words of a query, lower-cased and without accents."""
    normalized = f"regexp_replace(strip_accents(lower({column})), '[^\\p{{L}}\\p{{N}}]+', ' ', 'g')"
    return f"list_distinct(list_filter(string_split({normalized}, ' '), lambda w: w <> ''))"


def compute_signals(con: duckdb.DuckDBPyConnection, settings: SignalSettings) -> int:
    """(Re)build `trace_signals` from raw_traces, trace_chunks, trace_feedback and documents.

    Stale source: a chunk in the context (selected, or all chunks when selection is unknown)
    whose document version was superseded by a newer version published at or before the
    request time, whether or not the index had caught up. Immediate rephrase is flagged on
    the trace that was rephrased: the next turn of its session starts within the window and
    is a near-paraphrase. Returns the number of traces.
    """
    signal_list = ", ".join(f"CASE WHEN {name} THEN '{name}' END" for name in SIGNALS)
    con.execute(f"""
        CREATE OR REPLACE TABLE trace_signals AS
        WITH versions AS (
            SELECT doc_id, version,
                   lead(source_updated_at) OVER (PARTITION BY doc_id ORDER BY source_updated_at)
                       AS superseded_at
            FROM documents),
        chunk_facts AS (
            SELECT c.trace_id, count(*) AS retrieved, max(c.rerank_score) AS top_rerank_score,
                   max(c.score) AS top_retrieval_score,
                   bool_or(contains(t.answer, c.chunk_id)) AS answer_names_chunk,
                   bool_or(coalesce(c.selected, true) AND v.superseded_at <= t."timestamp")
                       AS stale_source,
                   list_sort(list_distinct(list(c.doc_id || '@' || c.doc_version) FILTER (
                       coalesce(c.selected, true) AND v.superseded_at <= t."timestamp")))
                       AS stale_documents
            FROM trace_chunks c
            JOIN raw_traces t USING (trace_id)
            LEFT JOIN versions v ON v.doc_id = c.doc_id AND v.version = c.doc_version
            GROUP BY c.trace_id),
        feedback AS (
            SELECT trace_id, bool_or(rating = 'negative') AS thumbs_down,
                   min(category) FILTER (rating = 'negative') AS feedback_category
            FROM trace_feedback GROUP BY trace_id),
        turns AS (
            SELECT trace_id, original_query,
                   lead(original_query) OVER w AS next_query,
                   epoch(lead("timestamp") OVER w - "timestamp") AS next_turn_seconds
            FROM raw_traces WHERE session_id IS NOT NULL
            WINDOW w AS (PARTITION BY session_id ORDER BY "timestamp", turn_id)),
        rephrases AS (
            SELECT trace_id, len(list_intersect(a, b)) / greatest(len(list_distinct(a || b)), 1)
                       AS next_query_similarity
            FROM (SELECT trace_id, {_words('original_query')} AS a, {_words('next_query')} AS b
                  FROM turns WHERE next_turn_seconds <= {float(settings.rephrase_window_seconds)})),
        flags AS (
            SELECT t.trace_id, t."timestamp", CAST(timezone('UTC', t."timestamp") AS DATE) AS day,
                   {", ".join(f"t.{c}" for c in SLICE_COLUMNS)},
                   coalesce(f.thumbs_down, false) AS thumbs_down, f.feedback_category,
                   coalesce(k.retrieved, 0) = 0 AND t.retrieval_unreadable IS NULL
                       AS empty_retrieval,
                   t.retrieval_unreadable IS NOT NULL AS retrieval_unknown,
                   coalesce(k.top_rerank_score < {float(settings.low_rerank_threshold)}, false)
                       AS low_rerank_score,
                   coalesce(t.status = 'ok', true) AND NOT coalesce(t.is_fallback, false)
                       AND coalesce(k.retrieved, 0) > 0 AND coalesce(t.answer, '') <> ''
                       AND t.citations IS NOT NULL AND len(t.citations) = 0
                       AND NOT coalesce(k.answer_names_chunk, false) AS no_citation,
                   t.citations IS NULL AND NOT coalesce(k.answer_names_chunk, false)
                       AS citations_unknown,
                   coalesce(r.next_query_similarity >= {float(settings.rephrase_similarity)}, false)
                       AS immediate_rephrase,
                   coalesce(t.status = 'timeout', false) AS timeout,
                   coalesce(t.is_fallback, false) AS fallback,
                   coalesce(t.status = 'error', false)
                       OR (t.error IS NOT NULL AND t.status IS DISTINCT FROM 'timeout') AS error,
                   coalesce(t.latency_ms > {float(settings.latency_budget_ms)}, false)
                       AS latency_over_budget,
                   coalesce(k.stale_source, false) AS stale_source,
                   k.stale_documents, k.top_rerank_score, k.top_retrieval_score,
                   r.next_query_similarity, t.latency_ms
            FROM raw_traces t
            LEFT JOIN chunk_facts k USING (trace_id)
            LEFT JOIN feedback f USING (trace_id)
            LEFT JOIN rephrases r USING (trace_id))
        SELECT *, len(signals) AS signal_count
        FROM (SELECT *, list_filter([{signal_list}], lambda s: s IS NOT NULL) AS signals
              FROM flags)""")
    return con.execute("SELECT count(*) FROM trace_signals").fetchall()[0][0]


def signal_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """How many traces raise each signal, and how many raise at least one."""
    sums = ", ".join(f"count(*) FILTER ({name})" for name in SIGNALS)
    row = con.execute(f"SELECT {sums}, count(*) FILTER (signal_count > 0) FROM trace_signals").fetchall()[0]
    return dict(zip((*SIGNALS, "any_signal"), row))


# SQL per signal: the trace carries what the detector reads (else the signal is unknown, false)
_COMPUTABLE = {
    "thumbs_down": "true",  # no feedback is no thumbs-down
    "empty_retrieval": "NOT s.retrieval_unknown",
    "low_rerank_score": "s.top_rerank_score IS NOT NULL",
    "no_citation": "NOT s.citations_unknown",
    "immediate_rephrase": "t.session_id IS NOT NULL",
    "timeout": "t.status IS NOT NULL OR t.finish_reason IS NOT NULL",
    "fallback": "t.is_fallback IS NOT NULL",
    "error": "true",
    "latency_over_budget": "t.latency_ms IS NOT NULL",
    "stale_source": "(SELECT count(*) FROM documents) > 0 AND s.top_retrieval_score IS NOT NULL",
}


def signal_coverage(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Per signal, the traces whose input the detector needs was carried (the rest are unknown
    for it: e.g. no citation list, no reranker, no session)."""
    sums = ", ".join(f"count(*) FILTER ({_COMPUTABLE[name]})" for name in SIGNALS)
    row = con.execute(f"SELECT {sums} FROM trace_signals s JOIN raw_traces t USING (trace_id)").fetchall()[0]
    return dict(zip(SIGNALS, row))
