"""Online evaluation: the selected production traces judged (`trace_judgments`), and judged
quality per day as SLIs with SLO checks (`online_quality`, daily like the drift assets)."""

import duckdb
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.evaluation.alignment import Alignment, load_alignment
from rag_loop.evaluation.few_shot import load_few_shot
from rag_loop.evaluation.judges.examples import FewShot
from rag_loop.evaluation.settings import OFFLINE_THRESHOLDS
from rag_loop.evaluation.trust import TrustSettings
from rag_loop.online.judgments import JudgingSettings, OnlineMetric
from rag_loop.online.quality import OnlineQualitySettings, online_quality_day
from rag_loop.selection.estimates import DEFAULT_SLICES, parse_slices
from rag_loop.selection.sampling import SamplingPolicy
from rag_loop_dagster.assets.daily import check_specs, daily, day_checks, series_chart
from rag_loop_dagster.assets.resources import (
    EmbedderResource,
    EngineResource,
    GEvalCriterion,
    JudgeResource,
    RagLoopPaths,
    config_entry,
)
from rag_loop_dagster.assets.selection import failure_candidates
from rag_loop_dagster.assets.stage import stage_asset


class OnlineMetricConfig(Config):
    name: str = Field(description="Faithfulness, Answer Relevancy or Contextual Relevancy.")
    threshold: float | None = Field(None, description="Pass threshold; null: monitoring only.")
    rate: float = Field(1.0, description="Share of the selected traces this metric judges.")


class OnlineGEvalConfig(GEvalCriterion):
    rate: float = 1.0
    evaluation_params: list[str] = ["input", "actual_output"]


DEFAULT_METRICS = [
    {"name": "Faithfulness", "threshold": OFFLINE_THRESHOLDS["Faithfulness"], "rate": 1.0},
    {"name": "Answer Relevancy", "threshold": OFFLINE_THRESHOLDS["Answer Relevancy"], "rate": 1.0},
    {"name": "Contextual Relevancy", "threshold": 0.5, "rate": 1.0},
]


class JudgeVersionConfig(Config):
    """What curators' grades make of a judge, set alike on trace_judgments and regression_eval:
    the same settings give the same judge version (and so the same trust floor)."""

    alignment: str = Field("", description='Thresholds fitted to curators\' grades: an alignment_id of '
                                           'judge_alignment, or "latest" (the newest that adopts one); '
                                           "a new judge version (online, it judges the selection again "
                                           "beside the old one). Empty: the configured thresholds.")
    few_shot: str = Field("", description='Curators\' graded examples in an LLM judge\'s verdict prompts: a '
                                          'few_shot_id of judge_few_shot, or "latest" (the newest adopted); '
                                          "a new judge version, as an alignment. Empty: none.")

    def from_grades(self, con: duckdb.DuckDBPyConnection) -> tuple[Alignment | None, FewShot | None]:
        """The stored alignment and examples these settings name; a ValueError names one not stored."""
        return load_alignment(con, self.alignment), load_few_shot(con, self.few_shot)


class JudgingConfig(JudgeVersionConfig):
    metrics: list[OnlineMetricConfig] = Field(DEFAULT_METRICS, description="Referenceless metrics.")
    geval: list[OnlineGEvalConfig] = Field([], description="Referenceless GEval criteria (no "
                                                           "expected_output); offline, none has a stand-in.")
    salt: str = "rag-loop-online"
    concurrency: int = Field(8, description="Traces judged at once (a remote judge keeps as many open as "
                                            "its max_in_flight calls, if more), each trace's metrics at once.")
    rejudge_days: int | None = Field(7, description="A new judge version re-judges what earlier versions "
                                                    "judged on the selection's last this many days only (the "
                                                    "overlap and the SLO window); older traces keep their "
                                                    "earlier verdicts, marked as such. Null: every day.")
    deadline_seconds: float | None = Field(3600.0, description="The run stops judging here; what is "
                                                               "left is judged by the next run.")
    max_error_rate: float = Field(0.05, description="Above this share of errored judgements the "
                                                    "run is marked over its error budget.")

    def settings(self, alignment: Alignment | None = None) -> JudgingSettings:
        metrics = [OnlineMetric(m["name"], m["threshold"], m["rate"]) for m in map(config_entry, self.metrics)]
        for spec in map(config_entry, self.geval):
            criterion = {k: v for k, v in spec.items() if k != "rate" and v not in ("", [])}
            metrics.append(OnlineMetric(f"{spec['name']} [GEval]", spec["threshold"], spec["rate"], criterion))
        return JudgingSettings(metrics, self.salt, self.concurrency, self.deadline_seconds,
                               self.max_error_rate, alignment=alignment, rejudge_days=self.rejudge_days)



@stage_asset(group_name="online", deps=[failure_candidates, "documents", "judge_few_shot_examples"],
             parts={"judgment_runs": "One row per judging run: planned, judged, unjudgeable, "
                                     "errored, cost, over its error budget or not; newly "
                                     "judgeable and still unjudgeable rows",
                    "judge_windows": "Per judge version, the first day it re-judges what earlier versions "
                                     "judged (fixed by its first run; older verdicts are kept)"},
             check_specs=[AssetCheckSpec("judge_error_budget", asset="trace_judgments",
                                         description="ERROR when the run's errored share is over "
                                                     "max_error_rate (errored cases are retried next run)."),
                          AssetCheckSpec("judge_changed_with_app", asset="trace_judgments",
                                         description="WARN when the judge version changed on the day a "
                                                     "new rag_version or prompt_version reached traffic "
                                                     "(seed §15: change one instrument at a time).")],
             description="The selected traces judged out of the request path: one row per trace × "
                         "metric × judge version (score, passed, reason, streams, π, cost, latency); "
                         "incremental, unjudgeable cases (no context, no answer) counted with "
                         "their reason, never scored, and judged by a later run once the input "
                         "appears (a knowledge base that resolves id-only chunks, a late span).")
def trace_judgments(context: AssetExecutionContext, config: JudgingConfig, duckdb: DuckDBResource,
                    judge: JudgeResource, embedder: EmbedderResource) -> MaterializeResult:
    from rag_loop.online.judgments import judge_traces, judgment_summary, rejudging  # imports DeepEval
    from rag_loop.online.overlap import changed_with_the_app, judge_shift
    with duckdb.get_connection() as con:
        try:
            alignment, few_shot = config.from_grades(con)
            settings = config.settings(alignment)
            shown = judge.judge(embedder).with_few_shot(few_shot)
        except ValueError as error:
            raise Failure(description=str(error)) from error
        run = judge_traces(con, shown, settings, log=context.log.info)
        summary, reasons, total = judgment_summary(con, run.judge_version)
        bound = rejudging(con, run.judge_version)
        shift = judge_shift(con, run.judge_version)
        confounded = changed_with_the_app(con, run.judge_version)
    over = run.over_error_budget(settings.max_error_rate)
    return MaterializeResult(metadata={
        "dagster/row_count": total, "run_id": run.run_id, "judge": run.judge_id,
        "judge_version": run.judge_version, "planned": run.planned, "judged": run.judged,
        "alignment": settings.alignment.alignment_id if settings.alignment else "none",
        "few_shot": few_shot.few_shot_id if few_shot is not None else "none",
        "unjudgeable": run.unjudgeable, "errored": run.errored, "unfinished": run.unfinished,
        "newly_judgeable": run.newly_judgeable, "still_unjudgeable": run.still_unjudgeable,
        "seconds": round(run.seconds, 2), "cost_usd": round(run.cost_usd, 6),
        "judgements_per_second": round((run.judged + run.errored) / run.seconds, 1) if run.seconds else 0.0,
        "per_metric": MetadataValue.md(summary.to_markdown(index=False) if len(summary) else "nothing judged"),
        "unjudgeable_reasons": MetadataValue.md(reasons.to_markdown(index=False) if len(reasons) else "none"),
        "rejudge_from": bound["rejudge_from"] or "every day",
        "rejudged": MetadataValue.md(bound["rejudged"].to_markdown(index=False) if len(bound["rejudged"])
                                     else "nothing an earlier version judged"),
        "kept_from_earlier_versions": MetadataValue.md(
            bound["kept"].to_markdown(index=False) if len(bound["kept"]) else "none: every earlier verdict "
            "in the selection was re-judged (or this is the first judge version)"),
        "judge_shift": MetadataValue.md(shift.round(4).to_markdown(index=False) if len(shift)
                                        else "one judge version: nothing to compare"),
    }, check_results=[
        AssetCheckResult(check_name="judge_error_budget", passed=not over, severity=AssetCheckSeverity.ERROR,
                         metadata={"error_rate": round(run.error_rate, 4), "errored": run.errored,
                                   "max_error_rate": settings.max_error_rate, "run_id": run.run_id}),
        AssetCheckResult(check_name="judge_changed_with_app", passed=not confounded,
                         severity=AssetCheckSeverity.WARN,
                         metadata={"judge_version": run.judge_version, "changes": MetadataValue.json(confounded)})])


class OnlineQualityConfig(Config):
    slices: list[str] = Field([",".join(d) for d in DEFAULT_SLICES if d],
                              description='Slice columns, e.g. "prompt_version,language".')
    slo_targets: dict[str, float] = Field({"Faithfulness": 0.9, "Answer Relevancy": 0.6},
                                          description="Lowest pass rate per metric over the window.")
    window_days: int = Field(7, description="The SLO's sliding window, ending on the day.")
    min_sample: int = Field(30, description="Fewer judged traces in a window × slice: no verdict.")
    slo_estimator: str = Field("random", description='"random" (the unbiased stream only) or '
                                                     '"horvitz_thompson" (every stream, weighted 1/π).')
    daily_budget_usd: float | None = Field(SamplingPolicy().daily_budget_usd,
                                           description="Evaluation cost per day; null: no check.")
    judge_version: str = Field("", description="Empty: the newest judging run's version.")
    trust_min_kappa: float = Field(0.6, description="The trust floor: a metric's judge agrees with "
                                                    "curators' grades at least this much (Cohen's kappa) ...")
    trust_min_grades: int = Field(30, description="... on at least this many graded verdicts.")
    untrusted_judge: str = Field("warn", description='A breach whose judge is under the floor: "warn" '
                                                     '(never ERROR: pages no one) or "block" (as before).')

    def settings(self) -> OnlineQualitySettings:
        return OnlineQualitySettings(parse_slices(self.slices), 0.95, dict(self.slo_targets),
                                     self.window_days, self.min_sample, self.slo_estimator,
                                     self.daily_budget_usd, self.judge_version or None,
                                     TrustSettings(self.trust_min_kappa, self.trust_min_grades, self.untrusted_judge))


_CHART_SQL = """PIVOT (SELECT day, metric || ' (' || estimator || ')' AS series, pass_rate
                      FROM online_quality WHERE slice = 'all' AND kind = 'estimate')
                ON series USING any_value(pass_rate) GROUP BY day ORDER BY day"""


@stage_asset(**daily("online"), deps=[trace_judgments, "trace_signals"],
             parts={"online_cost": "Per day: application cost and evaluation cost, apart"},
             check_specs=check_specs("online_quality", {
                 "online_slo": "SLO: judged pass rate per metric and slice over the sliding window "
                               "(random stream by default), silent below the minimum sample.",
                 "online_eval_budget": "The day's evaluation cost against the daily budget."}),
             description="Per day, slice and metric: the judged pass rate from the random stream "
                         "(n, Wilson), the Horvitz-Thompson estimate over every stream, and the "
                         "targeted streams' rates labelled as diagnostics; evaluation cost apart "
                         "from application cost.")
def online_quality(context: AssetExecutionContext, config: OnlineQualityConfig, duckdb: DuckDBResource,
                   engine: EngineResource, paths: RagLoopPaths) -> MaterializeResult:
    settings, on = config.settings(), engine.engine()
    with duckdb.get_connection() as con:
        return day_checks(context, ["online_slo", "online_eval_budget"],
                          lambda day: online_quality_day(con, day, settings, on), "online_quality",
                          lambda: series_chart(con, _CHART_SQL, None, "online_quality per day"),
                          paths.workspace("/dashboard#quality"))

