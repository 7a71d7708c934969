"""The engine resource is chosen by RAG_LOOP_ENGINE, the storage by RAG_LOOP_LAKE
(tests/engines/test_spark.py runs the Spark one in a Dagster run)."""

import pytest

from rag_loop_dagster.assets.resources import (
    DeltaLakeStorageResource,
    DuckDBEngineResource,
    EmbeddedStorageResource,
    SparkEngineResource,
    build_resources,
)


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


def test_the_deployment_chooses_where_trace_tables_live(monkeypatch, tmp_path):
    """Embedded (every table in the DuckDB file) unless RAG_LOOP_LAKE names a lake; the Spark
    engine runs over a lake (the home's, unless RAG_LOOP_LAKE says) and refuses to run without."""
    for name in ("RAG_LOOP_ENGINE", "RAG_LOOP_LAKE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAG_LOOP_HOME", str(tmp_path / "home"))
    resources = build_resources()
    assert isinstance(resources["storage"], EmbeddedStorageResource) and resources["storage"].lake() is None
    assert resources["engine"].engine().lake is None
    monkeypatch.setenv("RAG_LOOP_LAKE", "s3://bucket/traces")
    resources = build_resources()
    assert isinstance(resources["storage"], DeltaLakeStorageResource)
    assert resources["engine"].storage is resources["storage"]
    monkeypatch.delenv("RAG_LOOP_LAKE")
    monkeypatch.setenv("RAG_LOOP_ENGINE", "spark")
    assert build_resources()["storage"].uri == str(tmp_path / "home" / "lake")
    with pytest.raises(ValueError, match="runs over a trace lake"):
        SparkEngineResource().engine()
