"""Drift figures of one day against its trailing baseline window, computed from the trace tables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from rag_loop.drift.stats import js_divergence, ks_test, psi, psi_continuous, top_movers
from rag_loop.engines.drift import INPUTS as MIX_INPUTS
from rag_loop.engines.drift import MixWindow, mix_counts_expression
from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.selection.signals import SLICE_COLUMNS

LENGTH_BUCKETS = ((1, 3, "1-3 words"), (4, 7, "4-7 words"), (8, 15, "8-15 words"), (16, 10**6, "16+ words"))


def baseline_days(day: date, days: int) -> tuple[date, date]:
    return day - timedelta(days=days), day - timedelta(days=1)


def retrieval_figures(con: duckdb.DuckDBPyConnection, day: date, window: int) -> pd.DataFrame:
    """Per slice of the day: quantiles of top-1 retrieval and rerank scores, empty retrieval
    rate, source diversity, top-k overlap with the baseline for repeated queries, and KS / PSI
    of the top-1 rerank score against the baseline window."""
    start, end = baseline_days(day, window)
    traces = con.execute(f"""
        WITH chunks AS (
            SELECT trace_id, count(DISTINCT doc_id) AS documents, list(chunk_id) AS chunk_ids
            FROM trace_chunks GROUP BY 1),
        window_traces AS (
            SELECT s.*, lower(trim(t.original_query)) AS query, t."timestamp" AS asked_at,
                   k.documents, k.chunk_ids
            FROM trace_signals s JOIN raw_traces t USING (trace_id) LEFT JOIN chunks k USING (trace_id)
            WHERE s.day BETWEEN ? AND ?),
        earlier AS (  -- the latest retrieval of each query in the baseline window
            SELECT query, arg_max(chunk_ids, asked_at) AS chunk_ids FROM window_traces
            WHERE day <= ? AND chunk_ids IS NOT NULL GROUP BY query)
        SELECT w.day, {", ".join(f"coalesce(w.{c}, '(none)') AS {c}" for c in SLICE_COLUMNS)},
               w.top_retrieval_score, w.top_rerank_score, w.empty_retrieval, w.documents,
               CASE WHEN w.day = ? AND e.query IS NOT NULL THEN
                   len(list_intersect(coalesce(w.chunk_ids, []), e.chunk_ids))
                   / greatest(len(list_distinct(coalesce(w.chunk_ids, []) || e.chunk_ids)), 1) END AS overlap
        FROM window_traces w LEFT JOIN earlier e ON e.query = w.query AND w.day = ?""",
        [start, day, end, day, day]).df()
    today, before = traces[traces["day"] == pd.Timestamp(day)], traces[traces["day"] <= pd.Timestamp(end)]
    rows = []
    for dimension in ("all", *SLICE_COLUMNS):
        if dimension == "all":
            groups = [("all", today, before)]
        else:
            baseline_groups = dict(tuple(before.groupby(dimension)))
            groups = [(value, group, baseline_groups.get(value, before.iloc[:0]))
                      for value, group in today.groupby(dimension)]
        for value, now, base in groups:
            rows.append({"slice": dimension, "slice_value": str(value), **_retrieval_row(now, base)})
    return pd.DataFrame(rows)


def _retrieval_row(now: pd.DataFrame, base: pd.DataFrame) -> dict[str, Any]:
    rerank, base_rerank = now["top_rerank_score"].dropna(), base["top_rerank_score"].dropna()
    retrieval = now["top_retrieval_score"].dropna()
    ks, p_value = ks_test(rerank, base_rerank)
    q = lambda s, p: float(s.quantile(p)) if len(s) else np.nan  # noqa: E731
    overlap = now["overlap"].dropna()
    return {
        "n": len(now), "baseline_n": len(base),
        "retrieval_p10": q(retrieval, 0.1), "retrieval_p50": q(retrieval, 0.5), "retrieval_p90": q(retrieval, 0.9),
        "rerank_p10": q(rerank, 0.1), "rerank_p50": q(rerank, 0.5), "rerank_p90": q(rerank, 0.9),
        "baseline_rerank_p50": q(base_rerank, 0.5),
        "empty_rate": float(now["empty_retrieval"].mean()) if len(now) else np.nan,
        "baseline_empty_rate": float(base["empty_retrieval"].mean()) if len(base) else np.nan,
        "source_diversity": float(now["documents"].fillna(0).mean()) if len(now) else np.nan,
        "topk_overlap": float(overlap.mean()) if len(overlap) else np.nan,
        "ks_statistic": ks, "ks_pvalue": p_value,
        "rerank_psi": psi_continuous(rerank, base_rerank) if len(base_rerank) else np.nan,
    }


def freshness_figures(con: duckdb.DuckDBPyConnection, day: date, window: int,
                      slo_minutes: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(versions published on the day with their lag, per-slice stale retrieval rates).

    Lag = indexed_at − source_updated_at; a version not indexed by the end of the day counts
    with its lag so far. Stale retrieval: traces whose context used a superseded version.
    """
    end_of_day = pd.Timestamp(day, tz="UTC") + pd.Timedelta(days=1)
    versions = con.execute("""
        SELECT doc_id, version, source_updated_at, indexed_at,
               epoch(coalesce(indexed_at, ?::TIMESTAMPTZ) - source_updated_at) / 60 AS lag_minutes,
               indexed_at IS NULL OR indexed_at > ?::TIMESTAMPTZ AS unindexed_at_end_of_day
        FROM documents WHERE CAST(timezone('UTC', source_updated_at) AS DATE) = ?
        ORDER BY source_updated_at""", [end_of_day, end_of_day, day]).df()
    versions["within_slo"] = versions["lag_minutes"] <= slo_minutes
    start, _ = baseline_days(day, window)
    stale = con.execute(f"""
        SELECT slice, slice_value, count(*) FILTER (day = ?) AS n,
               avg(stale_source::INT) FILTER (day = ?) AS stale_rate,
               count(*) FILTER (day < ?) AS baseline_n,
               avg(stale_source::INT) FILTER (day < ?) AS baseline_stale_rate
        FROM (SELECT day, stale_source, 'all' AS slice, 'all' AS slice_value FROM trace_signals
              {"".join(f" UNION ALL SELECT day, stale_source, '{c}', coalesce({c}, '(none)') "
                       "FROM trace_signals" for c in SLICE_COLUMNS)})
        WHERE day BETWEEN ? AND ? GROUP BY ALL HAVING count(*) FILTER (day = ?) > 0
        ORDER BY 1, 2""", [day, day, day, day, start, day, day]).df()
    return versions, stale


def stale_documents(con: duckdb.DuckDBPyConnection, day: date) -> list[str]:
    """Documents whose newest published version was not in the index at the end of the day."""
    end_of_day = pd.Timestamp(day, tz="UTC") + pd.Timedelta(days=1)
    rows = con.execute("""
        SELECT doc_id || '@' || version FROM documents
        WHERE source_updated_at < ?::TIMESTAMPTZ AND (indexed_at IS NULL OR indexed_at >= ?::TIMESTAMPTZ)
        QUALIFY row_number() OVER (PARTITION BY doc_id ORDER BY source_updated_at DESC) = 1""",
        [end_of_day, end_of_day]).fetchall()
    return sorted(r[0] for r in rows)


def mix_counts(con: duckdb.DuckDBPyConnection, day: date, window: int,
               intents: pd.DataFrame | None = None, engine: Engine | None = None) -> pd.DataFrame:
    """Counts per day, dimension and value over the day and its baseline window: language,
    query_type, tenant, length bucket (on `engine`: rag_loop.engines.drift), plus intent
    cluster (and "(unplaced)") when `intents` (trace_id, cluster_id or None) is given for a
    sample of the traffic."""
    start, _ = baseline_days(day, window)
    counts = (engine or DuckDBEngine()).frame(con, MIX_INPUTS, mix_counts_expression,
                                              MixWindow(start, day, LENGTH_BUCKETS))
    parts = [counts]
    if intents is not None and len(intents):
        con.register("rag_loop_intents", intents)
        try:
            sampled = con.execute("SELECT s.day, i.cluster_id FROM trace_signals s JOIN rag_loop_intents i "
                                  "USING (trace_id) WHERE s.day BETWEEN ? AND ?", [start, day]).df()
        finally:
            con.unregister("rag_loop_intents")
        sampled["value"] = sampled["cluster_id"].fillna("(unplaced)")
        parts.append(sampled.groupby(["day", "value"]).size().rename("n").reset_index()
                     .assign(dimension="intent"))
    counts = pd.concat(parts, ignore_index=True)
    counts["day"] = pd.to_datetime(counts["day"]).dt.date
    return counts[["day", "dimension", "value", "n"]]


def mix_divergence(counts: pd.DataFrame, day: date, top_k: int = 5) -> pd.DataFrame:
    """Per dimension: the day's JS divergence and PSI against the pooled baseline, top movers."""
    rows = []
    for dimension, group in counts.groupby("dimension"):
        now = group[group["day"] == day].groupby("value")["n"].sum().to_dict()
        base = group[group["day"] < day].groupby("value")["n"].sum().to_dict()
        rows.append({"dimension": dimension, "n": int(sum(now.values())), "baseline_n": int(sum(base.values())),
                     "js_divergence": js_divergence(now, base) if base else np.nan,
                     "psi": psi(now, base) if base else np.nan,
                     "top_movers": top_movers(now, base, top_k) if base else []})
    return pd.DataFrame(rows)


def quality_figures(con: duckdb.DuckDBPyConnection, day: date, window: int,
                    outcomes: Sequence[str]) -> pd.DataFrame:
    """The unbiased (Horvitz-Thompson) daily rates of quality outcomes, whole traffic, with the
    trailing baseline's mean rate."""
    start, _ = baseline_days(day, window)
    return con.execute("""
        SELECT outcome, avg(ht_rate) FILTER (day = ?) AS rate,
               sum(selected_n) FILTER (day = ?) AS n, sum(random_n) FILTER (day = ?) AS random_n,
               sum(ht_rate * population_n) FILTER (day < ?) / sum(population_n) FILTER (day < ?)
                   AS baseline_rate, count(DISTINCT day) FILTER (day < ?) AS baseline_days
        FROM quality_estimates WHERE slice = 'all' AND outcome IN (SELECT unnest(?))
          AND day BETWEEN ? AND ? GROUP BY outcome ORDER BY outcome""",
        [day, day, day, day, day, day, list(outcomes), start, day]).df()
