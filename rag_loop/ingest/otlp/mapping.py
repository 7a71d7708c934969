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
  trace, the final call's kept too.

What neither convention has comes from `rag.<field>` attributes named after native trace
fields (`rag.prompt_version`, `rag.tenant`, `rag.feedback.rating`, `rag.context_chunk_ids`...).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

from rag_loop.schema import NESTED_FIELDS, Trace

_KINDS = {"retrieval": "RETRIEVER", "rerank": "RERANKER", "chat": "LLM", "text_completion": "LLM",
          "generate_content": "LLM", "invoke_workflow": "CHAIN", "invoke_agent": "CHAIN",
          "embeddings": "EMBEDDING"}
# keys of a framework's input object that hold what the user typed, in this order
QUERY_KEYS = ("input", "question", "query", "message", "query_str", "user_input", "content")
# where a document's id comes from, in this order (metadata keys, then the document's own id);
# a document with none of them gets `text:<hash of its text>`
DOC_ID_KEYS = ("doc_id", "document_id", "ref_doc_id", "source", "file_path", "file_name", "url")
GENAI_DOCUMENTS = "gen_ai.retrieval.documents"  # a JSON list as a string (the app's choice of shape)
Span = dict[str, Any]
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def span_kind(attrs: dict[str, Any]) -> str | None:
    if "openinference.span.kind" in attrs:
        return str(attrs["openinference.span.kind"]).upper()
    return _KINDS.get(attrs.get("gen_ai.operation.name"))


def _iso(nanos: int) -> str:
    return datetime.fromtimestamp(nanos / 1e9, tz=UTC).isoformat()


def _json_value(value: Any) -> Any:
    """Attributes that carry JSON as a string (document lists, metadata, messages)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
    return value


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def _message_text(messages: Any, role: str | None = None) -> str | None:
    """Text of the last (`role`) message of a GenAI messages list (JSON string or list).

    `parts` is a list of `{"type": "text", "content"}` parts; `parts` given as a string (the
    text itself, or a JSON-encoded list) and a message with a `content` string and no parts
    are read too, so the query or the answer is not lost."""
    messages = _json_value(messages)
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
        parsed = _json_value(parts) if parts.lstrip()[:1] == "[" else None
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
    parsed = _json_value(value) if value.lstrip()[:1] in ("{", "[", '"') else None
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


def _indexed_documents(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference flattened documents: `<prefix>.N.document.<field>`."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix + "."):
            index, _, field = key[len(prefix) + 1:].partition(".document.")
            if index.isdigit() and field:
                found.setdefault(int(index), {})[field] = value
    return [found[i] for i in sorted(found)]


def _output_documents(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """LangChain's retriever output `{"documents": [{"id", "metadata", "page_content"}]}`."""
    output = _json_value(attrs.get("output.value"))
    documents = output.get("documents") if isinstance(output, dict) else None
    return [d for d in documents if isinstance(d, dict)] if isinstance(documents, list) else []


def candidate(document: dict[str, Any], position: int, fallback_id: Any = None) -> dict[str, Any]:
    """A retrieved document (any convention) as a native chunk record, ids by `DOC_ID_KEYS`."""
    metadata = _json_value(document.get("metadata"))
    metadata = metadata if isinstance(metadata, dict) else {}
    merged = {**metadata, **{k: v for k, v in document.items() if k != "metadata" and v is not None}}
    text = merged.get("content", merged.get("text", merged.get("page_content")))
    text = text if isinstance(text, str) else None
    own_id = merged.get("id") if merged.get("id") is not None else fallback_id
    doc_id, doc_id_from = next(((str(merged[k]), k) for k in DOC_ID_KEYS if merged.get(k)),
                               (None, None))
    if doc_id is None and own_id is not None:
        doc_id, doc_id_from = str(own_id), "id"
    chunk_id = merged.get("chunk_id") or own_id
    if doc_id is None or chunk_id is None:
        digest = f"text:{hashlib.sha256((text or '').encode()).hexdigest()[:16]}"
        doc_id_from = doc_id_from or "text_hash"
        doc_id, chunk_id = doc_id or digest, chunk_id or digest
    return {
        "doc_id": doc_id, "doc_id_from": doc_id_from, "chunk_id": str(chunk_id),
        "doc_version": _str_or_none(merged.get("doc_version", merged.get("version"))),
        "score": _number(merged.get("score")), "rank": position + 1,
        "rerank_score": _number(merged.get("rerank_score")), "rerank_rank": None,
        "selected": merged.get("selected") if isinstance(merged.get("selected"), bool) else None,
        "text": text,
    }


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _raw_documents(attrs: dict[str, Any], prefix: str) -> tuple[list[Any], str | None]:
    """A span's documents: the GenAI JSON list, else OpenInference's `<prefix>.N.document.*`;
    and why they could not be read (None when they could, or when there are none)."""
    if GENAI_DOCUMENTS in attrs:
        return _genai_documents(attrs[GENAI_DOCUMENTS])
    return _indexed_documents(attrs, prefix), None


def _genai_documents(value: Any) -> tuple[list[Any], str | None]:
    """`gen_ai.retrieval.documents` (a JSON string, or an OTLP array): its documents, and
    why it is unreadable. Only a readable empty list means nothing was retrieved."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            if value.lstrip()[:1] in ("[", "{") and (error.msg.startswith("Unterminated string")
                                                     or error.pos >= len(value.rstrip())):
                kept = [d for d in _complete_items(value) if isinstance(d, dict)]
                return kept, (f"{GENAI_DOCUMENTS}: JSON cut off at {len(value)} chars (an "
                              f"attribute length limit?), {len(kept)} whole documents read")
            return [], f"{GENAI_DOCUMENTS}: not JSON ({len(value)} chars)"
        except RecursionError:
            return [], f"{GENAI_DOCUMENTS}: JSON nested too deeply"
    if not isinstance(value, list):
        found = "an object" if isinstance(value, dict) else "null" if value is None \
            else type(value).__name__
        return [], f"{GENAI_DOCUMENTS}: {found}, not a list"
    documents = [_json_value(d) if isinstance(d, str) else d for d in value]  # items as JSON text
    bad = sum(not isinstance(d, dict) for d in documents)
    if bad:
        return ([d for d in documents if isinstance(d, dict)],
                f"{GENAI_DOCUMENTS}: {bad} of {len(documents)} items are not objects")
    return documents, None


def _complete_items(text: str) -> list[Any]:
    """The whole items at the start of a JSON list that was cut off (`[{...}, {...}, {..`)."""
    decoder, items = json.JSONDecoder(), []
    position = text.find("[") + 1 if text.lstrip().startswith("[") else len(text)
    while position < len(text):
        position = _JSON_SPACE.match(text, position).end()
        try:
            item, position = decoder.raw_decode(text, position)
        except (json.JSONDecodeError, RecursionError):
            break
        items.append(item)
        position = _JSON_SPACE.match(text, position).end()
        if text[position:position + 1] != ",":
            break
        position += 1
    return items


def _retrieved(span: Span) -> tuple[list[dict[str, Any]], str | None]:
    raw, unreadable = _raw_documents(span["attrs"], "retrieval.documents")
    own_ids = [d.get("id") for d in _output_documents(span["attrs"])]
    own_ids = own_ids if len(own_ids) == len(raw) else [None] * len(raw)
    return [candidate(d, i, own_ids[i]) for i, d in enumerate(raw) if isinstance(d, dict)], unreadable


def _reranked(span: Span) -> tuple[list[dict[str, Any]], str | None]:
    raw, unreadable = _raw_documents(span["attrs"], "reranker.output_documents")
    return [candidate(d, i) for i, d in enumerate(raw) if isinstance(d, dict)], unreadable


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


def _llm_call(span: Span) -> dict[str, Any]:
    """Model, tokens and output of one LLM call."""
    attrs = span["attrs"]
    params = _json_value(attrs.get("llm.invocation_parameters"))
    params = params if isinstance(params, dict) else {}
    named = _str_or_none(attrs.get("llm.model_name"))
    requested = _str_or_none(attrs.get("gen_ai.request.model") or params.get("model")
                             or params.get("model_name")) or named
    responded = _str_or_none(attrs.get("gen_ai.response.model"))
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
        "provider": _str_or_none(attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")
                                 or attrs.get("llm.provider")),
        "input_tokens": _count(attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt"))),
        "output_tokens": _count(attrs.get("gen_ai.usage.output_tokens",
                                          attrs.get("llm.token_count.completion"))),
        "temperature": _number(temperature),
        "finish_reason": reasons[0] if reasons else _str_or_none(attrs.get("llm.finish_reason")),
        "answer": output,
    }


def _finish_reasons(value: Any) -> list[str]:
    """`gen_ai.response.finish_reasons`: a string array; a plain string is one reason (or a
    JSON-encoded array, as SDKs that only set strings write it)."""
    if isinstance(value, str):
        parsed = _json_value(value) if value.lstrip()[:1] == "[" else None
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
        fields["filters"] = _json_value(fields["filters"])
    return fields


def _root(spans: list[Span]) -> Span | None:
    return next((s for s in spans if not s["parent_span_id"]), None)


def is_request(spans: list[Span]) -> bool:
    """A user request retrieves, calls an LLM, or its root carries a query; indexing traces
    (splitting and embedding the knowledge base) do none of these."""
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
        environment = span["resource"].get("deployment.environment.name",
                                           span["resource"].get("deployment.environment"))
        if environment is not None:
            record.setdefault("environment", str(environment))
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
    retrievers = [(s, *_retrieved(s)) for s in spans if span_kind(s["attrs"]) == "RETRIEVER"]
    retriever, candidates, _ = next((r for r in retrievers if r[1]), retrievers[0] if retrievers
                                    else (None, [], None))
    unreadable = [f"{s['name'] or 'retriever'}: {why}" for s, _, why in retrievers if why]
    query = _retrieval_query(retriever) if retriever else None
    rerankers = [s for s in spans if span_kind(s["attrs"]) == "RERANKER"]
    fields: dict[str, Any] = {"original_query": typed or query}
    if query and typed and query != typed:
        fields["rewritten_query"] = query
    if rerankers:
        reranked, why = _reranked(rerankers[-1])
        if why:  # what the reranker kept is unknown: `selected` is left as it is
            unreadable.append(f"{rerankers[-1]['name'] or 'reranker'}: {why}")
        _merge_rerank(candidates, reranked)
        kept = {d["chunk_id"] for d in reranked}
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
