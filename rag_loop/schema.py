"""The trace model (seed 004 §04, see docs/seeds.md) and the enums every stage shares.

`Trace` is the native JSONL record, one per line. It is the one source of truth for the
trace shape: the DuckDB parser's struct type is derived from it (`storage.trace_struct`),
and OTLP spans are assembled into records of the same shape (`ingest.otlp.assemble_trace`)
that take the same path.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FailureType(StrEnum):
    """Which layer broke (seed 004 §13)."""

    RETRIEVAL = "retrieval"
    RERANKING = "reranking"
    CONTEXT = "context"
    GENERATION = "generation"
    DATA_FRESHNESS = "data_freshness"
    QUERY_REWRITE = "query_rewrite"
    POLICY = "policy"
    NONE = "none"


class Origin(StrEnum):
    """Where a golden came from (seed 004 §16)."""

    PRODUCTION_FAILURE = "production_failure"
    PRODUCTION_SAMPLE = "production_sample"
    INCIDENT = "incident"
    SYNTHETIC = "synthetic"
    MANUAL = "manual"


class Priority(StrEnum):
    """Human review priority (seed 004 §15)."""

    P0 = "P0"  # high-risk security or legal
    P1 = "P1"  # negative feedback plus another bad signal
    P2 = "P2"  # novel query cluster
    P3 = "P3"  # random quality control


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class RetrievedChunk(_Record):
    """One retrieval candidate, followed through rerank into the final context."""

    doc_id: str
    doc_id_from: str | None = None  # OTLP: which document key gave doc_id (see ingest.otlp)
    chunk_id: str | None = None
    doc_version: str | None = None
    score: float | None = None  # retriever score
    rank: int | None = None  # 1-based rank after retrieval / fusion
    rerank_score: float | None = None
    rerank_rank: int | None = None  # None: not seen by the reranker
    selected: bool | None = None  # in the final context given to generation
    text: str | None = None  # optional: the evaluator can fetch content by chunk_id


class Span(_Record):
    """One pipeline stage with its latency (query_rewrite, retrieval, rerank, generation...)."""

    name: str
    span_id: str | None = None
    parent_span_id: str | None = None
    kind: str | None = None
    start_time: str | None = None
    duration_ms: float | None = None
    status: str | None = None


class Feedback(_Record):
    rating: str | None = None  # "positive" | "negative"
    category: str | None = None  # e.g. incorrect, outdated_source, missing_info, hallucination
    comment: str | None = None


class Trace(_Record):
    """One production RAG request: identity, configuration, retrieval, generation, feedback."""

    # identity
    trace_id: str
    request_id: str | None = None
    session_id: str | None = None  # a session is this id within `service` (ids are reused across services)
    conversation_id: str | None = None
    service: str | None = None  # the service that emitted the trace (OTLP resource `service.name`)
    user_id: str | None = None
    turn_id: int | None = None
    timestamp: datetime
    environment: str | None = None
    # configuration versions
    rag_version: str | None = None
    prompt_version: str | None = None
    model_name: str | None = None
    response_model: str | None = None
    provider: str | None = None
    embedding_model: str | None = None
    reranker_model: str | None = None
    index_version: str | None = None
    chunking_version: str | None = None
    retrieval_config_version: str | None = None
    # retrieval state
    original_query: str = Field(min_length=1)
    rewritten_query: str | None = None
    filters: dict[str, Any] | None = None
    chunks: list[RetrievedChunk] = Field(default_factory=list)
    # why the retrieval output could not be read (OTLP: documents cut off, not a list...):
    # retrieval unknown, not empty (see selection.signals)
    retrieval_unreadable: str | None = None
    # generation
    answer: str | None = None
    citations: list[str] | None = None  # chunk ids the answer cites
    temperature: float | None = None
    input_tokens: int | None = None  # summed over the request's LLM calls
    output_tokens: int | None = None
    llm_calls: int | None = None  # LLM calls made (a condense call plus an answer call: 2)
    final_input_tokens: int | None = None  # of the last LLM call
    final_output_tokens: int | None = None
    finish_reason: str | None = None
    status: str | None = None  # ok, timeout or error
    error: str | None = None
    is_fallback: bool | None = None  # the app answered with its abstain/fallback text
    # performance and cost
    latency_ms: float | None = None
    cost_usd: float | None = None
    spans: list[Span] = Field(default_factory=list)
    # feedback
    feedback: Feedback | None = None
    # slices
    language: str | None = None
    tenant: str | None = None
    query_type: str | None = None
    risk_level: str | None = None


NESTED_FIELDS = frozenset({"chunks", "spans", "feedback"})  # trace fields stored in own tables


class Document(_Record):
    """One version of a knowledge-base document, with the times that define freshness lag."""

    doc_id: str
    version: str
    title: str
    language: str | None = None
    source_updated_at: datetime
    indexed_at: datetime | None = None
    chunks: list[DocumentChunk]


class DocumentChunk(_Record):
    chunk_id: str
    text: str


Document.model_rebuild()
