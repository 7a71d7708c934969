"""Stage 2: bad signals on every trace, sampling streams, and honest quality estimates."""


from dagster import (
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    asset,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.reporting import plots
from rag_loop.selection.estimates import (
    DEFAULT_SLICES,
    estimate_inputs,
    parse_slices,
    pooled_rates,
    update_estimates,
)
from rag_loop.selection.novelty import NoveltySettings, detect_novelty
from rag_loop.selection.sampling import SamplingPolicy, candidate_inputs, select_candidates, selection_summary
from rag_loop.selection.signals import (
    SIGNALS,
    SignalSettings,
    compute_signals,
    signal_counts,
    signal_coverage,
    signal_inputs,
)
from rag_loop_dagster.assets.resources import EmbedderResource, EngineResource
from rag_loop_dagster.assets.stage import changed_days, stored_in

_SIGNAL_DEFAULTS = SignalSettings()
_POLICY_DEFAULTS = SamplingPolicy()
_NOVELTY_DEFAULTS = NoveltySettings()


class SignalConfig(Config):
    low_rerank_threshold: float = Field(_SIGNAL_DEFAULTS.low_rerank_threshold,
                                        description="Top rerank score below this is low.")
    rephrase_window_seconds: float = Field(_SIGNAL_DEFAULTS.rephrase_window_seconds,
                                           description="Next turn within this many seconds.")
    rephrase_similarity: float = Field(_SIGNAL_DEFAULTS.rephrase_similarity,
                                       description="Word Jaccard of a near-paraphrase.")
    latency_budget_ms: float = Field(_SIGNAL_DEFAULTS.latency_budget_ms)


@asset(group_name="selection", deps=["raw_traces", "trace_chunks", "trace_feedback", "documents", "trace_lake"],
       description="One row per trace: each bad signal as a boolean column, plus the list (on the "
                   "engine resource: DuckDB, or Spark over the trace lake).")
def trace_signals(context: AssetExecutionContext, config: SignalConfig, duckdb: DuckDBResource,
                  engine: EngineResource) -> MaterializeResult:
    settings, on = SignalSettings(**config.model_dump()), engine.engine()
    with duckdb.get_connection() as con:
        computed = changed_days(context, con, duckdb.database, "trace_signals", signal_inputs(con, settings),
                                lambda days: compute_signals(con, settings, on, days=days))
        traces = con.execute("SELECT count(*) FROM trace_signals").fetchall()[0][0]
        where = stored_in(con, "trace_signals")
        counts = signal_counts(con)
        coverage = signal_coverage(con)
        documents = con.execute("SELECT count(*) FROM documents").fetchall()[0][0]
        unknown = con.execute("SELECT count(*) FILTER (retrieval_unknown) FROM trace_signals").fetchall()[0][0]
        preview = con.sql("SELECT s.trace_id, s.day, s.language, s.query_type, s.signals, "
                          "t.original_query FROM trace_signals s JOIN raw_traces t USING (trace_id) "
                          "ORDER BY s.signal_count DESC, s.trace_id LIMIT 10").df()
    chart = plots.bars({k: v for k, v in counts.items() if k != "any_signal"},
                       "Traces per bad signal", "traces")
    return MaterializeResult(metadata={
        "dagster/row_count": traces, **computed, "stored_in": where,
        **{f"signal_{name}": n for name, n in counts.items()},
        "any_signal_share": counts["any_signal"] / traces if traces else 0.0,
        "retrieval_unknown": unknown,  # unreadable retrieval output: not counted as empty
        # per signal, the traces that carried what it reads; on the others it is unknown (false)
        **{f"computable_{name}": n for name, n in coverage.items()},
        "stale_source": (f"checked against {documents} document versions" if documents
                         else "no KB: stale_source is never flagged"),
        "signals": MetadataValue.md(plots.markdown_image(chart, "signals")),
        "preview": MetadataValue.md(preview.to_markdown(index=False))})


class NoveltyConfig(Config):
    window_days: int = Field(_NOVELTY_DEFAULTS.window_days,
                             description="Earlier days a day's queries are compared with.")
    min_history_days: int = Field(_NOVELTY_DEFAULTS.min_history_days,
                                  description="Days with fewer earlier days are not judged.")
    daily_sample: int = Field(_NOVELTY_DEFAULTS.daily_sample,
                              description="Queries per day and language clustered.")
    new_cluster_share: float = Field(_NOVELTY_DEFAULTS.new_cluster_share,
                                     description="A cluster with this share of its members from "
                                                 "the judged day is a new intent.")
    rate: float = Field(_NOVELTY_DEFAULTS.rate, description="Novelty stream rate of a novel query.")


@asset(group_name="selection", deps=["raw_traces", "trace_lake"],
       description="Per day and sampled query: is it of an intent the trailing window did not "
                   "have (clustered with it; earlier days only)? The novelty stream's input.")
def trace_novelty(context: AssetExecutionContext, config: NoveltyConfig, duckdb: DuckDBResource,
                  embedder: EmbedderResource, engine: EngineResource) -> MaterializeResult:
    with duckdb.get_connection() as con:
        report = detect_novelty(con, embedder.router(), NoveltySettings(**config.model_dump()),
                                 log=context.log.info, engine=engine.engine())
        preview = con.sql("SELECT n.day, n.language, n.cluster_size, t.original_query FROM "
                          "trace_novelty n JOIN raw_traces t USING (trace_id) WHERE n.novel "
                          "ORDER BY n.day DESC, n.cluster_size DESC, n.trace_id LIMIT 15").df()
    return MaterializeResult(metadata={
        "dagster/row_count": report.judged, "novel": report.novel,
        "sampled": report.sampled,
        "days_judged": report.days_judged,
        "days_judged_this_run": report.days_judged_this_run,
        "days_without_history": ", ".join(report.days_without_history) or "none",
        "novel_per_day": MetadataValue.json(report.novel_per_day),
        "preview": MetadataValue.md(preview.to_markdown(index=False))})


class SamplingConfig(Config):
    salt: str = Field(_POLICY_DEFAULTS.salt, description="Change it to draw a new sample.")
    random_rate: float = Field(_POLICY_DEFAULTS.random_rate,
                               description="Uniform stream: the only unbiased one.")
    signal_rates: dict[str, float] = Field(dict(_POLICY_DEFAULTS.signal_rates),
                                           description=f"Rate per signal: {', '.join(SIGNALS)}.")
    query_type_rates: dict[str, float] = Field(dict(_POLICY_DEFAULTS.query_type_rates))
    risk_level_rates: dict[str, float] = Field(dict(_POLICY_DEFAULTS.risk_level_rates))
    judge_cost_usd: float = Field(_POLICY_DEFAULTS.judge_cost_usd,
                                  description="Cost of judging one selected trace.")
    daily_budget_usd: float | None = Field(
        _POLICY_DEFAULTS.daily_budget_usd,
        description="Daily judging budget: it bounds every stream. Null: no cap.")
    random_budget_share: float | None = Field(
        _POLICY_DEFAULTS.random_budget_share,
        description="Share of the budget's traces the random stream keeps at most when the diagnostic "
                    "streams need the rest (its smallest draws; its rate lowered and recorded). 1.0: it may "
                    "take all of it; null: never thinned, a day may cost more than the budget.")
    high_risk_query_types: list[str] = Field(list(_POLICY_DEFAULTS.high_risk_query_types),
                                             description="Query types whose failures are P0.")

    def policy(self) -> SamplingPolicy:
        values = self.model_dump()
        values["high_risk_query_types"] = tuple(values["high_risk_query_types"])
        return SamplingPolicy(**values)


@asset(group_name="selection", deps=[trace_signals, trace_novelty],
       description="Traces chosen for judging and curation: streams, inclusion probability π, "
                   "priority before judging (P0 high-risk, P1 thumbs-down plus another signal, P2 "
                   "novel, P3 random); the queue's P1 is thumbs-down with low judged faithfulness. "
                   "On the engine resource.")
def failure_candidates(context: AssetExecutionContext, config: SamplingConfig, duckdb: DuckDBResource,
                       engine: EngineResource) -> MaterializeResult:
    policy, on = config.policy(), engine.engine()
    with duckdb.get_connection() as con:
        computed = changed_days(context, con, duckdb.database, "failure_candidates", candidate_inputs(con, policy),
                                lambda days: select_candidates(con, policy, on, days=days))
        summary = selection_summary(con, policy)
        where = stored_in(con, "failure_candidates")
        selected_signals = con.sql(
            "SELECT s AS signal, count(*) AS selected FROM "
            "(SELECT unnest(signals) AS s FROM failure_candidates) GROUP BY 1 ORDER BY 2 DESC").df()
        per_day = con.sql(
            "SELECT day, count(*) AS selected, count(*) FILTER (by_random) AS random, "
            "round(min(thinning), 3) AS thinning, round(avg(inclusion_probability), 3) AS mean_pi "
            "FROM failure_candidates GROUP BY 1 ORDER BY 1").df()
    return MaterializeResult(metadata={
        "dagster/row_count": summary["selected"], **summary, **computed, "stored_in": where,
        **{f"selected_{row.signal}": int(row.selected) for row in selected_signals.itertuples()},
        "sampling_policy": policy.fingerprint(),
        "policy": MetadataValue.json(config.model_dump()),
        "per_day": MetadataValue.md(per_day.to_markdown(index=False))})


class EstimateConfig(Config):
    slices: list[str] = Field([",".join(d) for d in DEFAULT_SLICES if d],
                              description='Slice columns, e.g. "language" or '
                                          '"prompt_version,language"; the whole population is '
                                          "always included.")
    confidence: float = Field(0.95, description="Wilson interval level of the random stream.")


@asset(group_name="selection", deps=[failure_candidates],
       description="Failure rate per day, slice and signal: random stream (Wilson interval), "
                   "Horvitz-Thompson (1/π) and, labelled biased, the naive selected-set rate.")
def quality_estimates(context: AssetExecutionContext, config: EstimateConfig, duckdb: DuckDBResource,
                      engine: EngineResource) -> MaterializeResult:
    slices, on = parse_slices(config.slices), engine.engine()
    with duckdb.get_connection() as con:
        computed = changed_days(context, con, duckdb.database, "quality_estimates",
                                estimate_inputs(con, slices, config.confidence),
                                lambda days: update_estimates(con, slices, config.confidence, on, days))
        estimates = con.execute("SELECT * FROM quality_estimates ORDER BY day, slice, slice_value, outcome").df()
    pooled = pooled_rates(estimates)
    overall = estimates[(estimates["slice"] == "all") & (estimates["outcome"] == "any_signal")]
    preview = overall[["day", "population_rate", "random_n", "random_rate", "random_ci_low",
                       "random_ci_high", "ht_rate", "naive_rate_biased"]].round(3)
    chart = plots.time_series(overall.assign(day=overall["day"].astype(str)),
                              ["population_rate", "random_rate", "ht_rate", "naive_rate_biased"],
                              "Any bad signal: exact, random stream, Horvitz-Thompson, naive (biased)")
    return MaterializeResult(metadata={
        "dagster/row_count": len(estimates), **computed,
        "estimators": MetadataValue.md(plots.markdown_image(chart, "estimators")),
        **{f"any_signal_{name}": value for name, value in pooled.items()},
        "any_signal_per_day": MetadataValue.md(preview.to_markdown(index=False))})
