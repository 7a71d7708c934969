"""The one Definitions object of rag-loop (loaded by workspace.yaml)."""

from dagster import Definitions, in_process_executor

from assets.drift import DRIFT_ASSETS, drift_job, drift_schedule
from assets.evaluation import judge_calibration, judge_calibrations, regression_eval
from assets.goldens import (
    curated_labels,
    golden_release,
    golden_releases,
    new_label_files_sensor,
)
from assets.ingestion import (
    knowledge_base,
    new_trace_files_sensor,
    raw_traces,
    raw_traces_quarantine_rate,
)
from assets.intents import curation_queue, intent_clusters, query_embeddings
from assets.jobs import (
    ingest_job,
    label_job,
    rag_loop_job,
    regression_eval_job,
    release_goldens,
)
from assets.resources import build_resources
from assets.selection import (
    failure_candidates,
    quality_estimates,
    trace_novelty,
    trace_signals,
)

defs = Definitions(
    assets=[knowledge_base, raw_traces, trace_signals, trace_novelty, failure_candidates, quality_estimates,
            query_embeddings, intent_clusters, curation_queue, curated_labels, golden_release,
            golden_releases, regression_eval, judge_calibration, judge_calibrations, *DRIFT_ASSETS],
    asset_checks=[raw_traces_quarantine_rate],
    jobs=[ingest_job, rag_loop_job, label_job, release_goldens, regression_eval_job, drift_job],
    schedules=[drift_schedule],
    sensors=[new_trace_files_sensor, new_label_files_sensor],
    resources=build_resources(),
    executor=in_process_executor,  # DuckDB has one writer at a time
)
