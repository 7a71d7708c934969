"""The drift stage on the database: one day's figures stored (replacing that day's rows, so a
rerun of a day is idempotent) and the day's verdicts against SLOs and the baseline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date

import duckdb
import numpy as np
import pandas as pd

from rag_loop.drift.checks import Limit, Verdict, assess
from rag_loop.drift.figures import (
    freshness_figures,
    mix_counts,
    mix_divergence,
    quality_figures,
    retrieval_figures,
    stale_documents,
)
from rag_loop.engines.engine import Engine
from rag_loop.intents.placement import assign_intents
from rag_loop.logs import Log, quiet
from rag_loop.store.tables import has_table, replace_day


@dataclass(frozen=True)
class QueryMixSettings:
    baseline_days: int = 7
    intent_sample: int = 5000  # queries of the day placed in intent clusters
    divergence: Limit = Limit(warn=0.05, error=0.10, min_sample=100)  # JS, per dimension
    novel_share: Limit = Limit(warn=0.05, error=0.15, min_sample=100)  # queries of new intents
    alert_dimensions: tuple[str, ...] = ("language", "query_type", "tenant", "length")


def query_mix_day(con: duckdb.DuckDBPyConnection, day: date, router, settings: QueryMixSettings,
                  log: Log = quiet, engine: Engine | None = None) -> list[Verdict]:
    """Store the day's mix and divergences; verdicts: divergence (baseline) and the share of
    queries of intents new that day (SLO).

    The intent dimension places the day's traffic in the clusters first seen before the day
    (no look-ahead); its novel share is `trace_novelty`'s, the same judgement the selection
    stage's novelty stream draws on.
    """
    intents = assign_intents(con, router, day, settings.intent_sample, log) \
        if has_table(con, "intent_clusters") else None
    if intents is not None:
        replace_day(con, "traffic_intents", day, intents)
        intents = con.execute("SELECT trace_id, cluster_id FROM traffic_intents WHERE day BETWEEN "
                              "? - INTERVAL (?) DAY AND ?", [day, settings.baseline_days, day]).df()
    counts = mix_counts(con, day, settings.baseline_days, intents, engine)
    replace_day(con, "query_mix_counts", day, counts[counts["day"] == day].drop(columns="day"))
    divergence = mix_divergence(counts, day)
    novel_share, judged = _novel_share(con, day)
    divergence["novel_share"] = np.where(divergence["dimension"] == "intent",
                                         np.nan if novel_share is None else novel_share, np.nan)
    stored = divergence.assign(top_movers=divergence["top_movers"].map(json.dumps))
    replace_day(con, "query_mix", day, stored)
    alerting = divergence[divergence["dimension"].isin(settings.alert_dimensions)]
    worst = alerting.sort_values("js_divergence", ascending=False).head(1)
    verdicts = []
    if len(worst) and worst["baseline_n"].iloc[0] > 0:
        row = worst.iloc[0]
        verdicts.append(assess("query_mix_divergence", float(row["js_divergence"]), int(row["n"]),
                              settings.divergence, dimension=row["dimension"],
                              psi=round(float(row["psi"]), 4), movers=row["top_movers"][:3]))
    else:
        verdicts.append(assess("query_mix_divergence", None, 0, settings.divergence))
    verdicts.append(assess("query_mix_novel_share", novel_share, judged, settings.novel_share))
    return verdicts


def _novel_share(con: duckdb.DuckDBPyConnection, day: date) -> tuple[float | None, int]:
    """Share of the day's judged queries that are of a new intent, and how many were judged."""
    if not has_table(con, "trace_novelty"):
        return None, 0
    share, judged = con.execute("SELECT avg(novel::INT), count(*) FROM trace_novelty WHERE day = ?",
                                [day]).fetchall()[0]
    return share, judged


@dataclass(frozen=True)
class FreshnessSettings:
    baseline_days: int = 7
    slo_minutes: float = 15.0
    within_slo: Limit = Limit(warn=0.95, error=0.95, higher_is_bad=False, min_sample=1)
    stale_rate: Limit = Limit(warn=0.01, error=0.05, min_sample=30)
    stale_increase: Limit = Limit(warn=0.01, error=0.03, min_sample=30)  # points vs baseline


def freshness_day(con: duckdb.DuckDBPyConnection, day: date, settings: FreshnessSettings,
                  engine: Engine | None = None) -> list[Verdict]:
    """Store lags of the versions published on the day, stale documents and stale retrieval
    rates per slice; verdicts: share within the SLO window, stale retrieval (SLO, baseline)."""
    versions, stale = freshness_figures(con, day, settings.baseline_days, settings.slo_minutes, engine)
    replace_day(con, "freshness_lag", day, versions)
    lags = versions["lag_minutes"]
    documents = stale_documents(con, day)
    summary = pd.DataFrame([{
        "versions": len(versions), "lag_p50_minutes": lags.median() if len(lags) else np.nan,
        "lag_p95_minutes": lags.quantile(0.95) if len(lags) else np.nan,
        "lag_max_minutes": lags.max() if len(lags) else np.nan,
        "within_slo_share": versions["within_slo"].mean() if len(lags) else np.nan,
        "stale_documents": json.dumps(documents)}])
    replace_day(con, "freshness_daily", day, summary)
    replace_day(con, "stale_retrieval", day, stale)
    overall = stale[stale["slice"] == "all"]
    rate = float(overall["stale_rate"].iloc[0]) if len(overall) else None
    base = overall["baseline_stale_rate"].iloc[0] if len(overall) else np.nan
    n = int(overall["n"].iloc[0]) if len(overall) else 0
    by_index = stale[stale["slice"] == "index_version"][["slice_value", "n", "stale_rate"]]
    return [
        assess("freshness_within_slo", float(summary["within_slo_share"].iloc[0]), len(versions),
              settings.within_slo, lags_minutes=[round(x, 1) for x in lags],
              versions=[f"{d}@{v}" for d, v in zip(versions["doc_id"], versions["version"])],
              stale_documents=documents),
        assess("stale_retrieval_rate", rate, n, settings.stale_rate,
              by_index_version=by_index.round(4).to_dict("records")),
        assess("stale_retrieval_vs_baseline", None if pd.isna(base) or rate is None else rate - base, n,
              settings.stale_increase, baseline_rate=None if pd.isna(base) else round(float(base), 4)),
    ]


@dataclass(frozen=True)
class RetrievalSettings:
    baseline_days: int = 7
    empty_rate: Limit = Limit(warn=0.05, error=0.10, min_sample=100)
    ks_statistic: Limit = Limit(warn=0.15, error=0.25, min_sample=100)
    ks_max_pvalue: float = 0.01  # a shift must also be significant


def retrieval_day(con: duckdb.DuckDBPyConnection, day: date, settings: RetrievalSettings,
                  engine: Engine | None = None) -> list[Verdict]:
    """Store the day's retrieval figures per slice; verdicts: empty retrieval rate (SLO),
    top-1 rerank score distribution shift (KS + PSI against the baseline)."""
    figures = retrieval_figures(con, day, settings.baseline_days, engine)
    replace_day(con, "retrieval_scores", day, figures)
    row = figures[figures["slice"] == "all"].iloc[0] if len(figures) else None
    if row is None:
        return [assess("retrieval_empty_rate", None, 0, settings.empty_rate),
                assess("retrieval_score_shift", None, 0, settings.ks_statistic)]
    shift = float(row["ks_statistic"]) if row["baseline_n"] and row["ks_pvalue"] <= settings.ks_max_pvalue \
        else (0.0 if row["baseline_n"] else None)
    slices = figures[(figures["slice"] != "all") & (figures["n"] >= settings.ks_statistic.min_sample)]
    worst = slices.sort_values("ks_statistic", ascending=False).head(3)
    return [
        assess("retrieval_empty_rate", float(row["empty_rate"]), int(row["n"]), settings.empty_rate),
        assess("retrieval_score_shift", shift, int(row["n"]), settings.ks_statistic,
              ks_pvalue=float(row["ks_pvalue"]), rerank_psi=round(float(row["rerank_psi"]), 4),
              rerank_p50=round(float(row["rerank_p50"]), 4),
              baseline_rerank_p50=round(float(row["baseline_rerank_p50"]), 4),
              topk_overlap=None if pd.isna(row["topk_overlap"]) else round(float(row["topk_overlap"]), 3),
              most_shifted=[f"{s}={v} (KS {k:.2f})" for s, v, k in
                            zip(worst["slice"], worst["slice_value"], worst["ks_statistic"])]),
    ]


@dataclass(frozen=True)
class QualitySettings:
    baseline_days: int = 7
    # absolute SLO per quality SLI (Horvitz-Thompson daily failure rate); ERROR at twice the rate
    slos: Mapping[str, float] = field(default_factory=lambda: {
        "timeout": 0.03, "no_citation": 0.02, "fallback": 0.10, "stale_source": 0.01,
        "empty_retrieval": 0.05})
    max_increase: Mapping[str, float] = field(default_factory=lambda: {
        "timeout": 0.03, "no_citation": 0.02, "fallback": 0.04, "stale_source": 0.01,
        "empty_retrieval": 0.03})
    error_factor: float = 2.0
    min_sample: int = 30


def quality_day(con: duckdb.DuckDBPyConnection, day: date, settings: QualitySettings) -> list[Verdict]:
    """Store the day's quality SLIs (unbiased estimates only); verdicts: the worst SLI against
    its SLO, and the largest increase against the baseline."""
    outcomes = sorted(set(settings.slos) | set(settings.max_increase))
    figures = quality_figures(con, day, settings.baseline_days, outcomes)
    figures["increase"] = figures["rate"] - figures["baseline_rate"]
    replace_day(con, "quality_slis", day, figures)
    verdicts = []
    for name, limits, column in (("quality_slo", settings.slos, "rate"),
                                 ("quality_vs_baseline", settings.max_increase, "increase")):
        checked = [(o, assess(f"{name}:{o}", _value(r[column]), int(r["n"] or 0),
                             Limit(limits[o], limits[o] * settings.error_factor,
                                   min_sample=settings.min_sample)))
                   for o, r in figures.set_index("outcome").iterrows() if o in limits]
        fired = [v for _, v in checked if v.fired]
        details = {o: (None if v.value is None else round(v.value, 4)) for o, v in checked}
        if fired:
            worst = max(fired, key=lambda v: (v.severity == "ERROR", v.value))
            verdicts.append(Verdict(name, worst.value, worst.n, True, worst.severity,
                                    "; ".join(f"{v.name.split(':')[1]}: {v.note}" for v in fired), details))
        else:
            n = max((v.n for _, v in checked), default=0)
            evaluated = any(v.evaluated for _, v in checked)
            verdicts.append(Verdict(name, None, n, note="within limits" if evaluated else "not enough data",
                                    details=details, evaluated=evaluated))
    return verdicts


def _value(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)
