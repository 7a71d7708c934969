"""Drift figures of one day against its trailing baseline window, computed from the trace tables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, timedelta

import duckdb
import numpy as np
import pandas as pd

from rag_loop.drift.query_mix_expressions import INPUTS as MIX_INPUTS
from rag_loop.drift.query_mix_expressions import MixWindow, mix_counts_expression
from rag_loop.drift.retrieval_expressions import (
    RETRIEVAL_INPUTS,
    STALE_INPUTS,
    DriftWindow,
    retrieval_expression,
    stale_expression,
)
from rag_loop.drift.stats import js_divergence, ks_from_distance, psi, top_movers
from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.store.ddl import utc_day

RETRIEVAL_COLUMNS = [
    "slice", "slice_value", "n", "baseline_n", "retrieval_p10", "retrieval_p50", "retrieval_p90",
    "rerank_p10", "rerank_p50", "rerank_p90", "baseline_rerank_p50", "empty_rate", "baseline_empty_rate",
    "source_diversity", "topk_overlap", "ks_statistic", "ks_pvalue", "rerank_psi"]
LENGTH_BUCKETS = ((1, 3, "1-3 words"), (4, 7, "4-7 words"), (8, 15, "8-15 words"), (16, 10**6, "16+ words"))


def baseline_days(day: date, days: int) -> tuple[date, date]:
    return day - timedelta(days=days), day - timedelta(days=1)


def retrieval_figures(con: duckdb.DuckDBPyConnection, day: date, window: int,
                      engine: Engine | None = None) -> pd.DataFrame:
    """Per slice of the day: quantiles of top-1 retrieval and rerank scores, empty retrieval
    rate, source diversity, top-k overlap with the baseline for repeated queries, and KS / PSI
    of the top-1 rerank score against the baseline window (on `engine`: rag_loop.drift.retrieval_expressions)."""
    start, end = baseline_days(day, window)
    figures = (engine or DuckDBEngine()).frame(con, RETRIEVAL_INPUTS, retrieval_expression,
                                                DriftWindow(start, end, day))
    if not (figures["slice"] == "all").any():  # no trace in the window at all
        figures = pd.concat([pd.DataFrame([{"slice": "all", "slice_value": "all", "n": 0, "baseline_n": 0}]),
                             figures], ignore_index=True)
    ks = [ks_from_distance(d, int(n or 0), int(m or 0)) for d, n, m in
          zip(figures["ks_d"], figures["rerank_n"].fillna(0), figures["baseline_rerank_n"].fillna(0))]
    figures["ks_statistic"], figures["ks_pvalue"] = [k for k, _ in ks], [p for _, p in ks]
    return figures[RETRIEVAL_COLUMNS].astype({c: float for c in RETRIEVAL_COLUMNS[4:]}).reset_index(drop=True)


def freshness_figures(con: duckdb.DuckDBPyConnection, day: date, window: int, slo_minutes: float,
                      engine: Engine | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(versions published on the day with their lag, per-slice stale retrieval rates).

    Lag = indexed_at − source_updated_at; a version not indexed by the end of the day counts
    with its lag so far; a version whose knowledge base gives no index times (a folder of
    files) has no lag and is left out. Stale retrieval: traces whose context used a superseded version (on
    `engine`: rag_loop.drift.retrieval_expressions); the documents table is small and read here.
    """
    end_of_day = pd.Timestamp(day, tz="UTC") + pd.Timedelta(days=1)
    versions = con.execute(f"""
        SELECT doc_id, version, source_updated_at, indexed_at,
               epoch(coalesce(indexed_at, ?::TIMESTAMPTZ) - source_updated_at) / 60 AS lag_minutes,
               indexed_at IS NULL OR indexed_at > ?::TIMESTAMPTZ AS unindexed_at_end_of_day
        FROM documents WHERE {utc_day('source_updated_at')} = ? AND indexed_at_known IS NOT false
        ORDER BY source_updated_at""", [end_of_day, end_of_day, day]).df()
    versions["within_slo"] = versions["lag_minutes"] <= slo_minutes
    start, end = baseline_days(day, window)
    stale = (engine or DuckDBEngine()).frame(con, STALE_INPUTS, stale_expression, DriftWindow(start, end, day))
    return versions, stale


def stale_documents(con: duckdb.DuckDBPyConnection, day: date) -> list[str]:
    """Documents whose newest published version was not in the index at the end of the day (of
    those whose knowledge base gives index times)."""
    end_of_day = pd.Timestamp(day, tz="UTC") + pd.Timedelta(days=1)
    rows = con.execute("""
        SELECT doc_id || '@' || version FROM documents
        WHERE source_updated_at < ?::TIMESTAMPTZ AND (indexed_at IS NULL OR indexed_at >= ?::TIMESTAMPTZ)
          AND indexed_at_known IS NOT false
        QUALIFY row_number() OVER (PARTITION BY doc_id ORDER BY source_updated_at DESC) = 1""",
        [end_of_day, end_of_day]).fetchall()
    return sorted(r[0] for r in rows)


def mix_counts(con: duckdb.DuckDBPyConnection, day: date, window: int,
               intents: pd.DataFrame | None = None, engine: Engine | None = None) -> pd.DataFrame:
    """Counts per day, dimension and value over the day and its baseline window: language,
    query_type, tenant, length bucket (on `engine`: rag_loop.drift.query_mix_expressions), plus intent
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
    return pd.DataFrame(rows, columns=["dimension", "n", "baseline_n", "js_divergence", "psi", "top_movers"])


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
