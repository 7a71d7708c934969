"""The Definitions load, and every table the loop writes is a declared asset."""

from tests.helpers import undeclared_tables


def test_definitions_load():
    from rag_loop_dagster.definitions import defs
    repo = defs.get_repository_def()
    assert {"ingest_job", "rag_loop_job"} <= {j.name for j in repo.get_all_jobs()}
    assert defs.get_sensor_def("new_trace_files_sensor")
    for job in repo.job_names:  # a job selecting part of a stage's tables does not resolve
        assert defs.resolve_job_def(job).name == job


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
