"""`trace_signals` as one Ibis expression, for DuckDB and Spark alike (rag_loop.selection.signals
has the meaning of each signal). It reads four tables: raw_traces, trace_chunks,
trace_feedback and documents."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from math import ceil
from typing import Any

import ibis
import ibis.expr.types as ir

from rag_loop.engines.functions import Functions, on_days

SIGNALS = (
    "thumbs_down", "empty_retrieval", "low_rerank_score", "no_citation", "immediate_rephrase",
    "timeout", "fallback", "error", "latency_over_budget", "stale_source",
)
SLICE_COLUMNS = ("language", "tenant", "query_type", "risk_level", "rag_version",
                 "prompt_version", "index_version")
INPUTS = ("raw_traces", "trace_chunks", "trace_feedback", "documents")
WORD_BREAK = r"[^\p{L}\p{N}]+"  # RE2 (DuckDB) and java.util.regex (Spark) read it alike


def _words(query: ir.StringValue, fn: Functions) -> ir.ArrayValue:
    """The distinct words of a query, lower-cased and without accents."""
    return fn.distinct(fn.fold_accents(query.lower()).re_replace(WORD_BREAK, " ").split(" ")
                       .filter(lambda word: word != ""))


def _or_null(values: ir.ArrayValue) -> ir.ArrayValue:
    """An empty list as NULL (Spark's collect_list gives [] where DuckDB's gives NULL)."""
    return ibis.ifelse(values.length() > 0, values, ibis.null(values.type()))


def _chunk_facts(traces: ir.Table, chunks: ir.Table, documents: ir.Table, fn: Functions) -> ir.Table:
    versions = documents.select(
        v_doc_id=documents.doc_id, v_version=documents.version,
        superseded_at=documents.source_updated_at.lead().over(
            ibis.window(group_by=documents.doc_id, order_by=[documents.source_updated_at, documents.version])))
    times = traces.select(t_trace_id=traces.trace_id, t_timestamp=traces["timestamp"], t_answer=traces.answer)
    joined = chunks.join(times, chunks.trace_id == times.t_trace_id).left_join(
        versions, [chunks.doc_id == versions.v_doc_id, chunks.doc_version == versions.v_version])
    joined = joined.select(
        "trace_id", "chunk_id", "score", "rerank_score",
        stale=chunks.selected.fill_null(True) & (versions.superseded_at <= times.t_timestamp),
        names_chunk=times.t_answer.contains(chunks.chunk_id),
        document=chunks.doc_id.concat("@", chunks.doc_version))
    facts = joined.group_by("trace_id").aggregate(
        retrieved=joined.count(), top_rerank_score=joined.rerank_score.max(),
        top_retrieval_score=joined.score.max(), answer_names_chunk=joined.names_chunk.any(),
        stale_source=joined.stale.any(),
        stale_documents=fn.distinct(joined.document.collect(where=joined.stale.fill_null(False))).sort())
    return facts.mutate(stale_documents=_or_null(facts.stale_documents))


def _rephrases(traces: ir.Table, window_seconds: float, fn: Functions) -> ir.Table:
    """Per turn, how much the same user's next turn of the session re-asks it (word Jaccard). A
    session is its id within the service that emitted it (services reuse session ids; traces
    without a service are one service); a user without an id is one user."""
    sessions = traces.filter(traces.session_id.notnull()).mutate(at_us=fn.epoch_us(traces["timestamp"]))
    turn = ibis.window(group_by=[sessions.service, sessions.session_id, sessions.user_id],
                       order_by=[ibis.asc(sessions["timestamp"], nulls_first=False),
                                 ibis.asc(sessions.turn_id, nulls_first=False)])
    turns = sessions.select(
        "trace_id", "original_query", next_query=sessions.original_query.lead().over(turn),
        next_turn_seconds=(sessions.at_us.lead().over(turn) - sessions.at_us) / 1e6)
    close = turns.filter(turns.next_turn_seconds <= window_seconds)
    words = close.select("trace_id", first=_words(close.original_query, fn), second=_words(close.next_query, fn))
    shared, either = words.first.intersect(words.second), fn.distinct(words.first.concat(words.second))
    return words.select(r_trace_id=words.trace_id,
                        next_query_similarity=shared.length() / ibis.greatest(either.length(), 1))


def _feedback(feedback: ir.Table) -> ir.Table:
    negative = feedback.rating == "negative"
    return feedback.group_by(f_trace_id=feedback.trace_id).aggregate(
        thumbs_down=negative.any(), feedback_category=feedback.category.min(where=negative))


def signals_expression(tables: Mapping[str, ir.Table], settings, fn: Functions) -> ir.Table:
    """One row per trace: each signal as a boolean, the list of those raised and its length.
    `settings` is a rag_loop.selection.signals.SignalSettings."""
    traces, chunks = tables["raw_traces"], tables["trace_chunks"]
    facts = _chunk_facts(traces, chunks, tables["documents"], fn).rename(k_trace_id="trace_id")
    feedback = _feedback(tables["trace_feedback"])
    rephrases = _rephrases(traces, float(settings.rephrase_window_seconds), fn)
    t = (traces.left_join(facts, traces.trace_id == facts.k_trace_id)
         .left_join(feedback, traces.trace_id == feedback.f_trace_id)
         .left_join(rephrases, traces.trace_id == rephrases.r_trace_id))
    retrieved = facts.retrieved.fill_null(0)
    names_chunk = facts.answer_names_chunk.fill_null(False)
    flags = {
        "thumbs_down": feedback.thumbs_down.fill_null(False),
        "empty_retrieval": (retrieved == 0) & traces.retrieval_unreadable.isnull(),
        "low_rerank_score": (facts.top_rerank_score < float(settings.low_rerank_threshold)).fill_null(False),
        "no_citation": ((traces.status == "ok").fill_null(True) & ~traces.is_fallback.fill_null(False)
                        & (retrieved > 0) & (traces.answer.fill_null("") != "") & traces.citations.notnull()
                        & (traces.citations.length() == 0) & ~names_chunk),
        "immediate_rephrase": (rephrases.next_query_similarity >= float(settings.rephrase_similarity)).fill_null(False),
        "timeout": (traces.status == "timeout").fill_null(False),
        "fallback": traces.is_fallback.fill_null(False),
        "error": (traces.status == "error").fill_null(False)
                 | (traces.error.notnull() & (traces.status != "timeout").fill_null(True)),
        "latency_over_budget": (traces.latency_ms > float(settings.latency_budget_ms)).fill_null(False),
        "stale_source": facts.stale_source.fill_null(False),
    }
    rows = t.select(
        traces.trace_id, traces["timestamp"], day=fn.utc_day(traces["timestamp"]),
        **{c: traces[c] for c in SLICE_COLUMNS},
        thumbs_down=flags["thumbs_down"], feedback_category=feedback.feedback_category,
        empty_retrieval=flags["empty_retrieval"], retrieval_unknown=traces.retrieval_unreadable.notnull(),
        low_rerank_score=flags["low_rerank_score"], no_citation=flags["no_citation"],
        citations_unknown=traces.citations.isnull() & ~names_chunk,
        **{name: flags[name] for name in SIGNALS[4:]},
        stale_documents=facts.stale_documents, top_rerank_score=facts.top_rerank_score,
        top_retrieval_score=facts.top_retrieval_score,
        next_query_similarity=rephrases.next_query_similarity, latency_ms=traces.latency_ms,
        signals=ibis.array([ibis.ifelse(flags[name], name, ibis.null("string")) for name in SIGNALS])
        .filter(lambda name: name.notnull()))
    return rows.mutate(signal_count=rows.signals.length().cast("int64"))


@dataclass(frozen=True)
class SignalDays:
    """trace_signals for some days only: the signal settings and the days computed."""

    settings: Any  # rag_loop.selection.signals.SignalSettings
    days: tuple[date, ...]

    def read(self) -> tuple[date, ...]:
        """The days of traffic those days need: each day and the days its rephrase window
        reaches into (a session's next turn can be after midnight)."""
        ahead = max(1, ceil(float(self.settings.rephrase_window_seconds) / 86400))
        return tuple(sorted({d + timedelta(days=k) for d in self.days for k in range(ahead + 1)}))


def signals_of_days_expression(tables: Mapping[str, ir.Table], wanted: SignalDays, fn: Functions) -> ir.Table:
    """signals_expression over the traffic of `wanted.read()` only, and those days' chunks and
    feedback (each carries its trace's day), the rows of `wanted.days`."""
    read = wanted.read()
    traces, chunks, feedback = tables["raw_traces"], tables["trace_chunks"], tables["trace_feedback"]
    rows = signals_expression({**tables, "raw_traces": traces.filter(on_days(fn, traces["timestamp"], read)),
                               "trace_chunks": chunks.filter(chunks.day.isin(read)),
                               "trace_feedback": feedback.filter(feedback.day.isin(read))}, wanted.settings, fn)
    return rows.filter(rows.day.isin(list(wanted.days)))
