"""A user's RAG service over HTTP as the system under test of the regression eval.

Each golden is one `POST` of JSON to the service; field names on both sides are configurable
(dotted paths for nested response fields). A timeout, an HTTP error, a reply that is not JSON
or lacks the answer raises `RagAppError`, which the runner records as an errored case (never
a passed one).

Request body (defaults): `{"query": <golden input>, "attributes": {language, query_type,
tenant}, ...extra}`. Response (defaults): `{"answer": str, "retrieval_context": [str |
{"chunk_id", "text"}]}`; the round trip's latency is added as `latency_ms`.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class RagAppError(RuntimeError):
    """The service did not give a usable answer for one case."""


@dataclass(frozen=True)
class HttpFields:
    """Where the request puts the query and attributes, and where the reply has its fields."""

    query: str = "query"
    attributes: str | None = "attributes"
    answer: str = "answer"
    retrieval_context: str | None = "retrieval_context"
    context_text: str = "text"  # key of the text when a context item is an object


@dataclass
class HttpRagApp:
    """Callable like a Python rag_app: `app(query, attributes=..., **extra) -> dict`."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 60.0
    fields: HttpFields = field(default_factory=HttpFields)

    def __call__(self, query: str, attributes: Mapping[str, Any] | None = None,
                 **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {**extra, self.fields.query: query}
        if self.fields.attributes:
            body[self.fields.attributes] = dict(attributes or {})
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json",
                     **self.headers})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                payload = response.read()
        except urllib.error.HTTPError as error:
            raise RagAppError(f"HTTP {error.code} from {self.url}") from error
        except (urllib.error.URLError, TimeoutError, OSError) as error:
            raise RagAppError(f"no reply from {self.url}: {error}") from error
        latency_ms = (time.perf_counter() - started) * 1000
        return parse_reply(payload, self.fields) | {"latency_ms": latency_ms}


def parse_reply(payload: bytes, fields: HttpFields) -> dict[str, Any]:
    """The answer and retrieval context of a reply, or `RagAppError` saying what is missing."""
    try:
        reply = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise RagAppError(f"reply is not JSON: {payload[:200]!r}") from error
    answer = dotted(reply, fields.answer)
    if not isinstance(answer, str):
        raise RagAppError(f"reply has no string at {fields.answer!r}")
    context = dotted(reply, fields.retrieval_context) if fields.retrieval_context else None
    if context is not None and not isinstance(context, list):
        raise RagAppError(f"reply's {fields.retrieval_context!r} is not a list")
    items = []
    for item in context or []:
        if isinstance(item, Mapping):
            text = item.get(fields.context_text)
            items.append({"chunk_id": item.get("chunk_id"), "text": text if isinstance(text, str) else ""})
        else:
            items.append({"chunk_id": None, "text": str(item)})
    return {"answer": answer, "retrieval_context": items}


def dotted(value: Any, path: str) -> Any:
    """`a.b.0.c` into nested objects and lists; None where the path does not lead."""
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value
