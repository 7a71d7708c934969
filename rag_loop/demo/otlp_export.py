"""Encode a native demo trace as one OTLP JSON line, as an instrumented app would export it.

`genai` follows the OpenTelemetry GenAI conventions, `openinference` the OpenInference ones;
fields neither has travel as `rag.*` attributes and document metadata (see docs/ingestion.md).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

_ROOT_FIELDS = ("request_id", "turn_id", "rag_version", "prompt_version", "embedding_model",
                "index_version", "chunking_version", "retrieval_config_version", "rewritten_query",
                "status", "error", "is_fallback", "cost_usd", "language", "tenant", "query_type",
                "risk_level", "citations")


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in values.items() if v is not None]


def _nanos(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1e9)


def otlp_trace_id(native_id: str) -> str:
    """The 32-hex-digit OTLP trace id of a demo trace."""
    return hashlib.sha256(native_id.encode()).hexdigest()[:32]


def _span_id(trace_id: str, name: str) -> str:
    return hashlib.sha256(f"{trace_id}/{name}".encode()).hexdigest()[:16]


def _documents_genai(chunks: list[dict[str, Any]], score_key: str) -> str:
    return json.dumps([{"id": c["chunk_id"], "score": c[score_key], "doc_id": c["doc_id"],
                        "chunk_id": c["chunk_id"], "doc_version": c["doc_version"]}
                       for c in chunks])


def _documents_openinference(chunks: list[dict[str, Any]], prefix: str, score_key: str):
    attrs: dict[str, Any] = {}
    for i, c in enumerate(chunks):
        attrs[f"{prefix}.{i}.document.id"] = c["chunk_id"]
        attrs[f"{prefix}.{i}.document.score"] = c[score_key]
        attrs[f"{prefix}.{i}.document.metadata"] = json.dumps(
            {"doc_id": c["doc_id"], "doc_version": c["doc_version"]})
    return attrs


def _stage_attrs(trace: dict[str, Any], stage: str, convention: str) -> dict[str, Any]:
    chunks = trace["chunks"]
    reranked = sorted((c for c in chunks if c.get("rerank_rank")), key=lambda c: c["rerank_rank"])
    oi = convention == "openinference"
    if stage == "retrieval":
        if oi:
            return {"openinference.span.kind": "RETRIEVER", "input.value": trace["original_query"],
                    **_documents_openinference(chunks, "retrieval.documents", "score")}
        return {"gen_ai.operation.name": "retrieval",
                "gen_ai.retrieval.query.text": trace["original_query"],
                "gen_ai.retrieval.documents": _documents_genai(chunks, "score")}
    if stage == "rerank":
        if oi:
            return {"openinference.span.kind": "RERANKER",
                    "reranker.model_name": trace["reranker_model"],
                    **_documents_openinference(reranked, "reranker.output_documents", "rerank_score")}
        return {"gen_ai.operation.name": "rerank", "rag.reranker_model": trace["reranker_model"],
                "gen_ai.retrieval.documents": _documents_genai(reranked, "rerank_score")}
    if stage == "generation":
        if oi:
            return {"openinference.span.kind": "LLM", "llm.model_name": trace["model_name"],
                    "llm.provider": trace["provider"], "output.value": trace["answer"],
                    "llm.token_count.prompt": trace["input_tokens"],
                    "llm.token_count.completion": trace["output_tokens"],
                    "llm.invocation_parameters": json.dumps({"temperature": trace["temperature"]})}
        messages = [{"role": "assistant", "parts": [{"type": "text", "content": trace["answer"]}]}] \
            if trace["answer"] else []
        return {"gen_ai.operation.name": "chat", "gen_ai.request.model": trace["model_name"],
                "gen_ai.response.model": trace["response_model"],
                "gen_ai.provider.name": trace["provider"],
                "gen_ai.request.temperature": trace["temperature"],
                "gen_ai.usage.input_tokens": trace["input_tokens"],
                "gen_ai.usage.output_tokens": trace["output_tokens"],
                "gen_ai.response.finish_reasons": [trace["finish_reason"]],
                "gen_ai.output.messages": json.dumps(messages, ensure_ascii=False)}
    return {}


def to_otlp_line(trace: dict[str, Any], convention: str) -> str:
    """One `resourceSpans` line holding every span of the trace."""
    trace_id = otlp_trace_id(trace["trace_id"])
    root_id = _span_id(trace_id, "root")
    start = _nanos(trace["spans"][0]["start_time"])
    root_attrs = {f"rag.{k}": trace.get(k) for k in _ROOT_FIELDS}
    root_attrs["rag.context_chunk_ids"] = [c["chunk_id"] for c in trace["chunks"] if c["selected"]]
    for key in ("rating", "category", "comment"):
        root_attrs[f"rag.feedback.{key}"] = (trace.get("feedback") or {}).get(key)
    if convention == "openinference":
        root_attrs.update({"openinference.span.kind": "CHAIN", "input.value": trace["original_query"],
                           "session.id": trace["session_id"]})
    else:
        root_attrs.update({"gen_ai.conversation.id": trace["session_id"],
                           "rag.original_query": trace["original_query"]})
    spans = [{"traceId": trace_id, "spanId": root_id, "parentSpanId": "", "name": "rag_request",
              "kind": 2, "startTimeUnixNano": str(start),
              "endTimeUnixNano": str(start + int(trace["latency_ms"] * 1e6)),
              "attributes": _attrs(root_attrs), "status": {}}]
    for span in trace["spans"]:
        begin = _nanos(span["start_time"])
        status = {"code": 2, "message": trace["error"]} if span["status"] == "error" else {}
        spans.append({"traceId": trace_id, "spanId": _span_id(trace_id, span["name"]),
                      "parentSpanId": root_id, "name": span["name"], "kind": 1,
                      "startTimeUnixNano": str(begin),
                      "endTimeUnixNano": str(begin + int(span["duration_ms"] * 1e6)),
                      "attributes": _attrs(_stage_attrs(trace, span["name"], convention)),
                      "status": status})
    resource = {"attributes": _attrs({"service.name": f"rag-assistant-{trace['tenant']}",
                                      "deployment.environment.name": trace["environment"]})}
    scope = {"name": "openinference" if convention == "openinference" else "opentelemetry.genai"}
    payload = {"resourceSpans": [{"resource": resource,
                                  "scopeSpans": [{"scope": scope, "spans": spans}]}]}
    return json.dumps(payload, ensure_ascii=False)
