"""OTLP JSON files (the Collector's `file` exporter) into span rows: the span is the unit.

A line is one export batch: many spans of many traces, and one trace's spans spread over
lines and files. Each span is checked on its own, so a malformed span is refused with its
reason and span id while its neighbours on the line are kept. The record-size limit applies
to a span (its attributes as JSON), never to a line; a line is refused whole only when it is
not JSON or not an OTLP export at all.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from rag_loop.ingest.lines import Rejected, open_binary, oversized_reason, preview, whole_line_chunks
from rag_loop.ingest.parallel import ordered_map

# a line is an export batch: 512 spans by the SDK's default, 8,192 by a Collector's batcher
DEFAULT_MAX_LINE_BYTES = 256 << 20
_HEX_ID = re.compile(r"^[0-9a-fA-F]+$")
_INT64_MAX = (1 << 63) - 1
_encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(..., ensure_ascii=False), built once
SPAN_COLUMNS = {
    "trace_id": pa.string(), "span_id": pa.string(), "parent_span_id": pa.string(),
    "name": pa.string(), "start_ns": pa.int64(), "end_ns": pa.int64(),
    "status_code": pa.string(), "status_message": pa.string(), "attributes": pa.string(),
    "resource": pa.string(), "events": pa.string(), "source_line": pa.int64(),
}
_STATUS_CODES = {0: "unset", 1: "ok", 2: "error", "STATUS_CODE_UNSET": "unset",
                 "STATUS_CODE_OK": "ok", "STATUS_CODE_ERROR": "error"}


class BadSpan(ValueError):
    """A span that cannot be stored; the message is its quarantine reason."""


@dataclass
class SpanBatch:
    """Spans of consecutive lines of one file, as columns of `otlp_spans`, and what was refused."""

    spans: pa.Table
    rejected: list[Rejected] = field(default_factory=list)


def attribute_value(value: Any) -> Any:
    """Decode an OTLP `AnyValue` (int64 arrive as strings in OTLP JSON)."""
    if type(value) is not dict:
        raise BadSpan("not an AnyValue")
    if "stringValue" in value:  # most values: checked inline, this runs per attribute
        if type(value["stringValue"]) is str:
            return value["stringValue"]
        raise BadSpan("wrong_type")
    if "intValue" in value:
        return _int64(value["intValue"])
    if "doubleValue" in value:  # OTLP JSON spells non-finite doubles "NaN", "Infinity"
        number = value["doubleValue"]
        if isinstance(number, str) and number in ("NaN", "Infinity", "-Infinity"):
            return None
        number = float(_typed(number, (int, float)))
        return number if math.isfinite(number) else None
    if "boolValue" in value:
        return _typed(value["boolValue"], bool)
    if "arrayValue" in value:
        return [attribute_value(v) for v in _typed(value["arrayValue"], dict).get("values", [])]
    if "kvlistValue" in value:
        return attributes(_typed(value["kvlistValue"], dict).get("values", []))
    if "bytesValue" in value:
        return _typed(value["bytesValue"], str)
    return None


def attributes(items: Any) -> dict[str, Any]:
    """OTLP `KeyValue` list as a dict; a bad value names its key in the reason."""
    decoded: dict[str, Any] = {}
    if items is None:
        return decoded
    if type(items) is not list:
        raise BadSpan("wrong_type: attributes")
    for item in items:
        key = item.get("key") if type(item) is dict else None
        if type(key) is not str:
            raise BadSpan("wrong_type: attributes[].key")
        value = item.get("value")
        if type(value) is dict and type(value.get("stringValue")) is str:  # most: attribute_value's first case
            decoded[key] = value["stringValue"]
            continue
        try:
            decoded[key] = attribute_value(item.get("value", {}))
        except (BadSpan, TypeError, ValueError, OverflowError) as error:
            raise BadSpan(f"wrong_type: attributes.{key}") from error
    return decoded


def normalize_id(raw: Any) -> str | None:
    """Trace and span ids as lower-case hex: the Collector writes hex, protobuf JSON base64."""
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise BadSpan("wrong_type: id")
    if _HEX_ID.match(raw) and len(raw) in (16, 32):
        return raw.lower()
    if len(raw) in (12, 24):  # 8 or 16 bytes in base64
        try:
            return base64.b64decode(raw, validate=True).hex()
        except (binascii.Error, ValueError):
            pass
    return raw


def _typed(value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadSpan("wrong_type")
    return value


def _int64(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise BadSpan("wrong_type")
    number = int(value)
    if not -_INT64_MAX - 1 <= number <= _INT64_MAX:
        raise BadSpan("wrong_type: out of int64 range")
    return number


def _nanos(span: dict[str, Any], key: str) -> int | None:
    if span.get(key) in (None, "", "0", 0):
        return None
    try:
        number = _int64(span[key])
    except (BadSpan, ValueError) as error:
        raise BadSpan(f"wrong_type: {key}") from error
    if number < 0:
        raise BadSpan(f"wrong_type: {key}")
    return number


def span_row(span: Any, resource: str, line_no: int, max_record_bytes: int) -> dict[str, Any]:
    """One OTLP span as a row of `otlp_spans`; raises `BadSpan` with the quarantine reason."""
    if not isinstance(span, dict):
        raise BadSpan("not_an_object")
    try:
        trace_id = normalize_id(span.get("traceId"))
    except BadSpan:
        raise BadSpan("wrong_type: traceId") from None
    if not trace_id or not trace_id.strip():
        raise BadSpan("missing_trace_id")
    try:
        span_id = normalize_id(span.get("spanId"))
        parent = normalize_id(span.get("parentSpanId"))
    except BadSpan:
        raise BadSpan("wrong_type: spanId") from None
    if not span_id:
        raise BadSpan("missing_span_id")
    name = span.get("name", "")
    if not isinstance(name, str):
        raise BadSpan("wrong_type: name")
    status = span.get("status") or {}
    if not isinstance(status, dict):
        raise BadSpan("wrong_type: status")
    attrs = _encode(attributes(span.get("attributes")))
    if len(attrs) > max_record_bytes:
        raise BadSpan(oversized_reason(len(attrs), max_record_bytes))
    message = status.get("message")
    return {
        "trace_id": trace_id, "span_id": span_id, "parent_span_id": parent, "name": name,
        "start_ns": _nanos(span, "startTimeUnixNano"), "end_ns": _nanos(span, "endTimeUnixNano"),
        "status_code": _STATUS_CODES.get(status.get("code", 0), "unset"),
        "status_message": message if isinstance(message, str) else None,
        "attributes": attrs, "resource": resource, "events": _events(span.get("events")),
        "source_line": line_no,
    }


def _events(events: Any) -> str | None:
    """Span events (exceptions carry their message here), name and attributes only."""
    if not isinstance(events, list) or not events:
        return None
    kept = []
    for event in events:
        try:
            kept.append({"name": event.get("name"), "attrs": attributes(event.get("attributes"))})
        except (BadSpan, AttributeError):
            continue  # an unreadable event is not worth the span
    return _encode(kept)


def _resource_spans(payload: Any) -> Iterator[tuple[str, Any]]:
    """(resource attributes as JSON, span) for every span of one export; raises on non-OTLP."""
    if not isinstance(payload, dict) or not isinstance(payload.get("resourceSpans"), list):
        raise BadSpan("not_otlp: no resourceSpans list")
    for resource_span in payload["resourceSpans"]:
        if not isinstance(resource_span, dict):
            raise BadSpan("not_otlp: resourceSpans[] is not an object")
        try:
            resource = _encode(attributes((resource_span.get("resource") or {}).get("attributes")))
        except (BadSpan, AttributeError) as error:
            raise BadSpan(f"not_otlp: resource {error}") from error
        for scope_span in resource_span.get("scopeSpans") or []:
            if not isinstance(scope_span, dict) or not isinstance(scope_span.get("spans", []), list):
                raise BadSpan("not_otlp: scopeSpans[] is not an object with a spans list")
            for span in scope_span.get("spans", []):
                yield resource, span


def read_spans(path: Path, max_record_bytes: int, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
               batch_spans: int = 50_000, pool: Executor | None = None,
               block_bytes: int = 8 << 20) -> Iterator[SpanBatch]:
    """The spans of an OTLP JSON file (plain or gzip), a batch at a time, in line order.

    Blocks of whole lines are parsed by `pool` when given (a few blocks in flight, so memory
    stays bounded), else here.
    """
    parsed = ordered_map(pool, parse_block, ((block, first, max_record_bytes, max_line_bytes)
                                             for first, block in _numbered_blocks(path, block_bytes)))
    tables: list[pa.Table] = []
    rejected: list[Rejected] = []
    for batch in parsed:
        tables.append(batch.spans)
        rejected.extend(batch.rejected)
        if sum(t.num_rows for t in tables) >= batch_spans:
            yield SpanBatch(pa.concat_tables(tables), rejected)
            tables, rejected = [], []
    yield SpanBatch(pa.concat_tables(tables) if tables else _table([]), rejected)


def _numbered_blocks(path: Path, block_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(number of its first line, block of whole lines) over the file."""
    first = 1
    with open_binary(path) as handle:
        for block in whole_line_chunks(handle, block_bytes):
            yield first, block
            first += block.count(b"\n")


def parse_block(block: bytes, first_line: int, max_record_bytes: int,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> SpanBatch:
    """The spans of a block of whole lines (ending with a newline) whose first is `first_line`."""
    rows: list[dict[str, Any]] = []
    rejected: list[Rejected] = []
    for offset, raw in enumerate(block.split(b"\n")[:-1]):
        line = raw.rstrip(b"\r")
        if not line.strip():
            continue
        if len(line) > max_line_bytes:
            rejected.append(Rejected(first_line + offset, oversized_reason(len(line), max_line_bytes),
                                     preview(line)))
            continue
        _read_line(line, first_line + offset, max_record_bytes, rows, rejected)
    try:
        return SpanBatch(_table(rows), rejected)
    except UnicodeEncodeError:  # "\ud800" is valid JSON but no UTF-8 text: refuse that span only
        kept = [row for row in rows if _lone_surrogate(row) is None]
        rejected += [Rejected(row["source_line"], f"invalid_utf8: a lone surrogate in {_lone_surrogate(row)}",
                              preview(json.dumps(row)), row["span_id"]) for row in rows if _lone_surrogate(row)]
        return SpanBatch(_table(kept), rejected)


def _lone_surrogate(row: dict[str, Any]) -> str | None:
    """The first column of a span row whose text cannot be written as UTF-8, or None."""
    for name, value in row.items():
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return name
    return None


def _read_line(line: bytes, line_no: int, max_record_bytes: int, rows: list[dict[str, Any]],
               rejected: list[Rejected]) -> None:
    try:
        payload = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as error:
        rejected.append(Rejected(line_no, f"invalid_utf8: byte {error.start}", preview(line)))
        return
    except json.JSONDecodeError as error:  # its position within the line, not json's "line 1"
        rejected.append(Rejected(line_no, f"invalid_json: {error.msg} at column {error.colno}"[:300], preview(line)))
        return
    except RecursionError:
        rejected.append(Rejected(line_no, "invalid_json: nested too deeply", preview(line)))
        return
    spans_of_line = []
    try:
        for resource, span in _resource_spans(payload):
            try:
                spans_of_line.append(span_row(span, resource, line_no, max_record_bytes))
            except (BadSpan, RecursionError) as error:
                reason = str(error) if isinstance(error, BadSpan) else "wrong_type: too deep"
                span_id = span.get("spanId") if isinstance(span, dict) else None
                rejected.append(Rejected(line_no, reason, _span_preview(span),
                                         span_id if isinstance(span_id, str) else None))
    except BadSpan as error:
        rejected.append(Rejected(line_no, str(error), preview(line)))
        return
    rows.extend(spans_of_line)


def _span_preview(span: Any) -> str:
    try:
        return preview(json.dumps(span, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        return preview(repr(span))


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table({name: pa.array([row[name] for row in rows], kind)
                     for name, kind in SPAN_COLUMNS.items()})
