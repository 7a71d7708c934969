"""The Definitions load, and every table the loop writes is a declared asset."""

import subprocess
import sys

from tests.helpers import PROJECT, undeclared_tables


def test_definitions_load():
    from rag_loop_dagster.definitions import defs
    repo = defs.get_repository_def()
    assert {"ingest_job", "rag_loop_job"} <= {j.name for j in repo.get_all_jobs()}
    assert defs.get_sensor_def("new_trace_files_sensor")
    for job in repo.job_names:  # a job selecting part of a stage's tables does not resolve
        assert defs.resolve_job_def(job).name == job


def test_what_the_definitions_load_is_out_of_the_collectors_sight():
    """Their ~200k long-lived objects frozen (a process's later full collections skip them),
    and the collector on again once they have loaded: in a process of their own, as a code
    server or a run worker loads them (the test session freezes what it collected too)."""
    done = subprocess.run([sys.executable, "-c", "import gc, rag_loop_dagster.definitions; "
                           "print(gc.isenabled(), gc.get_freeze_count())"],
                          capture_output=True, text=True, check=True, cwd=PROJECT)
    enabled, frozen = done.stdout.split()
    assert enabled == "True" and int(frozen) > 100_000


def test_every_job_queues_as_the_duckdb_writer():
    """deploy/dagster.yaml queues runs one at a time on this tag (tests/e2e/test_webserver runs
    the loop and a release through it): a job without it would hit DuckDB's lock."""
    from rag_loop_dagster.assets.resources import DUCKDB_WRITER
    from rag_loop_dagster.definitions import defs
    jobs = [j for j in defs.get_repository_def().job_names if not j.startswith("__")]  # Dagster's own
    assert {"rag_loop_job", "ingest_job", "label_job", "release_goldens", "drift_job"} <= set(jobs)
    untagged = [j for j in jobs if not DUCKDB_WRITER.items() <= defs.resolve_job_def(j).tags.items()]
    assert untagged == []


def test_every_table_the_loop_writes_is_a_declared_asset(demo_run):
    _, database, _ = demo_run
    assert undeclared_tables(database) == set()
    from rag_loop_dagster.definitions import defs
    graph = defs.resolve_asset_graph()
    parents = {k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys}
               for k in graph.get_all_asset_keys()}
    # the tables a stage reads are its declared parents, e.g. novelty before selection
    assert parents["failure_candidates"] == {"trace_signals", "trace_novelty"}
    assert {"raw_traces", "trace_chunks", "trace_feedback", "documents"} <= parents["trace_signals"]
    assert "intent_clusters" in parents["query_mix"] and "trace_novelty" in parents["query_mix"]
