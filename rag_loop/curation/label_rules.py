"""What makes a curator row a label: the pydantic model `LabelRow`, validated with the known
sources and trace ids as its context, every field's error collected in the curator's words
(`field: message`), and the sources a label may name."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, NoReturn, get_args

import duckdb
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from rag_loop.schema import FailureType, Origin

Decision = Literal["accept", "reject", "later"]
DECISION_ALIASES = {"skip": "later"}  # the terminal labeller's old word: a later is a skip that comes back


DECISIONS: tuple[str, ...] = get_args(Decision)


EARLIEST_LABEL = datetime(2000, 1, 1, tzinfo=UTC)
ORIGINS, FAILURE_TYPES = tuple(Origin), tuple(FailureType)  # once: iterating an enum per row is slow


MAX_TAG_CHARS = 40


@dataclass
class KnownSources:
    """What `expected_sources` may name: document versions and chunk ids."""

    newest: dict[str, str]  # doc_id -> newest version (by source_updated_at)
    versions: set[tuple[str, str]]
    chunks: set[str]

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> KnownSources:
        rows = con.execute("SELECT doc_id, version FROM documents ORDER BY source_updated_at").fetchall()
        chunks = {c for (c,) in con.execute("SELECT chunk_id FROM document_chunks").fetchall()}
        return cls({d: v for d, v in rows}, set(rows), chunks)


@dataclass
class CheckedLabel:
    values: dict[str, Any]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_source(source: str, known: KnownSources) -> tuple[str | None, str | None]:
    """(error, warning) for one expected source: `doc`, `doc@version` or a chunk id."""
    doc_id, _, rest = source.partition("@")
    doc_id = doc_id.split("#")[0]
    version = rest.split("#")[0] if rest else None
    if doc_id not in known.newest:
        return f"expected_sources: unknown document {doc_id!r}", None
    if version is not None and (doc_id, version) not in known.versions:
        return f"expected_sources: {doc_id} has no version {version!r}", None
    if "#" in source and source not in known.chunks:
        return f"expected_sources: unknown chunk {source!r}", None
    if version is not None and version != known.newest[doc_id]:
        return None, f"expected_sources: {source} is not the newest version ({known.newest[doc_id]})"
    return None, None


def _fail(message: str) -> NoReturn:
    """A validation error in our words (not a template: a user's text may hold braces)."""
    raise PydanticCustomError("label", message)


def _text(value: Any) -> str:
    """Text, stripped; None is empty. A number, list or dict is an error, never its repr."""
    if value is not None and not isinstance(value, str):
        _fail(f"must be text, not {type(value).__name__}")
    return (value or "").strip()


def _string_list(value: Any) -> list[str]:
    """Non-empty stripped strings from a list, a JSON list text or a comma-separated text."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip().startswith("[") else value.split(",")
        except (ValueError, RecursionError):
            _fail("not a JSON list")
    if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
        _fail("must be a list of strings")
    return [v.strip() for v in value or [] if v.strip()]


def _number(value: Any) -> float | None:
    """A finite, non-negative number, or a text that is one; empty is None, a boolean no number."""
    if value is None or value == "":
        return None
    try:
        number = float(str(value) if isinstance(value, bool) else value)  # float("True") fails
    except (TypeError, ValueError, OverflowError):
        _fail(f"{str(value)[:50]!r} is not a number")
    return number if math.isfinite(number) and number >= 0 else _fail(f"{number} is not a finite, non-negative number")


def _timestamp(value: Any) -> datetime | None:
    """An ISO 8601 text in [EARLIEST_LABEL, now + a day of clock skew], as UTC; empty is None."""
    if value is None or value == "":
        return None  # the file's time is used
    if not isinstance(value, str):
        _fail(f"{value!r} is not an ISO 8601 timestamp text")
    try:  # ISO 8601 only: "now", "Nov 5 2026" or "5/11/2026" (month first?) are refused
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        _fail(f"{value[:50]!r} is not an ISO 8601 timestamp")
    parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if not EARLIEST_LABEL <= parsed <= datetime.now(UTC) + timedelta(days=1):
        _fail(f"{value[:50]!r} is not between {EARLIEST_LABEL.date()} and now")
    return parsed


def _decision(value: Any) -> str:
    text = _text(value).lower()
    return DECISION_ALIASES.get(text, text)


def _one_of(value: str, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices` (StrEnum members are their values), else today's error."""
    return value if value in choices else _fail(f"{value!r} is not one of {', '.join(choices)}")


def _known_source(source: str, info: ValidationInfo) -> str:
    """An expected source must exist; an older version is a warning (into the context)."""
    error, warning = check_source(source, info.context["known"])
    info.context["warnings"] += [warning] if warning else []
    return _fail(error.removeprefix("expected_sources: ")) if error else source


def _if_accepted(check: Callable[[Any, ValidationInfo], Any]) -> AfterValidator:
    """An accept rule: a reject or skip needs no expectation, an invalid decision checks none."""
    return AfterValidator(lambda value, info: check(value, info) if info.data.get("decision") == "accept" else value)


Text = Annotated[str, BeforeValidator(_text)]


Number = Annotated[float | None, BeforeValidator(_number)]


KnownTrace = AfterValidator(lambda trace_id, info: trace_id if trace_id and trace_id in info.context["traces"]
                            else _fail(f"unknown trace {trace_id!r}" if trace_id else "missing"))


ShortTag = _if_accepted(lambda tag, _: tag if len(tag) <= MAX_TAG_CHARS and "\n" not in tag
                        else _fail(f"{tag[:50]!r} is not a short tag (≤ {MAX_TAG_CHARS} chars)"))


class LabelRow(BaseModel):
    """One curator row, normalized, every field's error collected. Fields validate in order, so the
    accept rules see a valid `decision` in `info.data`. Context: known, traces (ids), warnings (a list)."""

    model_config = ConfigDict(validate_default=True)  # an absent trace_id or decision is an error

    input: Text = ""
    curator: Text = ""
    cluster_id: Text = ""
    priority: Text = ""
    cluster_weight: Number = None
    suggested_failure_type: Text = ""
    judge_score: Number = None
    trace_id: Annotated[Text, KnownTrace] = ""
    decision: Annotated[Decision, BeforeValidator(lambda value: _one_of(_decision(value), DECISIONS))] = Field("")
    reject_reason: Text = ""
    expected_output: Annotated[Text, _if_accepted(lambda text, _: text or _fail("required to accept"))] = ""
    origin: Annotated[Text, _if_accepted(lambda text, _: _one_of(text.lower(), ORIGINS))] = ""
    failure_type: Annotated[Text, _if_accepted(lambda text, _: _one_of(text.lower(), FAILURE_TYPES))] = ""
    expected_sources: Annotated[list[Annotated[str, _if_accepted(_known_source)]], BeforeValidator(_string_list)] = []
    tags: Annotated[list[Annotated[str, ShortTag]], BeforeValidator(_string_list)] = []
    source_trace_ids: Annotated[list[str], BeforeValidator(_string_list), AfterValidator(  # else the row's own trace
        lambda ids, info: ids or [info.data.get("trace_id", "")])] = Field([], validation_alias="variant_trace_ids")
    labeled_at: Annotated[datetime | None, BeforeValidator(_timestamp)] = None


def check_label(row: dict[str, Any], known: KnownSources, traces: set[str]) -> CheckedLabel:
    """Validate one curator row with `LabelRow`: normalized values, or every error as `field: message`."""
    if "_unparsable" in row:
        return CheckedLabel({"trace_id": "", "decision": ""}, [row["_unparsable"]])
    warnings: list[str] = []
    try:
        label = LabelRow.model_validate(row, context={"known": known, "traces": traces, "warnings": warnings})
    except ValidationError as invalid:
        trace_id = row.get("trace_id")  # an invalid row's values are empty but for its trace_id
        values = LabelRow.model_construct(trace_id=trace_id.strip() if isinstance(trace_id, str) else "").model_dump()
        return CheckedLabel(values, [f"{e['loc'][0]}: {e['msg']}" for e in invalid.errors()], warnings)
    return CheckedLabel(label.model_dump(), [], warnings)
