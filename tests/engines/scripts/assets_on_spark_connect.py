"""Run by tests/engines/test_spark.py in its own process, as a Dagster run worker runs: the
assets from raw_traces to quality_estimates on the Spark resource pointed at a Spark Connect
server (argv: url, traces folder, lake folder, database), then trace_signals again. Prints a
JSON line: whether both runs succeeded, whether pyspark ran as a Spark Connect client, the
lake's files after each run, and where the first run says trace_signals and failure_candidates
are stored."""

import json
import sys
from pathlib import Path

from dagster import materialize
from dagster_duckdb import DuckDBResource

from assets.ingestion import raw_traces, trace_lake
from assets.resources import RagLoopPaths, SparkEngineResource
from assets.selection import failure_candidates, quality_estimates, trace_signals

url, traces, lake, database = sys.argv[1:5]
resources = {"duckdb": DuckDBResource(database=database), "engine": SparkEngineResource(master=url),
             "paths": RagLoopPaths(lake_dir=lake, traces_dir=traces, knowledge_dir="")}


def lake_files() -> list[str]:
    return sorted(str(p.relative_to(lake)) for p in Path(lake).rglob("*.parquet"))


run = materialize([raw_traces, trace_lake, trace_signals, failure_candidates, quality_estimates],
                  resources=resources,
                  run_config={"ops": {"quality_estimates": {"config": {"slices": ["language"]}}}})
first = run.success
stored_in = {name: run.asset_materializations_for_node(name)[0].metadata["stored_in"].value
             for name in ("trace_signals", "failure_candidates")}
files = lake_files()
again = materialize([trace_signals], resources=resources).success  # the same lake, computed again
from pyspark.sql.utils import is_remote  # noqa: E402 (imported by the resource, not before)

print(json.dumps({"success": [first, again], "connect": is_remote(), "files": files, "files_again": lake_files(),
                  "stored_in": stored_in}))
