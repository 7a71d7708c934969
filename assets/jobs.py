"""Jobs: ingestion and labels (for the sensors), the loop (for `make demo`), curators' releases."""

from dagster import AssetSelection, define_asset_job

from assets.evaluation import regression_eval
from assets.goldens import curated_labels, golden_release, golden_releases
from assets.resources import DUCKDB_WRITER

ingest_job = define_asset_job("ingest_job", selection=AssetSelection.groups("ingestion"),
                              tags=DUCKDB_WRITER,
                              description="Load the knowledge base and new trace files.")
rag_loop_job = define_asset_job(
    "rag_loop_job", tags=DUCKDB_WRITER,
    selection=AssetSelection.all() - AssetSelection.assets(golden_release, regression_eval)
    - AssetSelection.groups("drift"),
    description="Materialize the loop up to the curation queue and labels; releases are the "
                "curators' (release_goldens), evaluations run on a release (regression_eval_job) "
                "and drift per day (drift_job, scheduled).")
label_job = define_asset_job("label_job", selection=AssetSelection.assets(curated_labels),
                             tags=DUCKDB_WRITER, description="Store new curator label files.")
release_goldens = define_asset_job(
    "release_goldens", tags=DUCKDB_WRITER,
    selection=AssetSelection.assets(curated_labels, golden_release, golden_releases),
    description="Curators: store new labels and make the next golden release (run config: "
                "notes, released_by).")
regression_eval_job = define_asset_job(
    "regression_eval_job", tags=DUCKDB_WRITER, selection=AssetSelection.assets(regression_eval),
    description="Evaluate a golden release on the rag_app with the judge; gates as asset checks.")
