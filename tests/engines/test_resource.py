"""The engine resource is chosen by RAG_LOOP_ENGINE (tests/engines/test_spark.py runs the Spark
one in a Dagster run)."""

import pytest

from rag_loop_dagster.assets.resources import DuckDBEngineResource, SparkEngineResource, build_resources


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
