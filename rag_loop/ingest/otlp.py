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

import base64
import binascii
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rag_loop.ingest.reader import Rejected, preview
from rag_loop.schema import NESTED_FIELDS, Trace

_HEX_ID = re.compile(r"^[0-9a-fA-F]+$")
_LLM_OPERATIONS = {"chat", "text_completion", "generate_content"}


def attribute_value(value: dict[str, Any]) -> Any:
    """Decode an OTLP `AnyValue`."""
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [attribute_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: attribute_value(item.get("value", {})) for item in items or []}


def normalize_id(raw: str | None) -> str | None:
    """Trace and span ids as lower-case hex: the collector writes hex, protobuf JSON base64."""
    if not raw:
        return None
    if _HEX_ID.match(raw) and len(raw) in (16, 32):
        return raw.lower()
    try:
        return base64.b64decode(raw, validate=True).hex()
    except (binascii.Error, ValueError):
        return raw


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


def assemble_trace(trace_id: str, spans: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold the spans of one trace (each with decoded `attrs` and `resource`) into a record."""
    spans = sorted(spans, key=lambda s: int(s.get("startTimeUnixNano") or 0))
    span_ids = {normalize_id(s.get("spanId")) for s in spans}
    roots = [s for s in spans if normalize_id(s.get("parentSpanId")) not in span_ids]
    ordered = roots[:1] + [s for s in spans if s is not roots[0]] if roots else spans
    record: dict[str, Any] = {"trace_id": trace_id}
    candidates: list[dict[str, Any]] = []
    reranked: list[dict[str, Any]] = []
    starts = [int(s.get("startTimeUnixNano") or 0) for s in spans]
    ends = [int(s.get("endTimeUnixNano") or 0) for s in spans]
    record["timestamp"] = _iso(min(starts)) if any(starts) else None
    record["latency_ms"] = (max(ends) - min(starts)) / 1e6 if any(ends) and any(starts) else None
    record["spans"] = []
    for span in ordered:
        attrs, kind = span["attrs"], _span_kind(span["attrs"])
        start, end = int(span.get("startTimeUnixNano") or 0), int(span.get("endTimeUnixNano") or 0)
        status = span.get("status", {}).get("code")
        record["spans"].append({
            "name": span.get("name"), "span_id": normalize_id(span.get("spanId")),
            "parent_span_id": normalize_id(span.get("parentSpanId")),
            "kind": kind or attrs.get("gen_ai.operation.name"),
            "start_time": _iso(start) if start else None,
            "duration_ms": (end - start) / 1e6 if start and end else None,
            "status": "error" if status in (2, "STATUS_CODE_ERROR") else "ok",
        })
        if status in (2, "STATUS_CODE_ERROR"):
            record.setdefault("status", "error")
            record.setdefault("error", span.get("status", {}).get("message"))
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


def _spans_of(payload: Any) -> list[dict[str, Any]]:
    """Every span of one OTLP line with decoded `attrs` and `resource` attributes."""
    spans = []
    for resource_span in payload["resourceSpans"]:
        resource = attributes(resource_span.get("resource", {}).get("attributes"))
        for scope_span in resource_span.get("scopeSpans", []):
            for span in scope_span.get("spans", []):
                spans.append({**span, "attrs": attributes(span.get("attributes")),
                              "resource": resource})
    return spans


def otlp_traces(lines: Iterable[tuple[int, str]]) -> tuple[list[tuple[int, str]], list[Rejected]]:
    """Parse OTLP JSON lines into native trace records (line of their first span, JSON text).

    Lines that are not OTLP and spans without a trace id are returned as rejected.
    """
    grouped: dict[str, list[dict[str, Any]]] = {}
    first_line: dict[str, int] = {}
    rejected: list[Rejected] = []
    for line_no, text in lines:
        if not text.strip():
            continue
        try:
            spans = _spans_of(json.loads(text))
        except json.JSONDecodeError as error:
            rejected.append(Rejected(line_no, f"invalid_json: {error}", preview(text)))
            continue
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            rejected.append(Rejected(line_no, f"not_otlp: {error!r}", preview(text)))
            continue
        for span in spans:
            trace_id = normalize_id(span.get("traceId"))
            if not trace_id:
                rejected.append(Rejected(line_no, "missing_trace_id: span without traceId",
                                         preview(json.dumps(span, default=str))))
                continue
            grouped.setdefault(trace_id, []).append(span)
            first_line.setdefault(trace_id, line_no)
    records = []
    for trace_id, spans in grouped.items():
        try:
            records.append((first_line[trace_id], json.dumps(assemble_trace(trace_id, spans))))
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            rejected.append(Rejected(first_line[trace_id], f"bad_otlp_trace: {error!r}",
                                     preview(json.dumps(spans, default=str))))
    return records, rejected
