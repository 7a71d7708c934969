"""A team's own log shape mapped onto the trace model: one YAML mapping file per folder.

A mapping names, for each trace field, where its value is in a record (a JMESPath), or a
constant, with the conversions logs need (timestamp formats and epoch units, text columns of a
CSV read as numbers). It only moves values: the mapped record then takes the native reader's
path, so strict types, required fields and duplicates are checked exactly as for native JSONL.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jmespath
import yaml
from jmespath.exceptions import JMESPathError
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from rag_loop.schema import Feedback, RetrievedChunk, Span, Trace

MAPPING_FILE_NAMES = ("rag-loop-mapping.yaml", "rag-loop-mapping.yml")
FileFormat = Literal["jsonl", "json", "parquet", "csv"]
EPOCH_UNITS = {"epoch_s": 1, "epoch_ms": 1e3, "epoch_us": 1e6, "epoch_ns": 1e9}
NESTED_MODELS: dict[str, type[BaseModel]] = {"chunks": RetrievedChunk, "spans": Span, "feedback": Feedback}


class FieldSpec(BaseModel):
    """Where one field's value comes from: `path` (JMESPath in the record, or in the list
    element for `each`), a constant `value`, or the element's 1-based `position`; then `type`
    (a CSV's text read as a number...; `json` for a JSON text), `then` (a JMESPath into that
    value), `values` (a value renamed: `OK` to `ok`; one not listed is kept), `format`
    (timestamps: iso, epoch_s/ms/us/ns or a strptime pattern), `until` (the milliseconds from
    the instant at `path` to the one at `until`: a latency from start and end times), `hash` (a
    stable id from the value: chunks logged as bare text). `each` maps the elements of a list
    (chunks, spans); `fields` the parts of an object (feedback)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    value: Any = None
    position: bool = False
    format: str | None = None
    type: Literal["string", "int", "float", "bool", "json"] | None = None
    then: str | None = None
    values: dict[str, Any] | None = None
    until: str | None = None
    hash: bool = False
    each: dict[str, FieldSpec] | None = None
    fields: dict[str, FieldSpec] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _one_source(self) -> FieldSpec:
        sources = [self.path is not None, "value" in self.model_fields_set, self.position]
        if sum(sources) > 1:
            raise ValueError("give one of path, value, position")
        if not any(sources) and self.fields is None:
            raise ValueError("give a path, a value, a position or fields")
        if self.each is not None and self.path is None:
            raise ValueError("each needs the path of the list")
        if self.until is not None and self.path is None:
            raise ValueError("until needs the path of the start")
        for expression in (self.path, self.until, self.then):
            if expression is not None:
                jmespath.compile(expression)  # a bad expression fails the mapping, not every record
        if self.format is not None and self.format not in (*EPOCH_UNITS, "iso") and "%" not in self.format:
            raise ValueError(f"format {self.format!r}: iso, {', '.join(EPOCH_UNITS)} or a strptime pattern")
        return self


class FieldMap(BaseModel):
    """A mapping file: which files of its folder it reads (`files`, globs; default every file
    with a readable suffix), their format (default: from the suffix), where the records are in a
    JSON document (`records`), how rows of one trace are gathered into one record (`group_by`:
    an export with a row per span; the record is then `{"key": …, "rows": [...]}`), and the
    trace fields (`fields`)."""

    model_config = ConfigDict(extra="forbid")

    files: list[str] = []
    format: FileFormat | None = None
    records: str | None = None
    group_by: str | None = None
    fields: dict[str, FieldSpec]

    @model_validator(mode="after")
    def _known_fields(self) -> FieldMap:
        _check_targets(self.fields, Trace, "")
        for required in ("trace_id", "timestamp", "original_query"):
            if required not in self.fields:
                raise ValueError(f"fields: {required} is required (every trace has one)")
        for expression in (self.records, self.group_by):
            if expression is not None:
                jmespath.compile(expression)
        return self


def _check_targets(specs: dict[str, FieldSpec], model: type[BaseModel], prefix: str) -> None:
    for name, spec in specs.items():
        if name not in model.model_fields:
            raise ValueError(f"fields: {prefix}{name} is not a field of the trace model")
        inner = NESTED_MODELS.get(name) if not prefix else None
        if (spec.each is not None or spec.fields is not None) and inner is None:
            raise ValueError(f"fields: {prefix}{name} holds no list or object of fields")
        if spec.each is not None and name == "feedback":
            raise ValueError("fields: feedback is one object: use fields, not each")
        if spec.fields is not None and name != "feedback":
            raise ValueError(f"fields: {prefix}{name} is a list: use each")
        if inner is not None and spec.each is None and spec.fields is None:
            raise ValueError(f"fields: {prefix}{name} needs each (a list) or fields (an object)")
        for part in (spec.each, spec.fields):
            if part is not None:
                _check_targets(part, inner, f"{name}.")


@dataclass(frozen=True)
class Mapping:
    """A loaded mapping file: its model, where it is, and the hash recorded with what it reads."""

    spec: FieldMap
    path: Path
    digest: str

    def paths(self) -> dict[str, str]:
        """Each mapped field (chunks[].text for an element's) and where it comes from, as the
        preview and quarantine reasons name it."""
        return dict(_described(self.spec.fields, ""))


def _described(specs: dict[str, FieldSpec], prefix: str) -> list[tuple[str, str]]:
    found = []
    for name, spec in specs.items():
        if spec.each is not None:
            found += _described(spec.each, f"{prefix}{name}[].")
        elif spec.fields is not None:
            found += _described(spec.fields, f"{prefix}{name}.")
        else:
            where = (spec.path if spec.path is not None else "(position)" if spec.position
                     else f"(constant {json.dumps(spec.value, default=str)})")
            if spec.then is not None:
                where = f"{where} | {spec.then}"
            if spec.until is not None:
                where = f"{where} → {spec.until}"
            found.append((f"{prefix}{name}", where))
    return found


class MappingError(ValueError):
    """A mapping file that cannot be used: its message says which line or field."""


def load_mapping(path: Path) -> Mapping:
    """The mapping file at `path`, checked whole before any record is read."""
    try:
        data = path.read_bytes()
        loaded = yaml.safe_load(data)
        return Mapping(FieldMap.model_validate(loaded), path, hashlib.sha256(data).hexdigest()[:12])
    except (OSError, yaml.YAMLError, ValidationError, JMESPathError) as error:
        raise MappingError(f"{path}: {error}") from error


@dataclass
class MappedRecord:
    """One record as a trace (`trace`, the native shape), which fields resolved (a nested
    field counts when one element has it), and what failed: (field, path, why)."""

    trace: dict[str, Any]
    resolved: set[str] = field(default_factory=set)
    failures: list[tuple[str, str, str]] = field(default_factory=list)


def constant_value(spec: FieldSpec) -> tuple[Any, bool]:
    """A constant field's value after its conversions, and whether the mapping fails on it
    (the same for every record: the SQL path embeds it)."""
    mapped = MappedRecord({})
    value = _map_object(None, {"constant": spec}, "", mapped, None).get("constant")
    return value, bool(mapped.failures)


def parse_json(text: str | bytes) -> Any:
    """JSON text as Python values; a key repeated in an object keeps its first value, as DuckDB
    (the native reader, the SQL path) reads it."""
    return json.loads(text, object_pairs_hook=_first_wins)


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def map_record(record: Any, mapping: FieldMap) -> MappedRecord:
    """`record` (parsed JSON, a Parquet or CSV row) mapped by `mapping`; never raises."""
    mapped = MappedRecord({})
    mapped.trace = _map_object(record, mapping.fields, "", mapped, None)
    return mapped


def _map_object(node: Any, specs: dict[str, FieldSpec], prefix: str, mapped: MappedRecord,
                position: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        target = f"{prefix}{name}"
        try:
            value = _value(node, spec, target, mapped, position)
        except (ValueError, TypeError, OverflowError, JMESPathError) as error:
            mapped.failures.append((target, spec.path or "", str(error)[:200] or type(error).__name__))
            continue
        if value is not None:
            out[name] = value
            if spec.each is None and spec.fields is None:
                mapped.resolved.add(target)
    return out


def _value(node: Any, spec: FieldSpec, target: str, mapped: MappedRecord, position: int | None) -> Any:
    if spec.position:
        value: Any = position
    elif "value" in spec.model_fields_set:
        value = spec.value
    elif spec.path is not None:
        value = compiled_path(spec.path).search(node)
    else:
        value = node
    if value is None:
        return None
    if spec.type is not None:
        value = _typed(value, spec.type)
    if spec.then is not None:
        value = compiled_path(spec.then).search(value)
        if value is None:
            return None
    if spec.each is not None:
        if not isinstance(value, list):
            raise TypeError(f"not a list but {type(value).__name__}")
        return [_map_object(item, spec.each, f"{target}[].", mapped, n) for n, item in enumerate(value, start=1)]
    if spec.fields is not None:
        return _map_object(value, spec.fields, f"{target}.", mapped, position) or None
    if spec.until is not None:
        return _milliseconds(value, compiled_path(spec.until).search(node), spec.format or "iso")
    if spec.values is not None and isinstance(value, str | int | float | bool):
        value = spec.values.get(str(value).lower() if isinstance(value, bool) else str(value), value)
    if spec.format is not None:
        value = _timestamp(value, spec.format)
    if spec.hash:
        value = hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return value


@cache
def compiled_path(path: str) -> Any:
    return jmespath.compile(path)


_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no"}


def _typed(value: Any, kind: str) -> Any:
    """A text value (a CSV cell) read as `kind`; a value already of that type is kept."""
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, dict | list) else str(value)
    if kind == "json":
        return parse_json(value) if isinstance(value, str) else value
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return None
        if kind == "bool":
            if text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            raise ValueError(f"not a boolean: {text[:40]!r}")
        number = float(text) if kind == "float" else int(text)
        if kind == "float" and not math.isfinite(number):
            raise ValueError(f"not a finite number: {text[:40]!r}")
        return number
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _timestamp(value: Any, fmt: str) -> str:
    """An ISO 8601 instant (UTC where the value gives no offset) from `value` in `fmt`."""
    if isinstance(value, datetime):
        moment = value
    elif fmt in EPOCH_UNITS:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"not a number of {fmt[6:]}: {value!r:.40}")
        try:
            seconds = float(value) / EPOCH_UNITS[fmt]
        except ValueError:
            raise ValueError(f"not a number of {fmt[6:]}: {value!r:.40}") from None
        if not math.isfinite(seconds):
            raise ValueError(f"not a finite number: {value!r:.40}")
        moment = datetime.fromtimestamp(seconds, UTC)
    elif fmt == "iso":
        if not isinstance(value, str):
            raise TypeError(f"not an ISO 8601 text: {value!r:.40}")
        return value
    else:
        if not isinstance(value, str):
            raise TypeError(f"not a text in {fmt}: {value!r:.40}")
        moment = datetime.strptime(value, fmt)
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _milliseconds(start: Any, end: Any, fmt: str) -> float | None:
    """Milliseconds from `start` to `end`, two instants in `fmt`; None when the end is missing."""
    if end is None:
        return None
    first, last = (datetime.fromisoformat(_timestamp(v, fmt)) for v in (start, end))
    return (last - first).total_seconds() * 1000
