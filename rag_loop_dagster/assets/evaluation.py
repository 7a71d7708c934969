"""Stage 6: regression eval of a golden release with DeepEval metrics, as a gated quality vector."""

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetSelection,
    AssetSpec,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    define_asset_job,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.evaluation.alignment import Alignment
from rag_loop.evaluation.gates import Gate, failure_words, verdict
from rag_loop.evaluation.settings import (
    DEFAULT_GATES,
    DEFAULT_THRESHOLDS,
    EvalError,
    EvalSettings,
)
from rag_loop.evaluation.trust import TrustSettings
from rag_loop.reporting import plots
from rag_loop_dagster.assets.online import DEFAULT_METRICS, JudgeVersionConfig
from rag_loop_dagster.assets.resources import (
    DUCKDB_WRITER,
    EmbedderResource,
    JudgeResource,
    RagAppResource,
    RagLoopPaths,
    config_entry,
)
from rag_loop_dagster.assets.stage import FailAfterRecording, stage_asset

if TYPE_CHECKING:
    from rag_loop.evaluation.regression import RegressionReport  # DeepEval: only when scoring


class GateConfig(Config):
    metric: str
    min_pass_rate: float | None = None
    min_mean: float | None = None
    max_drop: float | None = Field(None, description="Largest allowed pass-rate drop vs the "
                                                     "baseline, in points of 1 (0.1 = 10 points).")
    slices: list[str] = ["all"]
    min_cases: int = 3
    blocking: bool = Field(True, description="Hard gate (ERROR, blocks) or monitoring (WARN).")
    without_baseline: Literal["warn", "block"] = Field(
        "warn", description="A drop with no baseline figure is not evaluated: say so (warn) or "
                            "fail the gate (block).")


class EvalConfig(JudgeVersionConfig):
    release: str = Field("latest", description='A release version (v0002) or "latest".')
    mode: str = Field("live", description='"live": ask the rag_app; "replay": score what '
                                          "production answered.")
    baseline_run: str = Field("", description="A run id; empty: the previous run on the release.")
    thresholds: dict[str, float] = Field(
        {k: v for k, v in DEFAULT_THRESHOLDS.items() if v is not None})
    monitoring_only: list[str] = Field(
        [k for k, v in DEFAULT_THRESHOLDS.items() if v is None],
        description="Metrics scored without a pass/fail verdict (threshold=None).")
    gates: list[GateConfig] = [{**g.__dict__, "slices": list(g.slices)} for g in DEFAULT_GATES]
    concurrency: int = 8
    deadline_seconds: float | None = Field(
        7200.0, description="The run ends at this limit (it holds the DuckDB writer) with what it has "
                            "scored; the cases left are errored and the run is blocked. Null: no limit.")
    max_error_rate: float = Field(0.05, description="Above this share of errored results the "
                                                    "run fails.")
    trust_min_kappa: float = Field(0.6, description="The trust floor: a graded metric's judge agrees with "
                                                    "curators at least this much (Cohen's kappa) ...")
    trust_min_grades: int = Field(30, description="... on at least this many graded verdicts.")
    untrusted_judge: Literal["warn", "block"] = Field(
        "warn", description="A failed gate whose judge is under the floor: reported, does not block "
                            "(warn), or blocks as before (block).")

    def settings(self, rag_app: RagAppResource, alignment: "Alignment | None" = None) -> EvalSettings:
        thresholds = {**self.thresholds, **dict.fromkeys(self.monitoring_only)}
        gates = [Gate(**{**values, "slices": tuple(values.get("slices", ("all",)))})
                 for values in map(config_entry, self.gates)]
        return EvalSettings(self.release, self.mode, rag_app.target(), dict(rag_app.config),
                            thresholds, gates, self.baseline_run or None, self.concurrency,
                            self.max_error_rate, deadline_seconds=self.deadline_seconds,
                            trust=TrustSettings(self.trust_min_kappa, self.trust_min_grades, self.untrusted_judge),
                            alignment=alignment)


# A run its hard gates block ends with a Failure saying why, after everything is recorded:
# Dagster's own error for a failed blocking check names only the check ("1 blocking asset check
# failed with ERROR severity: regression_eval: hard_gates"), and that is what the run's page showed.
@stage_asset(group_name="evaluation", deps=["golden_releases", "judge_calibrations", "judge_few_shot_examples"],
       parts={"eval_runs": "One row per eval run: release, target, judge, calibration, verdict",
              "eval_results": "Score per case × metric of each run",
              "eval_summary": "Per run, metric and slice: mean, median, pass rate, p10, deltas",
              "eval_flips": "Cases that flipped from pass to fail against the baseline run",
              "judge_cache": "Validated judge replies by prompt hash (a rerun pays nothing)"},
       check_specs=[AssetCheckSpec("hard_gates", asset="regression_eval", blocking=True,
                                   description="Blocking gates (ERROR): a failure fails the run; the "
                                               "evaluation's description says which gate, on which slice, "
                                               "by how much against the baseline."),
                    AssetCheckSpec("monitoring_gates", asset="regression_eval",
                                   description="Monitoring gates (WARN)."),
                    AssetCheckSpec("gates_evaluated", asset="regression_eval",
                                   description="WARN when a gate could not be evaluated (no "
                                               "baseline run, or a slice the baseline lacks).")],
       description="Scores the golden release on the rag_app with the judge's metrics: per case × "
                   "metric, then per metric and slice (mean, median, pass rate, p10, severe), "
                   "compared with the baseline run; stored in eval_runs / eval_results / "
                   "eval_summary / eval_flips. A run its hard gates block fails, its error saying "
                   "which gates and by how much.")
def regression_eval(context: AssetExecutionContext, config: EvalConfig, duckdb: DuckDBResource,
                    paths: RagLoopPaths, rag_app: RagAppResource, judge: JudgeResource,
                    embedder: EmbedderResource) -> MaterializeResult | FailAfterRecording:
    report, result = _evaluate(context, config, duckdb, paths, rag_app, judge, embedder)
    if not report.blocked:
        return result
    return FailAfterRecording(result, Failure(description=verdict(report.failures, report.baseline_note), metadata={
        "run_id": report.run_id, "report": result.metadata["report"],
        "failed_gates": MetadataValue.md("\n".join(f"- {failure_words(f)}" for f in report.failures
                                                   if f["blocking"]))}))


def _evaluate(context: AssetExecutionContext, config: EvalConfig, duckdb: DuckDBResource,
              paths: RagLoopPaths, rag_app: RagAppResource, judge: JudgeResource,
              embedder: EmbedderResource) -> "tuple[RegressionReport, MaterializeResult]":
    from rag_loop.evaluation.regression import (
        run_regression,  # DeepEval: only when scoring
    )
    from rag_loop.reporting.reports import eval_report, export_eval_results
    from rag_loop.store.releases import read_goldens
    try:
        with duckdb.get_connection() as con:
            try:  # as trace_judgments: the same settings give the same judge version
                alignment, few_shot = config.from_grades(con)
                shown = judge.judge(embedder).with_few_shot(few_shot)
            except ValueError as error:
                raise EvalError(str(error)) from error
            settings = config.settings(rag_app, alignment)
            report = run_regression(con, Path(paths.goldens_dir), shown, settings,
                                    log=context.log.info,
                                    app=rag_app.app() if settings.mode == "live" else None)
            page = eval_report(con, report.run_id, Path(paths.reports_dir))
            export_eval_results(con, report.run_id, read_goldens(Path(paths.goldens_dir), report.release),
                                Path(paths.reports_dir))  # the workspace compares runs from it
            results = con.execute("SELECT * FROM eval_results WHERE run_id = ?", [report.run_id]).df()
            before = con.execute("SELECT * FROM eval_results WHERE run_id = ?",
                                 [report.baseline_run_id]).df() if report.baseline_run_id else None
    except EvalError as error:
        raise Failure(description=str(error)) from error
    overall = report.table[report.table["slice"] == "all"].set_index("metric")
    vector = overall[["n", "errored", "mean", "median", "pass_rate", "p10", "severe",
                      "delta_mean", "delta_pass_rate"]].round(3)
    metadata = {
        "verdict": verdict(report.failures, report.baseline_note),  # first: what the asset's page shows on top
        "report": MetadataValue.path(str(page)), "report_url": paths.workspace(f"/reports/{page.name}"),
        "in_workspace": paths.workspace(f"/evals/{report.run_id}"),
        "dagster/row_count": len(report.table), "run_id": report.run_id, "release": report.release,
        "baseline_run_id": report.baseline_run_id or "none", "cases": report.cases,
        "baseline_judge": report.baseline_note or ("the same judge version" if report.baseline_run_id
                                                   else "no baseline run"),
        "judge_version": report.judge_version, "alignment": report.alignment_id or "none",
        "few_shot": report.few_shot_id or "none",
        "errored": report.errored, "seconds": round(report.seconds, 2),
        "judge_calls": report.usage.calls, "judge_cache_hits": report.usage.cache_hits,
        "judge_tokens": report.usage.input_tokens + report.usage.output_tokens,
        "judge_cost_usd": round(report.usage.cost_usd, 6),
        **{f"{_key(m)}_{k}": float(round(r[k], 4)) for m, r in overall.iterrows()
           for k in ("mean", "pass_rate") if pd.notna(r[k])},
        "quality_vector": MetadataValue.md(vector.to_markdown()),
        "by_language": MetadataValue.md(plots.markdown_image(
            plots.quality_heatmap(report.table, "language"), "quality by language")),
        "scores_vs_baseline": MetadataValue.md(plots.markdown_image(
            plots.score_histograms(results, before), "score histograms")),
        "compare_in_workspace": paths.workspace(f"/evals/{report.run_id}"),
        "flipped_cases": MetadataValue.md(
            report.flipped[["metric", "input", "baseline_score", "score"]].head(20).to_markdown(index=False)
            if len(report.flipped) else "no case flipped from pass to fail"),
    }
    metadata["judge_trust"] = MetadataValue.md(pd.DataFrame([
        {"metric": t.metric, "judge": t.status, "kappa": t.kappa, "ci_low": t.ci_low, "ci_high": t.ci_high,
         "grades": t.n, "why": t.why} for t in report.trust.values()]).round(3).to_markdown(index=False)
        if report.trust else "no trust floor")
    unevaluated = [{"metric": o.gate.metric, **u} for o in report.gates for u in o.not_evaluated]
    metadata["gates_not_evaluated"] = len(unevaluated)
    checks = [_gate_check(report, blocking=True), _gate_check(report, blocking=False),
              AssetCheckResult(check_name="gates_evaluated", passed=not unevaluated,
                               severity=AssetCheckSeverity.WARN, metadata={
                                   "not_evaluated": len(unevaluated),
                                   "baseline_run_id": report.baseline_run_id or "none",
                                   **({"baseline_judge": report.baseline_note} if report.baseline_note else {}),
                                   "details": MetadataValue.md(pd.DataFrame(unevaluated).to_markdown(index=False)
                                                               if unevaluated else "every gate evaluated")})]
    return report, MaterializeResult(asset_key="regression_eval", metadata=metadata, check_results=checks)


def _gate_check(report: "RegressionReport", blocking: bool) -> AssetCheckResult:
    """The hard (or monitoring) gates' check: every failure of that kind, the run's own
    (deadline, errored results) with the hard ones; its description says which, in words."""
    outcomes = [o for o in report.gates if o.gate.blocking == blocking]
    failures = [f for f in report.failures if f["blocking"] == blocking]
    table = pd.DataFrame(failures).drop(columns="blocking", errors="ignore")
    if blocking:
        description = verdict(failures, report.baseline_note)
    else:
        description = ("monitoring gates: " + "; ".join(map(failure_words, failures)) if failures
                       else "every monitoring gate passes")
    return AssetCheckResult(
        check_name="hard_gates" if blocking else "monitoring_gates",
        passed=not failures,
        severity=AssetCheckSeverity.ERROR if blocking else AssetCheckSeverity.WARN,
        description=description,
        metadata={"verdict" if blocking else "summary": description,
                  "gates": len(outcomes), "failed": len({f["metric"] for f in failures}),
                  "run_id": report.run_id,
                  "failures": MetadataValue.md(table.to_markdown(index=False) if failures else "all gates pass"),
                  "failed_gates": MetadataValue.json(failures),
                  "flipped_cases": len(report.flipped)})


def _key(metric: str) -> str:
    return metric.lower().replace(" [geval]", "").replace(" ", "_")



judge_calibrations = AssetSpec(
    "judge_calibrations", group_name="evaluation", kinds={"duckdb"},
    description="The judge against human labels, one row per `rag-loop calibrate FILE` run "
                "(written by the CLI, outside Dagster); each eval run records the latest.")
judge_few_shot = AssetSpec(
    "judge_few_shot", group_name="evaluation", kinds={"duckdb"}, deps=["current_labels"],
    description="Curators' graded verdicts tried as an LLM judge's few-shot examples, one row per "
                "measurement and metric: the examples, kappa without and with them on held-out grades "
                "only, adopted or not and why. Written by `rag-loop few-shot` (it pays the endpoint), "
                "outside Dagster.")
judge_few_shot_examples = AssetSpec(
    "judge_few_shot_examples", group_name="evaluation", kinds={"duckdb"}, deps=["judge_few_shot"],
    description="The adopted examples of each few_shot_id, as the judge shows them; trace_judgments' and "
                "regression_eval's `few_shot` setting reads them (a new judge version).")

# the online judge's thresholds by default: what an alignment starts from where the judged rows
# do not say (they record the threshold of each verdict)
ONLINE_THRESHOLDS = {m["name"]: m["threshold"] for m in DEFAULT_METRICS}
AGREEMENT_MIN_KAPPA = 0.6  # seed 004 §15: below this, the instrument needs recalibration
AGREEMENT_MIN_N = 30


@stage_asset(group_name="evaluation", deps=["current_labels", "judge_calibrations"],
             parts={"judge_grade_agreement": "The judge against curators' grades of its verdicts: per "
                                             "metric, judge version and language, n, Cohen's kappa "
                                             "and its 95% interval",
                    "judge_agreement": "Curators against the suggestion and, as a proxy, the judge "
                                       "(failure_type generation against an unfaithful score)",
                    "judge_alignment": "Pass thresholds fitted to curators' grades per metric and "
                                       "language, with Cohen's kappa before and after on held-out "
                                       "grades (cross-validation); an alignment_id the judge can adopt"},
       check_specs=[AssetCheckSpec("curator_agreement", asset="judge_calibration",
                                   description=f"WARN when a metric and judge version graded by curators "
                                               f"n >= {AGREEMENT_MIN_N} times has Cohen's kappa < "
                                               f"{AGREEMENT_MIN_KAPPA} (all languages); the failure_type "
                                               "proxy is reported apart and checks nothing.")],
       description="The judge against curators: their grades of its verdicts on the trace page "
                   "(`judge_grade_agreement`: per metric, judge version and language, kappa with n "
                   "and interval, also exported for the workspace's dashboard); apart, the old "
                   "failure_type proxy and the suggestion (`judge_agreement`); the judge against a "
                   "labelled file is `rag-loop calibrate` (`judge_calibrations`).")
def judge_calibration(duckdb: DuckDBResource, paths: RagLoopPaths) -> MaterializeResult:
    from rag_loop.evaluation.agreement import (
        AGREEMENT_FILE,
        ALL_LANGUAGES,
        curator_agreement,
        export_grade_agreement,
        store_grade_agreement,
    )
    from rag_loop.evaluation.alignment import store_alignment
    with duckdb.get_connection() as con:
        graded = store_grade_agreement(con)
        proxies = curator_agreement(con, DEFAULT_THRESHOLDS["Faithfulness"])
        aligned, alignment = store_alignment(con, ONLINE_THRESHOLDS)
    export_grade_agreement(graded, Path(paths.reports_dir) / AGREEMENT_FILE)
    overall = graded[graded["language"] == ALL_LANGUAGES] if len(graded) else graded
    weak = [f"{r.metric} ({r.judge_version})" for r in overall.itertuples()
            if r.n >= AGREEMENT_MIN_N and pd.notna(r.kappa) and r.kappa < AGREEMENT_MIN_KAPPA]
    proxy = pd.DataFrame([{"comparison": c.comparison, "n": c.n, "kappa": c.kappa, "agreement": c.agreement}
                          for c in proxies])
    shown = graded[["metric", "judge_version", "language", "n", "kappa", "ci_low", "ci_high", "agreement"]]
    return MaterializeResult(
        metadata={"dagster/row_count": len(graded), "grades": int(overall["n"].sum()) if len(overall) else 0,
                  "agreement_with_curators": MetadataValue.md(
                      shown.round(3).to_markdown(index=False) if len(shown) else
                      "no grades yet: curators grade the judge's verdicts on the workspace's trace page"),
                  **{f"kappa_{_key(r.metric)}": float(round(r.kappa, 4)) for r in overall.itertuples()
                     if pd.notna(r.kappa) and r.judge_version == _most_graded(overall, r.metric)},
                  **{f"n_{_key(r.metric)}": int(r.n) for r in overall.itertuples()
                     if r.judge_version == _most_graded(overall, r.metric)},
                  "proxy_agreement": MetadataValue.md(
                      "Not grades: failure_type against what the curator was shown (reported apart, "
                      "checks nothing)\n\n" + proxy.to_markdown(index=False)),
                  "in_workspace": paths.workspace("/dashboard#agreement"),
                  "alignment_id": alignment.alignment_id,
                  "alignment_adopted": MetadataValue.json({**alignment.thresholds, **{
                      f"{m} ({language})": t for m, by in alignment.by_language.items()
                      for language, t in by.items()}}),
                  "alignment": MetadataValue.md(
                      aligned[["metric", "language", "n", "current_threshold", "fitted_threshold", "kappa_before",
                               "kappa_after", "adopted", "why"]].round(3).to_markdown(index=False)
                      if len(aligned) else "no grades to fit a threshold to"),
                  "alignment_note": "kappa before/after are on held-out grades (5-fold cross-validation); "
                                    f"adopt with trace_judgments' alignment: {alignment.alignment_id!r} or 'latest'"},
        check_results=[AssetCheckResult(
            check_name="curator_agreement", passed=not weak, severity=AssetCheckSeverity.WARN,
            metadata={"weak": MetadataValue.json(weak)})])


def _most_graded(overall: pd.DataFrame, metric: str) -> str:
    """The judge version of a metric with the most grades (the one curators work with)."""
    rows = overall[overall["metric"] == metric]
    return str(rows.sort_values(["n", "judge_version"], ascending=False).iloc[0]["judge_version"])


regression_eval_job = define_asset_job(
    "regression_eval_job", tags=DUCKDB_WRITER, selection=AssetSelection.assets(regression_eval),
    description="Evaluate a golden release on the rag_app with the judge; gates as asset checks.")
