"""Drift assets: daily partitions of query mix, knowledge freshness, retrieval scores and quality
SLIs, each with an absolute-SLO check and a baseline check (WARN / ERROR from config)."""

from collections.abc import Callable
from datetime import timedelta

from dagster import (
    AssetExecutionContext,
    AssetSelection,
    Config,
    MaterializeResult,
    RunRequest,
    ScheduleEvaluationContext,
    asset,
    define_asset_job,
    schedule,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.drift.checks import Limit
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
from rag_loop_dagster.assets.coverage import golden_coverage
from rag_loop_dagster.assets.daily import DAILY, DRIFT_CRON, check_specs, daily, day_checks, series_chart
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, EmbedderResource, EngineResource, RagLoopPaths
from rag_loop_dagster.assets.selection import quality_estimates, trace_novelty, trace_signals
from rag_loop_dagster.assets.stage import stage_asset

_common = daily("drift")


def _limit(config: Config, prefix: str, higher_is_bad: bool = True) -> Limit:
    """A Limit from flat config fields `<prefix>_warn`, `<prefix>_error` and `min_sample`."""
    return Limit(getattr(config, f"{prefix}_warn"), getattr(config, f"{prefix}_error"),
                 higher_is_bad, config.min_sample)


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


def _chart(con, table: str) -> Callable[[], dict]:
    sql, columns = SERIES[table]
    return lambda: series_chart(con, sql, columns, f"{table} per day")


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
       check_specs=check_specs("query_mix", {
           "query_mix_divergence": "Baseline: JS divergence of language / query_type / tenant / "
                                   "length mix against the trailing window.",
           "query_mix_novel_share": "SLO: share of the day's queries of intents new that day "
                                    "(trace_novelty: none in the trailing window)."}),
       description="Per day: the mix over language, query_type, tenant, length bucket and intent "
                   "cluster (the day's traffic placed in the clusters first seen before it), the "
                   "share of queries of new intents, JS and PSI against the baseline window and "
                   "the top movers.")
def query_mix(context: AssetExecutionContext, config: QueryMixConfig, duckdb: DuckDBResource,
              embedder: EmbedderResource, engine: EngineResource, paths: RagLoopPaths) -> MaterializeResult:
    settings = QueryMixSettings(config.baseline_days, config.intent_sample,
                                _limit(config, "divergence"), _limit(config, "novel_share"))
    on = engine.engine()
    with duckdb.get_connection() as con:
        return day_checks(context, ["query_mix_divergence", "query_mix_novel_share"],
                          lambda day: query_mix_day(con, day, embedder.router(), settings, context.log.info, on),
                          "query_mix", _chart(con, "query_mix"), paths.workspace("/dashboard#change"))


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
       check_specs=check_specs("freshness_lag", {
           "freshness_within_slo": "SLO: share of the day's source updates indexed within the window.",
           "stale_retrieval_rate": "SLO: share of traces that used an outdated document version.",
           "stale_retrieval_vs_baseline": "Baseline: increase of the stale retrieval rate."}),
       description="Per day: freshness lag (indexed_at − source_updated_at) of the versions "
                   "published, p50/p95/max, share within the SLO, documents still stale at the end "
                   "of the day, and the stale retrieval rate per slice (incl. index_version).")
def freshness_lag(context: AssetExecutionContext, config: FreshnessConfig, duckdb: DuckDBResource,
                  engine: EngineResource, paths: RagLoopPaths) -> MaterializeResult:
    settings = FreshnessSettings(config.baseline_days, config.slo_minutes,
                                 Limit(config.slo_share, config.slo_share, False, 1),
                                 _limit(config, "stale_rate"), _limit(config, "stale_increase"))
    on = engine.engine()
    with duckdb.get_connection() as con:
        return day_checks(context, ["freshness_within_slo", "stale_retrieval_rate",
                                    "stale_retrieval_vs_baseline"],
                          lambda day: freshness_day(con, day, settings, on), "freshness_lag",
                          _chart(con, "freshness_lag"), paths.workspace("/dashboard#change"))


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
       check_specs=check_specs("retrieval_scores", {
           "retrieval_empty_rate": "SLO: share of requests with no retrieved chunk.",
           "retrieval_score_shift": "Baseline: two-sample KS (and PSI) of the top-1 rerank score."}),
       description="Per day and slice (incl. index_version): p10/p50/p90 of top-1 retrieval and "
                   "rerank scores, empty retrieval rate, source diversity, top-k overlap of "
                   "repeated queries, KS and PSI against the baseline window.")
def retrieval_scores(context: AssetExecutionContext, config: RetrievalConfig, duckdb: DuckDBResource,
                     engine: EngineResource, paths: RagLoopPaths) -> MaterializeResult:
    settings = RetrievalSettings(config.baseline_days, _limit(config, "empty_rate"),
                                 _limit(config, "ks"), config.ks_max_pvalue)
    on = engine.engine()
    with duckdb.get_connection() as con:
        return day_checks(context, ["retrieval_empty_rate", "retrieval_score_shift"],
                          lambda day: retrieval_day(con, day, settings, on), "retrieval_scores",
                          _chart(con, "retrieval_scores"), paths.workspace("/dashboard#change"))


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
       check_specs=check_specs("quality_slis", {
           "quality_slo": "SLO: each quality SLI's unbiased daily rate under its limit.",
           "quality_vs_baseline": "Baseline: no quality SLI rises more than allowed."}),
       description="Per day: quality SLIs (timeout, no citation, fallback, stale source, empty "
                   "retrieval rates) from the unbiased estimates only, with the baseline rate.")
def quality_slis(context: AssetExecutionContext, config: QualityConfig,
                 duckdb: DuckDBResource, paths: RagLoopPaths) -> MaterializeResult:
    settings = QualitySettings(config.baseline_days, config.slos, config.max_increase,
                               config.error_factor, config.min_sample)
    with duckdb.get_connection() as con:
        return day_checks(context, ["quality_slo", "quality_vs_baseline"],
                          lambda day: quality_day(con, day, settings), "quality_slis",
                          _chart(con, "quality_slis"), paths.workspace("/dashboard#quality"))


DRIFT_ASSETS = [query_mix, freshness_lag, retrieval_scores, quality_slis]
drift_job = define_asset_job("drift_job", partitions_def=DAILY, tags=DUCKDB_WRITER,
                             selection=AssetSelection.assets(*DRIFT_ASSETS, golden_coverage, "online_quality",
                                                             "online_cost"),
                             description="The day's drift figures, judged quality, golden coverage "
                                         "and SLO checks.")


@schedule(job=drift_job, cron_schedule=DRIFT_CRON, execution_timezone="UTC",
          description="Every day (cron from RAG_LOOP_DRIFT_CRON), the drift of the day that ended.")
def drift_schedule(context: ScheduleEvaluationContext):
    day = (context.scheduled_execution_time - timedelta(days=1)).strftime("%Y-%m-%d")
    return RunRequest(run_key=f"drift-{day}", partition_key=day)
