"""The one Definitions object of rag-loop (loaded by workspace.yaml)."""

import gc
from collections.abc import Mapping

# Every process that loads the definitions (the code server, each run worker, rag-loop's jobs)
# creates some 200k objects here that live as long as it does (Dagster, pandas, Ibis, the
# assets). Python's full collections walk all of them, a few times while they load (a fifth of
# the load's CPU) and again and again in a run that allocates: no collection while they load,
# then they are moved out of the collector's sight (gc.freeze; the little garbage of the
# imports stays with them).
_collecting = gc.isenabled()
gc.disable()
try:
    from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

    from rag_loop_dagster.assets.coverage import coverage_job, golden_coverage
    from rag_loop_dagster.assets.curation import curated_labels, curation_queue, label_job, new_label_files_sensor
    from rag_loop_dagster.assets.dashboard import dashboard, dashboard_after_runs, dashboard_job
    from rag_loop_dagster.assets.drift import DRIFT_ASSETS, drift_job, drift_schedule
    from rag_loop_dagster.assets.evaluation import (
        judge_calibration,
        judge_calibrations,
        judge_few_shot,
        judge_few_shot_examples,
        regression_eval,
        regression_eval_job,
    )
    from rag_loop_dagster.assets.goldens import golden_release, golden_releases, release_goldens
    from rag_loop_dagster.assets.incidents import incident_traces, incidents
    from rag_loop_dagster.assets.ingestion import (
        ingest_job,
        knowledge_base,
        new_trace_files_sensor,
        raw_traces,
        raw_traces_quarantine_rate,
        trace_lake,
    )
    from rag_loop_dagster.assets.intents import intent_clusters, query_embeddings
    from rag_loop_dagster.assets.lake import lake_maintenance_job, lake_maintenance_schedule, rag_loop_deployment
    from rag_loop_dagster.assets.online import online_quality, trace_judgments
    from rag_loop_dagster.assets.resources import DUCKDB_WRITER, build_resources
    from rag_loop_dagster.assets.selection import failure_candidates, quality_estimates, trace_novelty, trace_signals
finally:
    gc.freeze()
    if _collecting:
        gc.enable()

rag_loop_job = define_asset_job(
    "rag_loop_job", tags=DUCKDB_WRITER,
    selection=AssetSelection.all() - AssetSelection.assets(golden_release, regression_eval)
    - AssetSelection.groups("drift") - AssetSelection.assets(online_quality),
    description="Materialize the loop up to the curation queue and labels; releases are the "
                "curators' (release_goldens), evaluations run on a release (regression_eval_job) "
                "and drift and judged quality per day (drift_job, scheduled).")



def build_definitions(resources: Mapping[str, object] | None = None) -> Definitions:
    """The project's assets, checks, jobs, schedules and sensors on `resources` (default: from
    the environment, `build_resources`)."""
    return Definitions(
        assets=[knowledge_base, raw_traces, trace_lake, trace_signals, trace_novelty, failure_candidates,
                quality_estimates, trace_judgments, online_quality, query_embeddings, intent_clusters, curation_queue,
                curated_labels, golden_release, golden_releases, regression_eval, judge_calibration,
                judge_calibrations, judge_few_shot, judge_few_shot_examples, incidents, incident_traces,
                rag_loop_deployment,
                *DRIFT_ASSETS, golden_coverage, dashboard],
        asset_checks=[raw_traces_quarantine_rate],
        jobs=[ingest_job, rag_loop_job, label_job, release_goldens, regression_eval_job, drift_job,
              coverage_job, dashboard_job, lake_maintenance_job],
        schedules=[drift_schedule, lake_maintenance_schedule],
        sensors=[new_trace_files_sensor, new_label_files_sensor, dashboard_after_runs],
        resources=build_resources() if resources is None else dict(resources),
        executor=in_process_executor,  # DuckDB has one writer at a time
    )


defs = build_definitions()
