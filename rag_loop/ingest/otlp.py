"""OTLP JSON (the collector's file exporter: one `resourceSpans` object per line) to traces.

Spans are grouped by trace id and folded into one native trace record. Two conventions are
understood, span by span:

- OpenTelemetry GenAI: `gen_ai.operation.name` (`retrieval`, `chat`, ...), `gen_ai.request.model`,
  `gen_ai.response.model`, `gen_ai.usage.*_tokens`, `gen_ai.conversation.id`,
  `gen_ai.retrieval.query.text`, `gen_ai.retrieval.documents` (JSON list of {id, score, ...});
- OpenInference: `openinference.span.kind` (RETRIEVER, RERANKER, LLM, CHAIN), `input.value`,
  `output.value`, `retrieval.documents.N.document.*`, `reranker.output_documents.N.document.*`,
  `llm.model_name`, `llm.token_count.*`, `session.id`.

What neither standard has comes from `rag.<field>` attributes named after the native trace
fields (`rag.prompt_version`, `rag.index_version`, `rag.tenant`, `rag.feedback.rating`, ...)
and from each document's metadata (`doc_id`, `chunk_id`, `doc_version`, `rerank_score`,
`selected`). The README's mapping table lists them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rag_loop.schema import NESTED_FIELDS, Trace

_LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}


def _iso(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, tz=UTC).isoformat()


def _json_value(value: Any) -> Any:
    """Attributes that carry JSON as a string (document lists, metadata, messages)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return None
    return value


def _indexed_documents(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference flattened documents: `<prefix>.N.document.<field>`."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix + "."):
            index, _, field = key[len(prefix) + 1:].partition(".document.")
            if index.isdigit() and field:
                found.setdefault(int(index), {})[field] = value
    return [found[i] for i in sorted(found)]


def _candidate(document: dict[str, Any], position: int) -> dict[str, Any]:
    """A retrieved document (any convention) as a native chunk record."""
    metadata = _json_value(document.get("metadata")) or {}
    metadata = metadata if isinstance(metadata, dict) else {}
    merged = {**metadata, **{k: v for k, v in document.items() if k != "metadata"}}
    ident = merged.get("id")
    return {
        "doc_id": merged.get("doc_id", ident),
        "chunk_id": merged.get("chunk_id", ident),
        "doc_version": merged.get("doc_version", merged.get("version")),
        "score": merged.get("score"),
        "rank": merged.get("rank", position + 1),
        "rerank_score": merged.get("rerank_score"),
        "rerank_rank": merged.get("rerank_rank"),
        "selected": merged.get("selected"),
        "text": merged.get("content", merged.get("text")),
    }


def _documents(attrs: dict[str, Any], kind: str | None) -> list[dict[str, Any]]:
    if "gen_ai.retrieval.documents" in attrs:
        raw = _json_value(attrs["gen_ai.retrieval.documents"]) or []
    elif kind == "RERANKER":
        raw = _indexed_documents(attrs, "reranker.output_documents")
    else:
        raw = _indexed_documents(attrs, "retrieval.documents")
    return [_candidate(d, i) for i, d in enumerate(raw) if isinstance(d, dict)]


def _answer(attrs: dict[str, Any]) -> str | None:
    if "output.value" in attrs:
        return attrs["output.value"]
    if "llm.output_messages.0.message.content" in attrs:
        return attrs["llm.output_messages.0.message.content"]
    messages = _json_value(attrs.get("gen_ai.output.messages")) or []
    texts = [part.get("content", "") for message in messages if isinstance(message, dict)
             for part in message.get("parts", []) if part.get("type") == "text"]
    return "".join(texts) if texts else None


def _span_kind(attrs: dict[str, Any]) -> str | None:
    if "openinference.span.kind" in attrs:
        return str(attrs["openinference.span.kind"]).upper()
    operation = attrs.get("gen_ai.operation.name")
    if operation == "retrieval":
        return "RETRIEVER"
    if operation == "rerank":
        return "RERANKER"
    if operation in _LLM_OPERATIONS:
        return "LLM"
    return None


def _merge_rerank(candidates: list[dict[str, Any]], reranked: list[dict[str, Any]]) -> None:
    """Give each retrieved candidate its rerank score and rank (reranked list order)."""
    by_chunk = {c["chunk_id"]: c for c in candidates}
    for position, doc in enumerate(reranked):
        target = by_chunk.get(doc["chunk_id"])
        if target is None:
            target = {**doc, "score": None, "rank": None}
            candidates.append(target)
        target["rerank_score"] = doc["score"] if doc.get("rerank_score") is None else doc["rerank_score"]
        target["rerank_rank"] = position + 1


def _llm_fields(attrs: dict[str, Any]) -> dict[str, Any]:
    params = _json_value(attrs.get("llm.invocation_parameters")) or {}
    reasons = attrs.get("gen_ai.response.finish_reasons") or []
    return {
        "model_name": attrs.get("gen_ai.request.model", attrs.get("llm.model_name")),
        "response_model": attrs.get("gen_ai.response.model"),
        "provider": attrs.get("gen_ai.provider.name", attrs.get("gen_ai.system",
                              attrs.get("llm.provider"))),
        "input_tokens": attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt")),
        "output_tokens": attrs.get("gen_ai.usage.output_tokens",
                                   attrs.get("llm.token_count.completion")),
        "temperature": attrs.get("gen_ai.request.temperature",
                                 params.get("temperature") if isinstance(params, dict) else None),
        "finish_reason": reasons[0] if isinstance(reasons, list) and reasons else None,
        "answer": _answer(attrs),
    }


def _rag_fields(attrs: dict[str, Any]) -> dict[str, Any]:
    """`rag.<field>` attributes named after native trace fields."""
    fields = {k[4:]: v for k, v in attrs.items()
              if k.startswith("rag.") and k[4:] in Trace.model_fields and k[4:] not in NESTED_FIELDS}
    feedback = {k[13:]: v for k, v in attrs.items() if k.startswith("rag.feedback.")}
    if feedback:
        fields["feedback"] = feedback
    if isinstance(fields.get("filters"), str):
        fields["filters"] = _json_value(fields["filters"])
    return fields


def is_request(spans: list[dict[str, Any]]) -> bool:
    """A user request retrieves, calls an LLM or has a chain with input; indexing traces
    (embedding the knowledge base) do none of these."""
    return any(_span_kind(span["attrs"]) in ("RETRIEVER", "LLM", "RERANKER")
               or (_span_kind(span["attrs"]) == "CHAIN" and "input.value" in span["attrs"])
               or "rag.original_query" in span["attrs"] for span in spans)


def assemble_trace(trace_id: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold the spans of one trace (rows of `otlp_spans`, attributes decoded) into a record."""
    spans = sorted(spans, key=lambda s: s["start_ns"] or 0)
    roots = [s for s in spans if not s["parent_span_id"]]
    ordered = roots[:1] + [s for s in spans if s is not roots[0]] if roots else spans
    record: dict[str, Any] = {"trace_id": trace_id}
    candidates: list[dict[str, Any]] = []
    reranked: list[dict[str, Any]] = []
    starts = [s["start_ns"] for s in spans if s["start_ns"]]
    ends = [s["end_ns"] for s in spans if s["end_ns"]]
    record["timestamp"] = _iso(min(starts)) if starts else None
    record["latency_ms"] = (max(ends) - min(starts)) / 1e6 if ends and starts else None
    record["spans"] = []
    for span in ordered:
        attrs, kind = span["attrs"], _span_kind(span["attrs"])
        start, end = span["start_ns"], span["end_ns"]
        failed = span["status_code"] == "error"
        record["spans"].append({
            "name": span["name"] or kind or "span", "span_id": span["span_id"],
            "parent_span_id": span["parent_span_id"],
            "kind": kind or attrs.get("gen_ai.operation.name"),
            "start_time": _iso(start) if start else None,
            "duration_ms": (end - start) / 1e6 if start and end else None,
            "status": "error" if failed else "ok",
        })
        if failed:
            record.setdefault("status", "error")
            record.setdefault("error", span["status_message"])
        if kind == "RETRIEVER":
            candidates = _documents(attrs, kind) or candidates
            query = attrs.get("gen_ai.retrieval.query.text", attrs.get("input.value"))
            record.setdefault("original_query", query)
        elif kind == "RERANKER":
            reranked = _documents(attrs, kind)
            record.setdefault("reranker_model", attrs.get("reranker.model_name"))
        elif kind == "LLM":
            record.update({k: v for k, v in _llm_fields(attrs).items() if v is not None})
        session = attrs.get("session.id", attrs.get("gen_ai.conversation.id"))
        if session is not None:
            record.setdefault("session_id", session)
        if "gen_ai.conversation.id" in attrs:
            record.setdefault("conversation_id", attrs["gen_ai.conversation.id"])
        if kind == "CHAIN" and "input.value" in attrs:
            record.setdefault("original_query", attrs["input.value"])
        environment = span["resource"].get("deployment.environment.name",
                                           span["resource"].get("deployment.environment"))
        if environment is not None:
            record.setdefault("environment", environment)
    selected = None
    for span in reversed(ordered):  # rag.* on the root wins over the same attribute on children
        record.update(_rag_fields(span["attrs"]))
        selected = span["attrs"].get("rag.context_chunk_ids", selected)
    _merge_rerank(candidates, reranked)
    if isinstance(selected, list):
        for candidate in candidates:
            candidate["selected"] = candidate["chunk_id"] in selected
    record["chunks"] = candidates
    return record
