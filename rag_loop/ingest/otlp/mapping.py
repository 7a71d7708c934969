"""The spans of one trace (OpenInference or OpenTelemetry GenAI) folded into a native record.

What each instrumentation emits was measured on files written by the real libraries
(`tests/fixtures/otlp/EMITTED.md`); the README has the mapping as a table per framework.
In short:

- span kind: `openinference.span.kind`, or `gen_ai.operation.name` (retrieval, rerank, chat,
  invoke_workflow, embeddings);
- the user's query: the root span's input (`gen_ai.input.messages`' last user text, or
  `input.value`, plain or a JSON object such as LangChain's `{"input", "chat_history"}` or
  LlamaIndex's `{"message"}`); the retrieval query (`gen_ai.retrieval.query.text` or the
  RETRIEVER's `input.value`) is the rewritten query when it differs;
- the answer: the final LLM call's output (`llm.output_messages`, `gen_ai.output.messages`),
  and only when no LLM was called the root's output (LlamaIndex's "Empty Response");
- documents: the RETRIEVER's documents; ids by `DOC_ID_KEYS` (a text hash when none);
  a RERANKER's output documents are the context actually used. A documents attribute that
  is there but cannot be read (not JSON, JSON cut off by an SDK's attribute length limit, not
  a list, items that are not objects) is "retrieval unknown", never "nothing retrieved": the
  record's `retrieval_unreadable` says why (and a reranker's unreadable output leaves
  `selected` unknown);
- models and tokens: per LLM call (an LLM span with no LLM span below it), summed over the
  trace, the final call's kept too;
- the Langfuse SDK's observations are read through these conventions (`otlp/langfuse.py`);
- who: the session (`session.id`, `gen_ai.conversation.id`) within the service that emitted it
  (the resource's `service.name`: two services reuse session ids), the user (`user.id`,
  `enduser.id`), the environment (`deployment.environment[.name]`).

What neither convention has comes from `rag.<field>` attributes named after native trace
fields (`rag.prompt_version`, `rag.tenant`, `rag.feedback.rating`, `rag.context_chunk_ids`...).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rag_loop.ingest.otlp.langfuse import as_known_conventions
from rag_loop.ingest.otlp.retrieved import (
    Span,
    json_value,
    merge_rerank,
    number_or_none,
    reranked,
    retrieved,
    str_or_none,
)
from rag_loop.schema import NESTED_FIELDS, Trace

_KINDS = {"retrieval": "RETRIEVER", "rerank": "RERANKER", "chat": "LLM", "text_completion": "LLM",
          "generate_content": "LLM", "invoke_workflow": "CHAIN", "invoke_agent": "CHAIN",
          "embeddings": "EMBEDDING"}
# keys of a framework's input object that hold what the user typed, in this order
QUERY_KEYS = ("input", "question", "query", "message", "query_str", "user_input", "content")


def span_kind(attrs: dict[str, Any]) -> str | None:
    if "openinference.span.kind" in attrs:
        return str(attrs["openinference.span.kind"]).upper()
    return _KINDS.get(attrs.get("gen_ai.operation.name"))


def _iso(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, tz=UTC).isoformat()


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _message_text(messages: Any, role: str | None = None) -> str | None:
    """Text of the last (`role`) message of a GenAI messages list (JSON string or list).

    `parts` is a list of `{"type": "text", "content"}` parts; `parts` given as a string (the
    text itself, or a JSON-encoded list) and a message with a `content` string and no parts
    are read too, so the query or the answer is not lost."""
    messages = json_value(messages)
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, dict) and (role is None or message.get("role") == role):
            text = _parts_text(message.get("parts"))
            if text is None and not message.get("parts"):
                text = _text(message.get("content"))
            if text is not None:
                return text
    return None


def _parts_text(parts: Any) -> str | None:
    """The text parts of a message, joined; a string of parts is a JSON list or the text."""
    if isinstance(parts, str):
        parsed = json_value(parts) if parts.lstrip()[:1] == "[" else None
        if not isinstance(parsed, list):
            return _text(parts)
        parts = parsed
    if not isinstance(parts, list):
        return None
    texts = [p if isinstance(p, str) else p.get("content") for p in parts
             if isinstance(p, str) or isinstance(p, dict) and p.get("type") == "text"
             and isinstance(p.get("content"), str)]
    return "".join(texts) if texts else None


def _input_text(value: Any, keys: tuple[str, ...] = QUERY_KEYS) -> str | None:
    """What a span's `input.value` says the user asked: plain text, or a known key of a JSON
    object (LangChain `{"input"}`, LlamaIndex `{"message"}`, `{"query_bundle": {"query_str"}}`)."""
    if not isinstance(value, str):
        return None
    parsed = json_value(value) if value.lstrip()[:1] in ("{", "[", '"') else None
    if parsed is None:
        return _text(value)
    if isinstance(parsed, str):
        return _text(parsed)
    if isinstance(parsed, dict):
        for key in keys:
            if isinstance(parsed.get(key), str):
                return _text(parsed[key])
        bundle = parsed.get("query_bundle")
        if isinstance(bundle, dict):
            return _text(bundle.get("query_str"))
    return None


def user_query(span: Span) -> str | None:
    """What the user typed, as the root span carries it."""
    attrs = span["attrs"]
    return (_text(attrs.get("rag.original_query"))
            or _message_text(attrs.get("gen_ai.input.messages"), "user")
            or _input_text(attrs.get("input.value")))


def _retrieval_query(span: Span) -> str | None:
    attrs = span["attrs"]
    return _text(attrs.get("gen_ai.retrieval.query.text")) or _input_text(attrs.get("input.value"))


def _llm_call(span: Span) -> dict[str, Any]:
    """Model, tokens and output of one LLM call."""
    attrs = span["attrs"]
    params = json_value(attrs.get("llm.invocation_parameters"))
    params = params if isinstance(params, dict) else {}
    named = str_or_none(attrs.get("llm.model_name"))
    requested = str_or_none(attrs.get("gen_ai.request.model") or params.get("model")
                             or params.get("model_name")) or named
    responded = str_or_none(attrs.get("gen_ai.response.model"))
    if responded is None and named != requested:  # LangChain: llm.model_name is the response's
        responded = named
    reasons = _finish_reasons(attrs.get("gen_ai.response.finish_reasons"))
    output = (_text(attrs.get("llm.output_messages.0.message.content"))
              or _message_text(attrs.get("gen_ai.output.messages"), "assistant"))
    if output is None and attrs.get("output.mime_type") != "application/json":
        output = _text(attrs.get("output.value"))
    temperature = attrs.get("gen_ai.request.temperature", params.get("temperature"))
    return {
        "model_name": requested, "response_model": responded,
        "provider": str_or_none(attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")
                                 or attrs.get("llm.provider")),
        "input_tokens": _count(attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt"))),
        "output_tokens": _count(attrs.get("gen_ai.usage.output_tokens",
                                          attrs.get("llm.token_count.completion"))),
        "temperature": number_or_none(temperature),
        "finish_reason": reasons[0] if reasons else str_or_none(attrs.get("llm.finish_reason")),
        "answer": output,
    }


def _finish_reasons(value: Any) -> list[str]:
    """`gen_ai.response.finish_reasons`: a string array; a plain string is one reason (or a
    JSON-encoded array, as SDKs that only set strings write it)."""
    if isinstance(value, str):
        parsed = json_value(value) if value.lstrip()[:1] == "[" else None
        value = parsed if isinstance(parsed, list) else [value]
    if not isinstance(value, list):
        return []
    return [str(r).strip() for r in value if r is not None and str(r).strip()]


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _llm_calls(spans: list[Span]) -> list[Span]:
    """LLM spans with no LLM span below them (LlamaIndex wraps each HTTP call in `predict`)."""
    llm = [s for s in spans if span_kind(s["attrs"]) == "LLM"]
    parents = {s["parent_span_id"] for s in llm}
    return [s for s in llm if s["span_id"] not in parents]


def _rag_fields(attrs: dict[str, Any]) -> dict[str, Any]:
    """`rag.<field>` attributes named after native trace fields."""
    fields = {k[4:]: v for k, v in attrs.items()
              if k.startswith("rag.") and k[4:] in Trace.model_fields and k[4:] not in NESTED_FIELDS}
    feedback = {k[13:]: v for k, v in attrs.items() if k.startswith("rag.feedback.")}
    if feedback:
        fields["feedback"] = feedback
    if isinstance(fields.get("filters"), str):
        fields["filters"] = json_value(fields["filters"])
    return fields


def _root(spans: list[Span]) -> Span | None:
    return next((s for s in spans if not s["parent_span_id"]), None)


def _known_conventions(spans: list[Span]) -> list[Span]:
    """The spans with the attributes of other conventions (the Langfuse SDK's) read as the ones
    this mapping knows."""
    return [{**s, "attrs": as_known_conventions(s["attrs"])} for s in spans]


def is_request(spans: list[Span]) -> bool:
    """A user request retrieves, calls an LLM, or its root carries a query; indexing traces
    (splitting and embedding the knowledge base) do none of these."""
    return _is_request(_known_conventions(spans))


def request_record(trace_id: str, spans: list[Span]) -> dict[str, Any] | None:
    """`assemble_trace(trace_id, spans)` when `is_request(spans)`, else None (the spans'
    conventions read once for both)."""
    known = _known_conventions(spans)
    return _assemble(trace_id, known) if _is_request(known) else None


def _is_request(spans: list[Span]) -> bool:
    if any(span_kind(s["attrs"]) in ("RETRIEVER", "LLM", "RERANKER") for s in spans):
        return True
    root = _root(spans)
    return root is not None and user_query(root) is not None


def _answer_without_llm(root: Span | None) -> str | None:
    """A turn answered with no LLM call (LlamaIndex "Empty Response"): the root's output."""
    if root is None:
        return None
    attrs = root["attrs"]
    return (_message_text(attrs.get("gen_ai.output.messages"), "assistant")
            or _input_text(attrs.get("output.value"), ("answer", "response", "output")))


def _error(spans: list[Span]) -> str | None:
    """The first line of the innermost failed span's message (tracebacks are left out)."""
    failed = [s for s in spans if s["status_code"] == "error"]
    if not failed:
        return None
    parents = {s["parent_span_id"] for s in failed}
    innermost = next((s for s in failed if s["span_id"] not in parents), failed[0])
    message = innermost["status_message"] or innermost["attrs"].get("error.type") or "error"
    return str(message).strip().splitlines()[0][:500]


def assemble_trace(trace_id: str, spans: list[Span]) -> dict[str, Any]:
    """Fold the spans of one trace (rows of `otlp_spans`, attributes decoded) into a record."""
    return _assemble(trace_id, _known_conventions(spans))


def _assemble(trace_id: str, spans: list[Span]) -> dict[str, Any]:
    spans = sorted(spans, key=lambda s: (s["start_ns"] or 0, s["span_id"]))
    root = _root(spans)
    starts = [s["start_ns"] for s in spans if s["start_ns"]]
    ends = [s["end_ns"] for s in spans if s["end_ns"]]
    record: dict[str, Any] = {"trace_id": trace_id,
                              "timestamp": _iso(min(starts)) if starts else None,
                              "latency_ms": (max(ends) - min(starts)) / 1e6 if ends and starts else None}
    for span in spans:
        attrs = span["attrs"]
        session = attrs.get("session.id", attrs.get("gen_ai.conversation.id"))
        if session is not None:
            record.setdefault("session_id", str(session))
        if "gen_ai.conversation.id" in attrs:
            record.setdefault("conversation_id", str(attrs["gen_ai.conversation.id"]))
        user = attrs.get("user.id", attrs.get("enduser.id"))
        if user is not None:
            record.setdefault("user_id", str(user))
        resource = span["resource"]
        for field, keys in (("environment", ("deployment.environment.name", "deployment.environment")),
                            ("service", ("service.name",))):
            value = next((resource[k] for k in keys if resource.get(k) is not None), None)
            if value is not None:
                record.setdefault(field, str(value))
    record.update(_generation(spans, root))
    record.update(_retrieval(spans, root, record.get("original_query")))
    error = _error(spans)
    if error:
        record["status"], record["error"] = "error", error
    record["spans"] = [_span_record(s) for s in spans]
    for span in [s for s in spans if s is not root] + ([root] if root else []):
        record.update(_rag_fields(span["attrs"]))  # rag.* on the root wins: applied last
    if record.get("rewritten_query") == record.get("original_query"):
        record["rewritten_query"] = None
    return record


def _generation(spans: list[Span], root: Span | None) -> dict[str, Any]:
    """The user's query, the answer, models and tokens (summed over the trace's LLM calls)."""
    calls = [_llm_call(s) for s in _llm_calls(spans)]
    final = calls[-1] if calls else {}
    fields: dict[str, Any] = {k: final.get(k) for k in ("model_name", "response_model", "provider",
                                                          "temperature", "finish_reason")}
    fields["answer"] = final.get("answer") if calls else _answer_without_llm(root)
    fields["llm_calls"] = len(calls)
    for side in ("input", "output"):
        counted = [c[f"{side}_tokens"] for c in calls if c[f"{side}_tokens"] is not None]
        fields[f"{side}_tokens"] = sum(counted) if counted else None
        fields[f"final_{side}_tokens"] = final.get(f"{side}_tokens")
    fields["original_query"] = user_query(root) if root else None
    return {k: v for k, v in fields.items() if v is not None}


def _retrieval(spans: list[Span], root: Span | None, typed: str | None) -> dict[str, Any]:
    """Candidates of the first retriever that returned documents, rerank, the context used."""
    retrievers = [(s, *retrieved(s)) for s in spans if span_kind(s["attrs"]) == "RETRIEVER"]
    retriever, candidates, _ = next((r for r in retrievers if r[1]), retrievers[0] if retrievers
                                    else (None, [], None))
    unreadable = [f"{s['name'] or 'retriever'}: {why}" for s, _, why in retrievers if why]
    query = _retrieval_query(retriever) if retriever else None
    rerankers = [s for s in spans if span_kind(s["attrs"]) == "RERANKER"]
    fields: dict[str, Any] = {"original_query": typed or query}
    if query and typed and query != typed:
        fields["rewritten_query"] = query
    if rerankers:
        kept_documents, why = reranked(rerankers[-1])
        if why:  # what the reranker kept is unknown: `selected` is left as it is
            unreadable.append(f"{rerankers[-1]['name'] or 'reranker'}: {why}")
        merge_rerank(candidates, kept_documents)
        kept = {d["chunk_id"] for d in kept_documents}
        for chunk in candidates if not why else []:
            chunk["selected"] = chunk["chunk_id"] in kept
        model = rerankers[-1]["attrs"].get("reranker.model_name")
        if model:
            fields["reranker_model"] = str(model)
    chosen = next((s["attrs"]["rag.context_chunk_ids"] for s in ([root] if root else []) + spans
                   if "rag.context_chunk_ids" in s["attrs"]), None)
    if isinstance(chosen, list):
        for chunk in candidates:
            chunk["selected"] = chunk["chunk_id"] in chosen
    fields["chunks"] = candidates
    if unreadable:
        fields["retrieval_unreadable"] = "; ".join(unreadable)[:500]
    return {k: v for k, v in fields.items() if v is not None}


def _span_record(span: Span) -> dict[str, Any]:
    start, end = span["start_ns"], span["end_ns"]
    return {"name": span["name"] or "span", "span_id": span["span_id"],
            "parent_span_id": span["parent_span_id"],
            "kind": span_kind(span["attrs"]) or span["attrs"].get("gen_ai.operation.name"),
            "start_time": _iso(start) if start else None,
            "duration_ms": (end - start) / 1e6 if start and end else None,
            "status": "error" if span["status_code"] == "error" else "ok"}
