"""Drift assets: daily partitions of query mix, knowledge freshness, retrieval scores and quality
SLIs, each with an absolute-SLO check and a baseline check (WARN / ERROR from config)."""

import os
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    BackfillPolicy,
    Config,
    DailyPartitionsDefinition,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    ScheduleEvaluationContext,
    asset,
    define_asset_job,
    schedule,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from assets.resources import DUCKDB_WRITER, EmbedderResource
from assets.selection import quality_estimates, trace_novelty, trace_signals
from assets.stage import stage_asset
from rag_loop.drift.checks import Limit, Verdict
from rag_loop.drift.days import (
    FreshnessSettings,
    QualitySettings,
    QueryMixSettings,
    RetrievalSettings,
    freshness_day,
    quality_day,
    query_mix_day,
    retrieval_day,
)
from rag_loop.reporting import plots
from rag_loop.reporting.dashboard import change_markers

# partitions are part of the definitions, so the first day is read when the code location
# loads: set RAG_LOOP_DRIFT_START to the first day of your traffic (`make demo`: 2026-11-01)
DAILY = DailyPartitionsDefinition(start_date=os.environ.get("RAG_LOOP_DRIFT_START", "2026-01-01"))
DRIFT_CRON = os.environ.get("RAG_LOOP_DRIFT_CRON", "30 1 * * *")  # after the day closes, UTC
_common = {"group_name": "drift", "partitions_def": DAILY, "backfill_policy": BackfillPolicy.single_run()}


def _limit(config: Config, prefix: str, higher_is_bad: bool = True) -> Limit:
    """A Limit from flat config fields `<prefix>_warn`, `<prefix>_error` and `min_sample`."""
    return Limit(getattr(config, f"{prefix}_warn"), getattr(config, f"{prefix}_error"),
                 higher_is_bad, config.min_sample)


def _days(context: AssetExecutionContext) -> list[date]:
    return [datetime.strptime(key, "%Y-%m-%d").date() for key in context.partition_keys]


SERIES = {  # the chart of each drift asset: SQL over its table, the columns drawn
    "query_mix": (("SELECT day, js_divergence AS query_type_js FROM query_mix WHERE dimension = "
                   "'query_type' ORDER BY day"), ["query_type_js"]),
    "freshness_lag": ("SELECT day, stale_rate FROM stale_retrieval WHERE slice = 'all' ORDER BY day",
                      ["stale_rate"]),
    "retrieval_scores": (("SELECT day, rerank_p50, retrieval_p50, ks_statistic, topk_overlap FROM "
                          "retrieval_scores WHERE slice = 'all' ORDER BY day"),
                         ["rerank_p50", "retrieval_p50", "ks_statistic", "topk_overlap"]),
    "quality_slis": (("PIVOT (SELECT day, outcome, rate FROM quality_slis) ON outcome "
                      "USING any_value(rate) GROUP BY day ORDER BY day"), None),
}


def _chart(con, table: str) -> dict:
    """The asset's figure over every stored day, with deploy / prompt / index / document markers."""
    sql, columns = SERIES[table]
    frame = con.execute(sql).df()
    if frame.empty:
        return {}
    columns = columns or [c for c in frame.columns if c != "day"]
    png = plots.time_series(frame, columns, f"{table} per day", change_markers(con))
    return {"over_time": MetadataValue.md(plots.markdown_image(png, table))}


def _result(context: AssetExecutionContext, check_names: Sequence[str],
            run_day: Callable[[date], list[Verdict]], table: str, con=None) -> MaterializeResult:
    """Run every day of the partition range; one check result per check over those days."""
    by_check: dict[str, list[tuple[date, Verdict]]] = {name: [] for name in check_names}
    for day in _days(context):
        for verdict in run_day(day):
            by_check[verdict.name].append((day, verdict))
        context.log.info(f"{table}: {day} done")
    checks, fired_days = [], set()
    for name, verdicts in by_check.items():
        fired = [(d, v) for d, v in verdicts if v.fired]
        fired_days.update(d for d, _ in fired)
        worst = "ERROR" if any(v.severity == "ERROR" for _, v in fired) else "WARN"
        rows = pd.DataFrame([{"day": str(d), "value": v.value, "n": v.n, "fired": v.fired,
                              "severity": v.severity or "", "note": v.note} for d, v in verdicts])
        last = verdicts[-1][1] if verdicts else None
        checks.append(AssetCheckResult(
            check_name=name, passed=not fired,
            severity=AssetCheckSeverity.ERROR if worst == "ERROR" else AssetCheckSeverity.WARN,
            metadata={"days": len(verdicts), "days_fired": [str(d) for d, _ in fired],
                      "n": last.n if last else 0, "value": last.value if last and last.value is not None else -1.0,
                      "per_day": MetadataValue.md(rows.to_markdown(index=False) if len(rows) else "-"),
                      "details": MetadataValue.json({str(d): v.details for d, v in verdicts})}))
    return MaterializeResult(metadata={"days": len(_days(context)), "table": table,
                                       "days_with_alerts": sorted(str(d) for d in fired_days),
                                       **(_chart(con, table) if con is not None else {})},
                             check_results=checks)


def _specs(asset_name: str, checks: dict[str, str]) -> list[AssetCheckSpec]:
    return [AssetCheckSpec(name, asset=asset_name, description=text) for name, text in checks.items()]


_MIX, _FRESH, _RETRIEVAL = QueryMixSettings(), FreshnessSettings(), RetrievalSettings()


class QueryMixConfig(Config):
    baseline_days: int = Field(_MIX.baseline_days, description="Trailing days the day is compared with.")
    intent_sample: int = Field(_MIX.intent_sample, description="Queries of the day placed in intent clusters.")
    divergence_warn: float = Field(_MIX.divergence.warn, description="Jensen-Shannon divergence of "
                                                                     "the worst mix dimension.")
    divergence_error: float = _MIX.divergence.error
    novel_share_warn: float = Field(_MIX.novel_share.warn,
                                    description="Share of the day's queries of intents new that "
                                                "day (trace_novelty).")
    novel_share_error: float = _MIX.novel_share.error
    min_sample: int = Field(_MIX.divergence.min_sample, description="Fewer queries: no alert.")


@stage_asset(**_common, deps=["raw_traces", trace_signals, trace_novelty, "intent_clusters"],
             parts={"query_mix_counts": "Per day, dimension and value: query counts",
                    "traffic_intents": "Per day: the sampled queries and the intent cluster each "
                                       "was placed in (clusters first seen before the day)"},
       check_specs=_specs("query_mix", {
           "query_mix_divergence": "Baseline: JS divergence of language / query_type / tenant / "
                                   "length mix against the trailing window.",
           "query_mix_novel_share": "SLO: share of the day's queries of intents new that day "
                                    "(trace_novelty: none in the trailing window)."}),
       description="Per day: the mix over language, query_type, tenant, length bucket and intent "
                   "cluster (the day's traffic placed in the clusters first seen before it), the "
                   "share of queries of new intents, JS and PSI against the baseline window and "
                   "the top movers.")
def query_mix(context: AssetExecutionContext, config: QueryMixConfig, duckdb: DuckDBResource,
              embedder: EmbedderResource) -> MaterializeResult:
    settings = QueryMixSettings(config.baseline_days, config.intent_sample,
                                _limit(config, "divergence"), _limit(config, "novel_share"))
    with duckdb.get_connection() as con:
        return _result(context, ["query_mix_divergence", "query_mix_novel_share"],
                       lambda day: query_mix_day(con, day, embedder.router(), settings, context.log.info),
                       "query_mix", con)


class FreshnessConfig(Config):
    baseline_days: int = _FRESH.baseline_days
    slo_minutes: float = Field(_FRESH.slo_minutes, description="A source update should be indexed "
                                                               "within this many minutes.")
    slo_share: float = Field(_FRESH.within_slo.warn, description="Share of updates that must meet "
                                                                 "slo_minutes.")
    stale_rate_warn: float = Field(_FRESH.stale_rate.warn, description="Stale retrieval rate.")
    stale_rate_error: float = _FRESH.stale_rate.error
    stale_increase_warn: float = Field(_FRESH.stale_increase.warn,
                                       description="Stale retrieval rate increase vs baseline.")
    stale_increase_error: float = _FRESH.stale_increase.error
    min_sample: int = _FRESH.stale_rate.min_sample


@stage_asset(**_common, deps=["documents", "trace_chunks", trace_signals],
             parts={"freshness_daily": "Per day: lag percentiles, share within the SLO, stale "
                                       "documents",
                    "stale_retrieval": "Per day and slice: stale retrieval rate vs baseline"},
       check_specs=_specs("freshness_lag", {
           "freshness_within_slo": "SLO: share of the day's source updates indexed within the window.",
           "stale_retrieval_rate": "SLO: share of traces that used an outdated document version.",
           "stale_retrieval_vs_baseline": "Baseline: increase of the stale retrieval rate."}),
       description="Per day: freshness lag (indexed_at − source_updated_at) of the versions "
                   "published, p50/p95/max, share within the SLO, documents still stale at the end "
                   "of the day, and the stale retrieval rate per slice (incl. index_version).")
def freshness_lag(context: AssetExecutionContext, config: FreshnessConfig,
                  duckdb: DuckDBResource) -> MaterializeResult:
    settings = FreshnessSettings(config.baseline_days, config.slo_minutes,
                                 Limit(config.slo_share, config.slo_share, False, 1),
                                 _limit(config, "stale_rate"), _limit(config, "stale_increase"))
    with duckdb.get_connection() as con:
        return _result(context, ["freshness_within_slo", "stale_retrieval_rate",
                                 "stale_retrieval_vs_baseline"],
                       lambda day: freshness_day(con, day, settings), "freshness_lag", con)


class RetrievalConfig(Config):
    baseline_days: int = _RETRIEVAL.baseline_days
    empty_rate_warn: float = Field(_RETRIEVAL.empty_rate.warn, description="Empty retrieval rate.")
    empty_rate_error: float = _RETRIEVAL.empty_rate.error
    ks_warn: float = Field(_RETRIEVAL.ks_statistic.warn,
                           description="KS statistic of the top-1 rerank score vs baseline.")
    ks_error: float = _RETRIEVAL.ks_statistic.error
    ks_max_pvalue: float = Field(_RETRIEVAL.ks_max_pvalue, description="A shift must be significant.")
    min_sample: int = _RETRIEVAL.ks_statistic.min_sample


@asset(**_common, deps=[trace_signals],
       check_specs=_specs("retrieval_scores", {
           "retrieval_empty_rate": "SLO: share of requests with no retrieved chunk.",
           "retrieval_score_shift": "Baseline: two-sample KS (and PSI) of the top-1 rerank score."}),
       description="Per day and slice (incl. index_version): p10/p50/p90 of top-1 retrieval and "
                   "rerank scores, empty retrieval rate, source diversity, top-k overlap of "
                   "repeated queries, KS and PSI against the baseline window.")
def retrieval_scores(context: AssetExecutionContext, config: RetrievalConfig,
                     duckdb: DuckDBResource) -> MaterializeResult:
    settings = RetrievalSettings(config.baseline_days, _limit(config, "empty_rate"),
                                 _limit(config, "ks"), config.ks_max_pvalue)
    with duckdb.get_connection() as con:
        return _result(context, ["retrieval_empty_rate", "retrieval_score_shift"],
                       lambda day: retrieval_day(con, day, settings), "retrieval_scores", con)


class QualityConfig(Config):
    baseline_days: int = 7
    slos: dict[str, float] = Field(dict(QualitySettings().slos),
                                   description="Highest daily failure rate per quality SLI "
                                               "(Horvitz-Thompson estimate); ERROR at error_factor ×.")
    max_increase: dict[str, float] = Field(dict(QualitySettings().max_increase),
                                           description="Largest increase vs the baseline, in points of 1.")
    error_factor: float = 2.0
    min_sample: int = 30


@asset(**_common, deps=[quality_estimates],
       check_specs=_specs("quality_slis", {
           "quality_slo": "SLO: each quality SLI's unbiased daily rate under its limit.",
           "quality_vs_baseline": "Baseline: no quality SLI rises more than allowed."}),
       description="Per day: quality SLIs (timeout, no citation, fallback, stale source, empty "
                   "retrieval rates) from the unbiased estimates only, with the baseline rate.")
def quality_slis(context: AssetExecutionContext, config: QualityConfig,
                 duckdb: DuckDBResource) -> MaterializeResult:
    settings = QualitySettings(config.baseline_days, config.slos, config.max_increase,
                               config.error_factor, config.min_sample)
    with duckdb.get_connection() as con:
        return _result(context, ["quality_slo", "quality_vs_baseline"],
                       lambda day: quality_day(con, day, settings), "quality_slis", con)


DRIFT_ASSETS = [query_mix, freshness_lag, retrieval_scores, quality_slis]
drift_job = define_asset_job("drift_job", selection=DRIFT_ASSETS, partitions_def=DAILY,
                             tags=DUCKDB_WRITER,
                             description="The day's drift figures and SLO checks.")


@schedule(job=drift_job, cron_schedule=DRIFT_CRON, execution_timezone="UTC",
          description="Every day (cron from RAG_LOOP_DRIFT_CRON), the drift of the day that ended.")
def drift_schedule(context: ScheduleEvaluationContext):
    day = (context.scheduled_execution_time - timedelta(days=1)).strftime("%Y-%m-%d")
    return RunRequest(run_key=f"drift-{day}", partition_key=day)
