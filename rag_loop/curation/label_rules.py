"""What makes a curator row a label: the pydantic model `LabelRow`, validated with the known
sources and trace ids as its context, every field's error collected in the curator's words
(`field: message`), and the sources a label may name."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, NoReturn, get_args

import duckdb
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rag_loop.schema import FailureType, Origin

Decision = Literal["accept", "reject", "later"]
DECISION_ALIASES = {"skip": "later"}  # the terminal labeller's old word: a later is a skip that comes back


DECISIONS: tuple[str, ...] = get_args(Decision)


EARLIEST_LABEL = datetime(2000, 1, 1, tzinfo=UTC)
ORIGINS, FAILURE_TYPES = tuple(Origin), tuple(FailureType)  # once: iterating an enum per row is slow


MAX_TAG_CHARS = 40

# curators grading the online judge (seed 004 §15): per metric it scored, agree / disagree with
# its verdict, or their own pass / fail (the workspace offers it for OWN_VERDICT_METRICS)
GRADES = ("agree", "disagree")
OWN_VERDICT_METRICS = ("Faithfulness", "Answer Relevancy")
MAX_GRADES = 20  # a trace is judged on a few metrics, not hundreds
MAX_METRIC_CHARS = 120


# The citable sources, one row per chunk (or per chunkless document version): what curators
# search (`knowledge.parquet`) and what `expected_sources` may name (`KnownSources.load`).
# The knowledge base's chunks when it has the document; else what production traces
# retrieved (doc_id, chunk_id, doc_version, text where a trace sent it), so a deployment
# without a KB export can still cite sources. For a traffic source `source_updated_at` is
# when it was first seen and its newest version the one seen most recently.
CITABLE_SOURCES = """
WITH kb AS (
    SELECT c.chunk_id, doc_id, version, d.title, d.language, c.text, d.source_updated_at,
           arg_max(version, d.source_updated_at) OVER (PARTITION BY doc_id) AS newest_version
    FROM documents d FULL JOIN document_chunks c USING (doc_id, version)),
seen AS (
    SELECT k.chunk_id, k.doc_id, k.doc_version AS version, nullif(k.text, '') AS text, r."timestamp",
           arg_max(k.doc_version, r."timestamp") OVER (PARTITION BY k.doc_id) AS newest_version
    FROM trace_chunks k JOIN raw_traces r USING (trace_id)
    ANTI JOIN kb ON kb.doc_id = k.doc_id
    ANTI JOIN kb AS known_chunk ON known_chunk.chunk_id = k.chunk_id
    WHERE nullif(k.doc_id, '') IS NOT NULL)
SELECT *, 'knowledge_base' AS seen_in FROM kb
UNION ALL
SELECT chunk_id, doc_id, version, NULL AS title, NULL AS language,
       coalesce(arg_max(text, "timestamp"), any_value(text)) AS text, min("timestamp") AS source_updated_at,
       any_value(newest_version) AS newest_version, 'traces' AS seen_in
FROM seen GROUP BY chunk_id, doc_id, version
ORDER BY doc_id, version NULLS FIRST, chunk_id NULLS FIRST"""


@dataclass
class KnownSources:
    """What `expected_sources` may name: document versions and chunk ids."""

    newest: dict[str, str | None]  # doc_id -> newest version (None: no version seen)
    versions: set[tuple[str, str]]
    chunks: set[str]
    chunk_versions: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # chunk -> (doc, version)

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str | None, str, str | None, str | None]]) -> KnownSources:
        """From (chunk_id, doc_id, version, newest_version) rows of `CITABLE_SOURCES`."""
        known = cls({}, set(), set())
        for chunk_id, doc_id, version, newest in rows:
            known.newest[doc_id] = newest
            if version is not None:
                known.versions.add((doc_id, version))
            if chunk_id is not None:
                known.chunks.add(chunk_id)
                if chunk_id not in known.chunk_versions or version == newest:  # in several versions: the newest
                    known.chunk_versions[chunk_id] = (doc_id, version)
        return known

    @classmethod
    def load(cls, con: duckdb.DuckDBPyConnection) -> KnownSources:
        return cls.from_rows(con.execute(
            f"SELECT chunk_id, doc_id, version, newest_version FROM ({CITABLE_SOURCES})").fetchall())


@dataclass
class CheckedLabel:
    values: dict[str, Any]
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def source_parts(source: str, known: KnownSources) -> tuple[str, str | None, bool]:
    """(doc id, version, whether a chunk is named) of a source: a known chunk's own, a known
    document id whole, else `doc@version[#chunk]` split at the @ that gives a known version,
    else at the first @ after a known document, else at the first @ (or `doc#chunk`)."""
    if source in known.chunk_versions:
        return *known.chunk_versions[source], False
    if source in known.newest:
        return source, None, False
    splits = [(source[:i], source[i + 1:]) for i, char in enumerate(source) if char == "@"]
    if not splits:
        doc_id, hash_, _ = source.partition("#")
        return doc_id, None, bool(hash_)

    def version_of(doc_id: str, rest: str) -> str:
        return rest if (doc_id, rest) in known.versions else rest.partition("#")[0]
    doc_id, rest = next((s for s in splits if (s[0], version_of(*s)) in known.versions),
                        next((s for s in splits if s[0] in known.newest), splits[0]))
    version = version_of(doc_id, rest)
    return doc_id, version, version != rest


def check_source(source: str, known: KnownSources) -> tuple[str | None, str | None]:
    """(error, warning) for one expected source: a known chunk id, `doc`, `doc@version` or
    `doc@version#chunk`; a version other than the document's newest is a warning."""
    doc_id, version, names_chunk = source_parts(source, known)
    if source not in known.chunks:
        if doc_id not in known.newest:
            return f"expected_sources: unknown document {doc_id!r}", None
        if version is not None and (doc_id, version) not in known.versions:
            return f"expected_sources: {doc_id} has no version {version!r}", None
        if names_chunk:
            return f"expected_sources: unknown chunk {source!r}", None
    newest = known.newest.get(doc_id)
    if version is not None and newest is not None and version != newest:
        return None, f"expected_sources: {source} is not the newest version ({newest})"
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


def _verdict(value: Any) -> bool | None:
    """A pass/fail verdict: a JSON boolean, or "pass" / "fail" / "true" / "false" in any case;
    empty is None. A number or any other text is an error (never Python's truthiness)."""
    if value is None or isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text in ("pass", "true", "fail", "false", ""):
        return None if text == "" else text in ("pass", "true")
    return _fail(f"{str(value)[:50]!r} is not pass or fail")


def _grade_list(value: Any) -> list:
    """Judge grades: a list of objects, or its JSON text (a CSV cell); empty is none."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            _fail("not a JSON list of grades")
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        _fail("must be a list of objects (metric, grade and/or curator_passed)")
    return value if len(value) <= MAX_GRADES else _fail(f"{len(value)} grades, at most {MAX_GRADES}")


def _metric_name(name: str) -> str:
    if not name:
        _fail("missing")
    return name if len(name) <= MAX_METRIC_CHARS and "\n" not in name else \
        _fail(f"{name[:50]!r} is not a metric name (≤ {MAX_METRIC_CHARS} chars, one line)")


Verdict = Annotated[bool | None, BeforeValidator(_verdict)]


Number = Annotated[float | None, BeforeValidator(_number)]


KnownTrace = AfterValidator(lambda trace_id, info: trace_id if trace_id and trace_id in info.context["traces"]
                            else _fail(f"unknown trace {trace_id!r}" if trace_id else "missing"))


ShortTag = _if_accepted(lambda tag, _: tag if len(tag) <= MAX_TAG_CHARS and "\n" not in tag
                        else _fail(f"{tag[:50]!r} is not a short tag (≤ {MAX_TAG_CHARS} chars)"))


class JudgeGrade(BaseModel):
    """A curator's grade of one verdict the online judge gave the trace: what they were shown
    (metric, judge version, verdict, score) and what they say: `grade` agree / disagree with the
    verdict, and/or `curator_passed`, their own verdict. At least one is given; both must agree
    with each other; a grade needs a verdict to grade (a monitoring-only metric has none)."""

    metric: Annotated[str, BeforeValidator(_text), AfterValidator(_metric_name)] = ""
    judge_version: Annotated[str, BeforeValidator(_text), AfterValidator(
        lambda v: v if len(v) <= 64 else _fail("longer than 64 characters"))] = ""
    judge_passed: Verdict = None
    judge_score: Number = None
    grade: Annotated[str, BeforeValidator(lambda value: _one_of(_text(value).lower(), GRADES)
                                          if _text(value) else "")] = ""
    curator_passed: Verdict = None

    model_config = ConfigDict(validate_default=True)

    @model_validator(mode="after")
    def _consistent(self) -> JudgeGrade:
        if not self.grade and self.curator_passed is None:
            _fail(f"{self.metric}: neither a grade (agree / disagree) nor the curator's pass / fail")
        if self.grade and self.judge_passed is None:
            _fail(f"{self.metric}: {self.grade} with what? the judge gave no pass / fail verdict")
        if self.grade and self.curator_passed is not None and \
                (self.grade == "agree") != (self.curator_passed == self.judge_passed):
            _fail(f"{self.metric}: {self.grade} contradicts the curator's own "
                  f"{'pass' if self.curator_passed else 'fail'} against the judge's "
                  f"{'pass' if self.judge_passed else 'fail'}")
        return self

    def human_passed(self) -> bool | None:
        """The curator's verdict: their own, else the judge's agreed with or turned over."""
        if self.curator_passed is not None:
            return self.curator_passed
        return None if self.judge_passed is None else self.judge_passed == (self.grade == "agree")


def _one_grade_per_metric(grades: list[JudgeGrade]) -> list[JudgeGrade]:
    seen = [g.metric for g in grades]
    twice = sorted({m for m in seen if seen.count(m) > 1})
    return grades if not twice else _fail(f"graded twice in one label: {', '.join(twice)[:200]}")


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
    judge_grades: Annotated[list[JudgeGrade], BeforeValidator(_grade_list),
                            AfterValidator(_one_grade_per_metric)] = []


def _error_words(error: Any) -> str:
    """`field: message`; for a judge grade, which one (`judge_grades #2 grade: ...`)."""
    loc = error["loc"]
    if loc[0] == "judge_grades" and len(loc) > 1:
        where = " ".join(f"#{part + 1}" if isinstance(part, int) else str(part) for part in loc[1:])
        return f"judge_grades {where}: {error['msg']}"
    return f"{loc[0]}: {error['msg']}"


def check_label(row: dict[str, Any], known: KnownSources, traces: Container[str]) -> CheckedLabel:
    """Validate one curator row with `LabelRow`: normalized values, or every error as `field: message`."""
    if "_unparsable" in row:
        return CheckedLabel({"trace_id": "", "decision": ""}, [row["_unparsable"]])
    warnings: list[str] = []
    try:
        label = LabelRow.model_validate(row, context={"known": known, "traces": traces, "warnings": warnings})
    except ValidationError as invalid:
        trace_id = row.get("trace_id")  # an invalid row's values are empty but for its trace_id
        values = LabelRow.model_construct(trace_id=trace_id.strip() if isinstance(trace_id, str) else "").model_dump()
        return CheckedLabel(values, [_error_words(e) for e in invalid.errors()], warnings)
    return CheckedLabel(label.model_dump(), [], warnings)
