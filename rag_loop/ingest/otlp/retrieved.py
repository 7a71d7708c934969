"""What a retriever or reranker span says it returned: the documents as retrieval candidates,
or why they could not be read (then retrieval is unknown, never empty)."""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from typing import Any

Span = dict[str, Any]


def json_value(value: Any) -> Any:
    """Attributes that carry JSON as a string (document lists, metadata, messages)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
    return value


# where a document's id comes from, in this order (metadata keys, then the document's own id);
# a document with none of them gets `text:<hash of its text>`
DOC_ID_KEYS = ("doc_id", "document_id", "ref_doc_id", "source", "file_path", "file_name", "url")


GENAI_DOCUMENTS = "gen_ai.retrieval.documents"  # a JSON list as a string (the app's choice of shape)


_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def _indexed_documents(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference flattened documents: `<prefix>.N.document.<field>`."""
    found: dict[int, dict[str, Any]] = {}
    head = prefix + "."
    start = len(head)
    for key, value in attrs.items():
        if key.startswith(head):
            index, _, field = key[start:].partition(".document.")
            if field and index.isdigit():
                found.setdefault(int(index), {})[field] = value
    return [found[i] for i in sorted(found)]


def _output_documents(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """LangChain's retriever output `{"documents": [{"id", "metadata", "page_content"}]}`."""
    output = json_value(attrs.get("output.value"))
    documents = output.get("documents") if isinstance(output, dict) else None
    return [d for d in documents if isinstance(d, dict)] if isinstance(documents, list) else []


def candidate(document: dict[str, Any], position: int, fallback_id: Any = None) -> dict[str, Any]:
    """A retrieved document (any convention) as a native chunk record, ids by `DOC_ID_KEYS`."""
    metadata = document.get("metadata")
    if isinstance(metadata, str):  # short texts (most) through the cache, long ones read each time
        metadata = _metadata(metadata) if len(metadata) <= _CACHED_METADATA_CHARS else json_value(metadata)
    metadata = metadata if isinstance(metadata, dict) else {}
    merged = {**metadata, **{k: v for k, v in document.items() if k != "metadata" and v is not None}}
    text = merged.get("content", merged.get("text", merged.get("page_content")))
    text = text if isinstance(text, str) else None
    own_id = merged.get("id") if merged.get("id") is not None else fallback_id
    doc_id = doc_id_from = None
    for key in DOC_ID_KEYS:
        if merged.get(key):
            doc_id, doc_id_from = str(merged[key]), key
            break
    if doc_id is None and own_id is not None:
        doc_id, doc_id_from = str(own_id), "id"
    chunk_id = merged.get("chunk_id") or own_id
    if doc_id is None or chunk_id is None:
        digest = f"text:{hashlib.sha256((text or '').encode()).hexdigest()[:16]}"
        doc_id_from = doc_id_from or "text_hash"
        doc_id, chunk_id = doc_id or digest, chunk_id or digest
    return {
        "doc_id": doc_id, "doc_id_from": doc_id_from, "chunk_id": str(chunk_id),
        "doc_version": str_or_none(merged.get("doc_version", merged.get("version"))),
        "score": number_or_none(merged.get("score")), "rank": position + 1,
        "rerank_score": number_or_none(merged.get("rerank_score")), "rerank_rank": None,
        "selected": merged.get("selected") if isinstance(merged.get("selected"), bool) else None,
        "text": text,
    }


_CACHED_METADATA_CHARS = 2048  # at most 4,096 cached: 8 MB of text


@lru_cache(maxsize=4096)
def _metadata(text: str) -> Any:
    """A document's metadata JSON, read once per distinct text (the same chunks are retrieved
    over and over, and a reranker repeats its retriever's); read-only: `candidate` copies it."""
    return json_value(text)


def str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def number_or_none(value: Any) -> float | None:
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
    documents = [json_value(d) if isinstance(d, str) else d for d in value]  # items as JSON text
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


def retrieved(span: Span) -> tuple[list[dict[str, Any]], str | None]:
    raw, unreadable = _raw_documents(span["attrs"], "retrieval.documents")
    own_ids = [d.get("id") for d in _output_documents(span["attrs"])]
    own_ids = own_ids if len(own_ids) == len(raw) else [None] * len(raw)
    return [candidate(d, i, own_ids[i]) for i, d in enumerate(raw) if isinstance(d, dict)], unreadable


def reranked(span: Span) -> tuple[list[dict[str, Any]], str | None]:
    raw, unreadable = _raw_documents(span["attrs"], "reranker.output_documents")
    return [candidate(d, i) for i, d in enumerate(raw) if isinstance(d, dict)], unreadable


def merge_rerank(candidates: list[dict[str, Any]], reranked: list[dict[str, Any]]) -> None:
    """Give each retrieved candidate its rerank score and rank (reranked list order)."""
    by_chunk = {c["chunk_id"]: c for c in candidates}
    for position, doc in enumerate(reranked):
        target = by_chunk.get(doc["chunk_id"])
        if target is None:
            target = {**doc, "score": None, "rank": None}
            candidates.append(target)
        target["rerank_score"] = doc["score"] if doc.get("rerank_score") is None else doc["rerank_score"]
        target["rerank_rank"] = position + 1
