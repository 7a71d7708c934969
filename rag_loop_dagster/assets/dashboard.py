"""The workspace dashboard's figures (`dashboard.json` in the reports folder): the four layers of
seed 004 §10 per day, read from the tables of the loop, and the drift, SLO and golden coverage
checks that fired (from this instance's check history). Materialized with the loop, and again by a
sensor after each drift or coverage run, golden release and regression eval, so the page follows
the day."""

from pathlib import Path

from dagster import (
    AssetCheckKey,
    AssetExecutionContext,
    AssetSelection,
    DagsterInstance,
    DagsterRunStatus,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    asset,
    define_asset_job,
    run_status_sensor,
)
from dagster_duckdb import DuckDBResource

from rag_loop.reporting.dashboard_figures import dashboard_figures, write_dashboard
from rag_loop_dagster.assets.coverage import coverage_job, golden_coverage
from rag_loop_dagster.assets.drift import DRIFT_ASSETS, drift_job
from rag_loop_dagster.assets.evaluation import regression_eval_job
from rag_loop_dagster.assets.goldens import release_goldens
from rag_loop_dagster.assets.online import OnlineQualityConfig, online_quality
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, RagLoopPaths

WATCHED = [*DRIFT_ASSETS, online_quality, golden_coverage]  # their checks are the dashboard's alerts
HISTORY = 200  # executions read per check


def _entry(metadata, name: str):
    value = metadata.get(name)
    return getattr(value, "value", value)


def check_alerts(instance: DagsterInstance, check_keys: list[AssetCheckKey]) -> tuple[list[dict], bool]:
    """Per day, each watched check that fired on it, as its latest execution covering that day
    said (the check's severity is the run's worst), and whether any of them ever ran."""
    fired: dict[tuple[str, str, str], dict] = {}
    ran = False
    for key in check_keys:
        records = instance.event_log_storage.get_asset_check_execution_history(key, limit=HISTORY)
        for record in reversed(records):  # oldest first: a later run of a day replaces it
            evaluation = record.event.dagster_event.event_specific_data \
                if record.event and record.event.dagster_event else None
            metadata = getattr(evaluation, "metadata", None)
            if metadata is None or "details" not in metadata:
                continue
            ran = True
            days, on = list(_entry(metadata, "details") or {}), set(_entry(metadata, "days_fired") or [])
            for day in days:
                index = (day, key.asset_key.to_user_string(), key.name)
                if day in on:
                    fired[index] = {"day": day, "asset": index[1], "check": key.name,
                                    "severity": evaluation.severity.value, "note": evaluation.description or ""}
                else:
                    fired.pop(index, None)
    return list(fired.values()), ran


@asset(group_name="dashboard",
       deps=["raw_traces", "trace_feedback", "trace_signals", "failure_candidates", "trace_judgments",
             "online_quality", "online_cost", "golden_releases", "eval_runs",
             "query_mix", "freshness_lag", "retrieval_scores", "quality_slis", "golden_coverage"],
       kinds={"duckdb", "json"},
       description="The workspace dashboard's figures per day (dashboard.json in the reports folder): "
                   "product (traffic, feedback), quality (judged pass rates with intervals, the SLO's "
                   "state, by slice), performance (latency, cost, evaluation cost), change (versions "
                   "first served, drift, SLO and golden coverage checks fired, golden releases, evals).")
def dashboard(context: AssetExecutionContext, config: OnlineQualityConfig, duckdb: DuckDBResource,
              paths: RagLoopPaths) -> MaterializeResult:
    """`config`: the online quality SLO (the same fields as online_quality's; set both alike)."""
    keys = [key for a in WATCHED for key in a.check_keys]
    alerts, checked = check_alerts(context.instance, keys)
    with duckdb.get_connection() as con:
        figures = dashboard_figures(con, config.settings(), alerts, checked)
    path = write_dashboard(figures, Path(paths.reports_dir))
    quality = figures["quality"]
    return MaterializeResult(metadata={
        "dashboard_in_workspace": paths.workspace("/dashboard"),
        "file": MetadataValue.path(str(path)),
        "days": len(figures["product"]["traffic"]),
        "first_day": figures["first_day"] or "none", "last_day": figures["last_day"] or "none",
        "judged_days": len({r["day"] for r in quality["pass_rates"]}),
        "slo_days_breached": sum(s["state"] in ("WARN", "ERROR") for s in quality["slo"]),
        "alerts": len(alerts), "releases": len(figures["change"]["releases"]),
        "evals": len(figures["change"]["evals"])})


dashboard_job = define_asset_job("dashboard_job", selection=AssetSelection.assets(dashboard), tags=DUCKDB_WRITER,
                                 description="The workspace dashboard's figures, again.")


@run_status_sensor(run_status=DagsterRunStatus.SUCCESS,
                   monitored_jobs=[drift_job, coverage_job, regression_eval_job, release_goldens],
                   request_job=dashboard_job, name="dashboard_after_runs",
                   description="After a drift or coverage run, a golden release or a regression eval succeeds, the "
                               "dashboard's figures are made again.")
def dashboard_after_runs(context):
    return RunRequest(run_key=f"dashboard-after-{context.dagster_run.run_id}")
