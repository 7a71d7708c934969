"""Bad-signal detectors: one boolean column per signal and trace, on DuckDB or Spark.

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

from collections.abc import Collection
from dataclasses import dataclass
from datetime import date

import duckdb

from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.engines.incremental import Fingerprints, combined, traffic_fingerprints, whole_fingerprint
from rag_loop.selection.signal_expressions import (
    INPUTS,
    SIGNALS,
    SLICE_COLUMNS,
    SignalDays,
    signals_expression,
    signals_of_days_expression,
)

__all__ = ["SIGNALS", "SLICE_COLUMNS", "SignalSettings", "compute_signals", "signal_counts", "signal_coverage"]



@dataclass(frozen=True)
class SignalSettings:
    """Thresholds of the detectors."""

    low_rerank_threshold: float = 0.2  # top rerank score below this is a weak retrieval
    rephrase_window_seconds: float = 90.0  # the next turn must start within this window
    rephrase_similarity: float = 0.2  # word Jaccard of the two queries
    latency_budget_ms: float = 8000.0


def compute_signals(con: duckdb.DuckDBPyConnection, settings: SignalSettings, engine: Engine | None = None,
                    days: Collection[date] | None = None) -> int:
    """(Re)build `trace_signals` from raw_traces, trace_chunks, trace_feedback and documents, on
    `engine` (default: DuckDB on `con`; rag_loop.selection.signal_expressions holds the one definition);
    with `days`, only those UTC days' rows are computed (from their traffic and the next day's)
    and replace theirs — the same rows as the whole table has. New traffic on a day changes
    the day before it too (its last turns' rephrases): recompute both.

    Stale source: a chunk in the context (selected, or all chunks when selection is unknown)
    whose document version was superseded by a newer version published at or before the
    request time, whether or not the index had caught up. Immediate rephrase is flagged on
    the trace that was rephrased: the same user's next turn of its session (the session id
    within the emitting service) starts within the window and is a near-paraphrase. Returns
    the number of traces (of `days`, when given).
    """
    engine = engine or DuckDBEngine()
    if days is None:
        return engine.run(con, "trace_signals", INPUTS, signals_expression, settings)
    return engine.run(con, "trace_signals", INPUTS, signals_of_days_expression,
                      SignalDays(settings, tuple(sorted(days))), days)


def signal_inputs(con: duckdb.DuckDBPyConnection, settings: SignalSettings) -> Fingerprints:
    """Per day with traffic, a fingerprint of what its signals are computed from: the settings,
    the documents, and the traffic of each day it reads (itself and the days after it that its
    rephrase window reaches), so new traffic on a day changes the day before it too."""
    traffic = traffic_fingerprints(con)
    fixed = (settings, whole_fingerprint(con, "documents"))
    return {day: combined(*fixed, *(traffic.get(d) for d in SignalDays(settings, (day,)).read()))
            for day in traffic}


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
