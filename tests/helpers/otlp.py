"""OTLP JSON builders: spans of a request trace, export lines, files; hostile spans."""

import json
from datetime import UTC, datetime

from hypothesis import strategies as st

T0 = int(datetime(2026, 11, 11, 10, tzinfo=UTC).timestamp() * 1e9)


AFTER = datetime(2026, 11, 11, 10, 30, tzinfo=UTC)  # within the grace period of every span


def trace_hex(n: int) -> str:
    return f"{n:032x}"


def span(trace: int, span_id: int, parent: int | None, name: str, attrs: dict, start_ms: int = 0,
         end_ms: int = 100, **extra) -> dict:
    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": v}
    return {"traceId": trace_hex(trace), "spanId": f"{trace:08x}{span_id:08x}",
            "parentSpanId": f"{trace:08x}{parent:08x}" if parent is not None else "",
            "name": name, "kind": 1, "startTimeUnixNano": str(T0 + start_ms * 1_000_000),
            "endTimeUnixNano": str(T0 + end_ms * 1_000_000),
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()],
            "status": {}, **extra}


def request_spans(trace: int, query: str = "How many leave days?") -> list[dict]:
    """Root CHAIN, RETRIEVER with one document, LLM: a whole OpenInference request."""
    return [
        span(trace, 1, None, "chain", {"openinference.span.kind": "CHAIN", "input.value": query},
             0, 900),
        span(trace, 2, 1, "retrieve", {"openinference.span.kind": "RETRIEVER", "input.value": query,
                                       "retrieval.documents.0.document.id": "leave@1#a",
                                       "retrieval.documents.0.document.score": 0.8,
                                       "retrieval.documents.0.document.metadata":
                                           json.dumps({"doc_id": "leave"})}, 10, 100),
        span(trace, 3, 1, "llm", {"openinference.span.kind": "LLM", "llm.model_name": "m",
                                  "output.value": f"answer {trace}"}, 100, 800),
    ]


def shifted(span: dict, ms: int) -> dict:
    """The span started and ended `ms` milliseconds later (earlier when negative)."""
    return span | {key: str(int(span[key]) + ms * 1_000_000) for key in ("startTimeUnixNano", "endTimeUnixNano")}


def line(spans: list[dict]) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                          "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]})


def write(path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(text + "\n" for text in lines))


SPAN_KEYS = ("traceId", "spanId", "parentSpanId", "name", "startTimeUnixNano",
             "endTimeUnixNano", "attributes", "status", "events")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)
any_value = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"intValue": json_values, "doubleValue": json_values,
                                        "stringValue": json_values, "arrayValue": json_values,
                                        "kvlistValue": json_values, "boolValue": json_values}))


@st.composite
def hostile_span(draw, trace: int):
    """A good request span with one part replaced by something hostile."""
    span = dict(draw(st.sampled_from(request_spans(trace))))
    target = draw(st.sampled_from(SPAN_KEYS + ("attribute value", "drop")))
    if target == "attribute value":
        span["attributes"] = span["attributes"] + [{"key": draw(st.text(max_size=8)),
                                                    "value": draw(any_value)}]
    elif target == "drop":
        span.pop(draw(st.sampled_from(SPAN_KEYS[:6])), None)
    else:
        span[target] = draw(json_values)
    return span
