"""Jobs: ingestion alone (for the sensor) and the whole loop (for `make demo`)."""

from dagster import AssetSelection, define_asset_job

ingest_job = define_asset_job("ingest_job", selection=AssetSelection.groups("ingestion"),
                              description="Load the knowledge base and new trace files.")
rag_loop_job = define_asset_job("rag_loop_job", selection=AssetSelection.all(),
                                description="Materialize the whole rag-loop asset graph.")
