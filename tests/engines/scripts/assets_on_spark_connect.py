"""Run by tests/engines/test_spark.py in its own process, as a Dagster run worker runs: the assets
from raw_traces to quality_estimates on the Spark resource pointed at a Spark Connect server
(argv: url, traces folder, lake folder, database), then trace_signals in a daily run (nothing
changed); after the first run, the newest day's retrieval figures are written beside the
database (`<database>.retrieval.parquet`). Prints a JSON line: whether the runs succeeded,
raw_traces' rows, the daily run's days computed, whether pyspark ran as a Spark Connect client,
the lake's files after each run, and where the first run says raw_traces, trace_signals and
failure_candidates are stored."""

import json
import sys
from pathlib import Path

import duckdb
from dagster import DagsterInstance, materialize
from dagster_duckdb import DuckDBResource

from rag_loop.drift.figures import retrieval_figures
from rag_loop_dagster.assets.ingestion import raw_traces, trace_lake
from rag_loop_dagster.assets.resources import DeltaLakeStorageResource, RagLoopPaths, SparkEngineResource
from rag_loop_dagster.assets.selection import failure_candidates, quality_estimates, trace_signals

url, traces, lake, database = sys.argv[1:5]
storage = DeltaLakeStorageResource(uri=lake)
resources = {"duckdb": DuckDBResource(database=database), "engine": SparkEngineResource(storage=storage, master=url),
             "storage": storage, "paths": RagLoopPaths(traces_dir=traces, knowledge_dir="")}


def lake_files() -> list[str]:
    """The day folders the lake tables' current versions have files in (a run again commits
    new files of the same days; the old ones stay on disk until a vacuum)."""
    at = storage.lake()
    return sorted({str(Path(f).parent.relative_to(lake)) for table in at.tables() for f in at.files(table)})


instance = DagsterInstance.ephemeral()
run = materialize([raw_traces, trace_lake, trace_signals, failure_candidates, quality_estimates],
                  resources=resources, instance=instance,
                  run_config={"ops": {"quality_estimates": {"config": {"slices": ["language"]}}}})
first = run.success
stored_in = {name: run.asset_materializations_for_node(name)[0].metadata["stored_in"].value
             for name in ("raw_traces", "trace_signals", "failure_candidates")}
files = lake_files()
with duckdb.connect(database) as con:  # the retrieval figures (parts of them cached by the executors)
    day = con.execute("SELECT max(day) FROM trace_signals").fetchall()[0][0]
    retrieval_figures(con, day, 7, resources["engine"].engine()).to_parquet(f"{database}.retrieval.parquet")
daily = materialize([trace_signals], resources=resources, instance=instance)  # nothing changed since
days_computed = daily.asset_materializations_for_node("trace_signals")[0].metadata["days_computed"].value
row_count = run.asset_materializations_for_node("raw_traces")[0].metadata["dagster/row_count"].value
from pyspark.sql.utils import is_remote  # noqa: E402 (imported by the resource, not before)

print(json.dumps({"success": [first, daily.success], "connect": is_remote(), "files": files,
                  "raw_traces_rows": row_count, "files_again": lake_files(), "stored_in": stored_in,
                  "days_computed_daily": days_computed}))
