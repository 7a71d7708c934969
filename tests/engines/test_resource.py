"""The engine resource: chosen by RAG_LOOP_ENGINE, and the Spark one runs the ported assets in
a Dagster run (trace_lake → trace_signals → failure_candidates) on what real instrumentations
write, with the rows DuckDB gives."""

import duckdb
import pytest
from dagster import materialize
from dagster_duckdb import DuckDBResource

from assets.ingestion import trace_lake
from assets.resources import DuckDBEngineResource, RagLoopPaths, SparkEngineResource, build_resources
from assets.selection import failure_candidates, trace_signals
from rag_loop.ingest import ingest_directory
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables
from tests.engines.conftest import needs_spark
from tests.engines.test_parity import OTLP, assert_same_rows


def test_rag_loop_engine_chooses_the_engine_resource(monkeypatch):
    monkeypatch.delenv("RAG_LOOP_ENGINE", raising=False)
    assert isinstance(build_resources()["engine"], DuckDBEngineResource)
    monkeypatch.setenv("RAG_LOOP_ENGINE", "Spark")
    monkeypatch.setenv("RAG_LOOP_SPARK_MASTER", "local[3]")
    chosen = build_resources()["engine"]
    assert isinstance(chosen, SparkEngineResource)
    monkeypatch.setenv("RAG_LOOP_ENGINE", "flink")
    with pytest.raises(ValueError, match="duckdb .* or spark"):
        build_resources()


@needs_spark
@pytest.mark.slow
def test_the_spark_engine_resource_runs_the_ported_assets(spark, tmp_path):
    database = tmp_path / "otlp.duckdb"
    with duckdb.connect(str(database)) as con:
        create_tables(con)
        ingest_directory(con, OTLP)
        compute_signals(con, SignalSettings())
        select_candidates(con, SamplingPolicy())
        expected = {t: con.execute(f"SELECT * FROM {t}").df() for t in ("trace_signals", "failure_candidates")}
    resources = {"duckdb": DuckDBResource(database=str(database)), "engine": SparkEngineResource(),
                 "paths": RagLoopPaths(lake_dir=str(tmp_path / "lake"))}
    assert materialize([trace_lake, trace_signals, failure_candidates], resources=resources).success
    assert sorted(p.name for p in (tmp_path / "lake").iterdir()) == [
        "_days.json", "documents", "failure_candidates", "raw_traces", "trace_chunks", "trace_feedback",
        "trace_signals"]
    with duckdb.connect(str(database)) as con:
        for table, rows in expected.items():
            assert_same_rows(con.execute(f"SELECT * FROM {table}").df(), rows, "trace_id")
