"""Curation: the queue of representatives curators label, and their label files back in."""

from functools import partial
from pathlib import Path

import pandas as pd
from dagster import (
    AssetExecutionContext,
    AssetSelection,
    Config,
    MaterializeResult,
    MetadataValue,
    SensorEvaluationContext,
    SkipReason,
    asset,
    define_asset_job,
    sensor,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.curation.labels import label_summary, settled_label_files, store_label_files
from rag_loop.curation.queue import build_curation_queue
from rag_loop.curation.representatives import QueueSettings
from rag_loop.store.files import directory_fingerprint
from rag_loop_dagster.assets.intents import intent_clusters
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, EmbedderResource, RagLoopPaths
from rag_loop_dagster.assets.sensors import request_for_input
from rag_loop_dagster.assets.stage import stage_asset

_QUEUE_DEFAULTS = QueueSettings()


class QueueConfig(Config):
    duplicate_similarity: float = Field(_QUEUE_DEFAULTS.duplicate_similarity,
                                        description="Cosine at which two queries are one variant.")
    large_cluster: int = Field(_QUEUE_DEFAULTS.large_cluster,
                               description="From this size a cluster gets a second representative.")
    max_representatives: int = _QUEUE_DEFAULTS.max_representatives
    golden_similarity: float = Field(_QUEUE_DEFAULTS.golden_similarity,
                                     description="A representative this close to a released "
                                                 "golden's input is covered, not queued.")
    diverse_singletons: int = Field(_QUEUE_DEFAULTS.diverse_singletons,
                                    description="Per priority tier, this many singletons are "
                                                "queued farthest first, the rest by weight.")


# `incidents` and `incident_traces` are written by `rag-loop incident open|close` outside Dagster
# (as judge_calibrations by `rag-loop calibrate`); the queue reads the open ones (issue 48). It also
# reads the last coverage run's golden_coverage_intents: not a declared dep, as that asset reads
# the labels and releases this queue leads to (a loop, one round late by design)
@asset(group_name="curation", deps=[intent_clusters, "trace_clusters", "trace_judgments", "incidents",
                                    "incident_traces"],
       description="Representatives to label, sorted by priority, then (within a priority) by the traffic "
                   "volume the newest release leaves uncovered (golden_coverage_intents; without it every "
                   "row says \"coverage not computed\"), then cluster weight; with suggested failure_type "
                   "and origin, the judge's scores and reasons, and why each row ranks where it does "
                   "(rank_reason); exported to curation/queue/<batch>.jsonl and .csv in the home. Open "
                   "incidents' failing traces come first: P0, origin `incident`.")
def curation_queue(context: AssetExecutionContext, config: QueueConfig, duckdb: DuckDBResource,
                   embedder: EmbedderResource, paths: RagLoopPaths) -> MaterializeResult:
    with duckdb.get_connection() as con:
        report = build_curation_queue(con, embedder.router(), QueueSettings(**config.model_dump()),
                                       Path(paths.curation_dir) / "queue", Path(paths.goldens_dir),
                                       log=context.log.info)
        preview = con.sql("SELECT priority, language, input, cluster_label, cluster_weight, "
                          "suggested_failure_type FROM curation_queue LIMIT 15").df() \
            if report.queued else None
    metadata = {
        "dagster/row_count": report.queued, "covered_by_goldens": report.covered_by_goldens,
        "batch": report.batch,
        **{f"priority_{k}": int(v) for k, v in report.by_priority.items()},
        **{f"suggested_{k}": int(v) for k, v in report.by_suggested_failure_type.items()},
        "incident_rows": report.incident_rows, "ordered_by_coverage": report.coverage,
    }
    if report.files:
        metadata["queue_file"] = MetadataValue.path(report.files[0])
        metadata["queue_csv"] = MetadataValue.path(report.files[1])
        metadata["label_in_workspace"] = paths.workspace("/")  # `rag-loop serve` / `make curate`
    if preview is not None:
        metadata["preview"] = MetadataValue.md(preview.to_markdown(index=False))
    return MaterializeResult(metadata=metadata)


# a label file is read once it has not changed for this long: a spreadsheet still saving it, or a
# copy under way, is not read half-written (the sensor waits as long)
SETTLE_SECONDS = 2.0


class LabelConfig(Config):
    settle_seconds: float = Field(SETTLE_SECONDS, description="Read a label file only once it has "
                                                              "not changed for this many seconds.")


@stage_asset(group_name="curation", deps=[curation_queue],
             parts={"label_errors": "Every invalid label row with its file, line and errors",
                    "label_files": "Label files read, by content hash (an edited file replaces "
                                   "its rows)",
                    "current_labels": "View: the latest label per trace"},
       description="Curator labels from curation/labels/ in the home (JSONL or CSV), validated row by "
                   "row: valid rows in `curated_labels` (a relabel supersedes, both kept; "
                   "`current_labels` is the latest per trace), invalid rows in `label_errors`.")
def curated_labels(context: AssetExecutionContext, config: LabelConfig, duckdb: DuckDBResource,
                   paths: RagLoopPaths) -> MaterializeResult:
    with duckdb.get_connection() as con:
        report = store_label_files(con, Path(paths.curation_dir) / "labels", log=context.log.info,
                                   settle_seconds=config.settle_seconds)
        summary = label_summary(con)
    errors = pd.DataFrame(report.errors[:20])
    if not errors.empty:
        errors["errors"] = errors["errors"].map("; ".join)
    return MaterializeResult(metadata={
        "dagster/row_count": summary["labels"], **summary, "files_read": report.files,
        "run_stored": report.stored, "run_rejected": report.rejected, "run_warnings": report.warnings,
        "files_waiting": MetadataValue.json(report.waiting),
        "run_errors": MetadataValue.md(errors.to_markdown(index=False) if not errors.empty
                                       else "no invalid rows")})


@sensor(job_name="label_job", minimum_interval_seconds=30,
        description="Stores curator label files when they appear or change; a failed run's "
                    "files are tried again.")
def new_label_files_sensor(context: SensorEvaluationContext, paths: RagLoopPaths):
    labels = Path(paths.curation_dir) / "labels"
    settled = partial(settled_label_files, settle_seconds=SETTLE_SECONDS)  # a file being written asks for no run
    if not settled(labels):
        return SkipReason("no label file (or none unchanged for the settle time)")
    return request_for_input(context, "label_job", directory_fingerprint(labels, settled), "label files")


label_job = define_asset_job("label_job", tags=DUCKDB_WRITER,
                             selection=AssetSelection.assets(curated_labels, "judge_calibration")
                             .required_multi_asset_neighbors(),  # a stage's part tables come with it
                             description="Store new curator label files; compare curators with the judge.")
