"""Resources: the DuckDB file and the directories the pipeline reads."""


import os
from pathlib import Path

from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class RagLoopPaths(ConfigurableResource):
    """Where inputs live; defaults are the embedded demo data."""

    traces_dir: str = str(PROJECT_ROOT / "data" / "demo" / "traces")
    knowledge_dir: str = str(PROJECT_ROOT / "data" / "demo" / "kb")


def build_resources() -> dict[str, object]:
    """Resources from the environment (RAG_LOOP_DB, RAG_LOOP_TRACES_DIR, RAG_LOOP_KB_DIR)."""
    defaults = RagLoopPaths()
    return {
        "duckdb": DuckDBResource(
            database=os.environ.get("RAG_LOOP_DB", str(PROJECT_ROOT / "data" / "rag_loop.duckdb"))),
        "paths": RagLoopPaths(
            traces_dir=os.environ.get("RAG_LOOP_TRACES_DIR", defaults.traces_dir),
            knowledge_dir=os.environ.get("RAG_LOOP_KB_DIR", defaults.knowledge_dir)),
    }
