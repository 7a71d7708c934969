"""Curator labels: validation row by row, storage that never loses what a curator wrote.

A label file (JSONL or CSV, rows shaped like the curation queue) is read once; its valid rows
land in `curated_labels`, its invalid rows in `label_errors` with every problem listed (a row
is validated by the pydantic model `LabelRow`). A relabel of a trace supersedes the earlier
label (latest `labeled_at`, then the later file and line); both rows are kept. A file is read only
once settled (see `store_label_files`), and its rows are stored with one statement per table.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, get_args

import duckdb
import pandas as pd
import pyarrow as pa
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo
from pydantic_core import PydanticCustomError

from rag_loop.curation.queue_files import read_queue
from rag_loop.logs import Log, quiet
from rag_loop.schema import FailureType, Origin
from rag_loop.store.ddl import LABELS_DDL

Decision = Literal["accept", "reject", "skip"]
DECISIONS: tuple[str, ...] = get_args(Decision)
EARLIEST_LABEL = datetime(2000, 1, 1, tzinfo=UTC)
MAX_TAG_CHARS = 40
LABEL_SUFFIXES = (".jsonl", ".csv")
ORIGINS, FAILURE_TYPES = tuple(Origin), tuple(FailureType)  # once: iterating an enum per row is slow


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
    decision: Annotated[Decision, BeforeValidator(lambda value: _one_of(_text(value).lower(), DECISIONS))] = Field("")
    expected_output: Annotated[Text, _if_accepted(lambda text, _: text or _fail("required to accept"))] = ""
    origin: Annotated[Text, _if_accepted(lambda text, _: _one_of(text, ORIGINS))] = ""
    failure_type: Annotated[Text, _if_accepted(lambda text, _: _one_of(text, FAILURE_TYPES))] = ""
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


@dataclass
class LabelReport:
    files: int = 0
    stored: int = 0
    rejected: int = 0
    warnings: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # "path: why" of files not read yet (maybe being written)


def label_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in LABEL_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(directory).parts))


def _unsettled(stat: os.stat_result, settle_seconds: float, now: datetime | None) -> str | None:
    """Why a file may still be being written (modified under `settle_seconds` ago), or None."""
    age = (now.timestamp() if now else time.time()) - stat.st_mtime_ns / 1e9
    if settle_seconds <= 0 or age >= settle_seconds:  # no settle time: read any file, as before
        return None
    if age < 0:
        return f"modified {-age:.1f} s in the future (clock skew?), waiting for {settle_seconds:g} s after it"
    return f"modified {age:.1f} s ago, under the {settle_seconds:g} s settle time: may still be being written"


def store_label_files(con: duckdb.DuckDBPyConnection, directory: Path, log: Log = quiet,
                      settle_seconds: float = 0.0, now: datetime | None = None) -> LabelReport:
    """Read the label files not read before (by path, size, mtime), one transaction per file.

    A file is read only once it is stable: modified at least `settle_seconds` before `now`
    (default: the clock) and unchanged in size and mtime while it was read. Any other file is
    listed in `LabelReport.waiting`, not recorded in `label_files`, so a later call reads it."""
    con.execute(LABELS_DDL)
    known, report = KnownSources.load(con), LabelReport()
    traces = {t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()}
    for path in label_files(directory):
        relative, stat = str(path.relative_to(directory)), path.stat()
        if con.execute("SELECT 1 FROM label_files WHERE path = ? AND size = ? AND mtime_ns = ?",
                       [relative, stat.st_size, stat.st_mtime_ns]).fetchall():
            continue
        if why := _unsettled(stat, settle_seconds, now):
            report.waiting.append(f"{relative}: {why}")
            log(f"{relative}: not read yet, {why}")
            continue
        rows = _read_rows(path)
        after = path.stat()
        if (after.st_size, after.st_mtime_ns) != (stat.st_size, stat.st_mtime_ns):
            report.waiting.append(f"{relative}: changed while it was read: still being written")
            log(f"{relative}: not read yet, it changed while it was read")
            continue
        labels: dict[str, dict[str, Any]] = {}  # by label_id: a later row of the same id wins
        errors: list[dict[str, Any]] = []
        file_time = datetime.fromtimestamp(stat.st_mtime, UTC)
        for line_no, row in rows:
            checked = check_label(row, known, traces)
            if checked.errors:
                error = {"file": relative, "line": line_no, "trace_id": checked.values["trace_id"],
                         "errors": checked.errors}
                report.errors.append(error)
                errors.append({**error, "raw": json.dumps(row, ensure_ascii=False, default=str)[:4000]})
                continue
            report.warnings += len(checked.warnings)
            label = _label_values(checked, relative, line_no, file_time)
            labels[label["label_id"]] = label
        stored, rejected = len(rows) - len(errors), len(errors)
        con.execute("BEGIN")
        try:
            for table in ("curated_labels", "label_errors"):  # an edited file replaces what it said
                con.execute(f"DELETE FROM {table} WHERE source_file = ?", [relative])
            _insert_frame(con, LABEL_COLUMNS, list(labels.values()), """
                INSERT OR REPLACE INTO curated_labels BY NAME
                SELECT *, now() AS stored_at FROM {frame}""")
            _insert_frame(con, ERROR_COLUMNS, errors, """
                INSERT INTO label_errors (source_file, line_no, trace_id, errors, raw, found_at)
                SELECT file, line, trace_id, errors, raw, now() FROM {frame}""")
            con.execute("INSERT INTO label_files VALUES (?, ?, ?, ?, ?, ?, now())",
                        [relative, stat.st_size, stat.st_mtime_ns, len(rows), stored, rejected])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        report.files += 1
        report.stored += stored
        report.rejected += rejected
        log(f"{relative}: {stored} labels stored, {rejected} rejected")
    return report


_TEXT, _TEXTS = pa.string(), pa.list_(pa.string())
LABEL_COLUMNS = pa.schema([  # curated_labels but stored_at (now())
    ("label_id", _TEXT), ("trace_id", _TEXT), ("decision", _TEXT), ("input", _TEXT),
    ("expected_output", _TEXT), ("expected_sources", _TEXTS), ("tags", _TEXTS), ("origin", _TEXT),
    ("failure_type", _TEXT), ("curator", _TEXT), ("labeled_at", pa.timestamp("us", tz="UTC")),
    ("cluster_id", _TEXT), ("cluster_weight", pa.float64()), ("priority", _TEXT),
    ("source_trace_ids", _TEXTS), ("warnings", _TEXTS), ("source_file", _TEXT), ("line_no", pa.int64()),
    ("suggested_failure_type", _TEXT), ("judge_score", pa.float64())])
ERROR_COLUMNS = pa.schema([("file", _TEXT), ("line", pa.int64()), ("trace_id", _TEXT), ("errors", _TEXTS),
                           ("raw", _TEXT)])


def _insert_frame(con: duckdb.DuckDBPyConnection, schema: pa.Schema, rows: list[dict[str, Any]],
                  statement: str) -> None:
    """One INSERT of `rows` (dicts with the schema's keys) through an Arrow table."""
    if not rows:
        return
    name = f"_label_rows_{id(rows):x}"
    con.register(name, pa.Table.from_pylist(rows, schema=schema))
    try:
        con.execute(statement.format(frame=name))
    finally:
        con.unregister(name)


def _read_rows(path: Path) -> list[tuple[int, dict]]:
    """Numbered rows of a label file; a line that is not a JSON object, or not UTF-8, becomes
    an error row (a CSV that cannot be read at all is one error row, line 0)."""
    if path.suffix == ".csv":
        try:
            return list(enumerate(read_queue(path), start=2))  # line 1 is the header
        except (UnicodeDecodeError, ValueError, pd.errors.ParserError) as error:
            return [(0, {"_unparsable": f"unreadable CSV: {error}"[:300]})]
    rows = []
    for line_no, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8-sig" if line_no == 1 else "utf-8"))
        except UnicodeDecodeError as error:
            row = {"_unparsable": f"not UTF-8 (byte {error.start})"}
        except RecursionError:
            row = {"_unparsable": "invalid JSON: nested too deeply"}
        except ValueError as error:  # a JSONDecodeError, or an integer of more than 4300 digits
            row = {"_unparsable": f"invalid JSON: {getattr(error, 'msg', 'a number too long')}"}
        rows.append((line_no, row if isinstance(row, dict) else {"_unparsable": "not an object"}))
    return rows


def _label_values(checked: CheckedLabel, source_file: str, line_no: int,
                  file_time: datetime) -> dict[str, Any]:
    """A `curated_labels` row (but stored_at) of a valid label; empty optional texts are NULL."""
    v = checked.values
    return {"label_id": hashlib.sha256(f"{source_file}:{line_no}:{v['trace_id']}".encode()).hexdigest()[:16],
            "trace_id": v["trace_id"], "decision": v["decision"], "input": v.get("input") or None,
            "expected_output": v["expected_output"], "expected_sources": v["expected_sources"],
            "tags": v["tags"], "origin": v["origin"] or None, "failure_type": v["failure_type"] or None,
            "curator": v.get("curator") or None, "labeled_at": v["labeled_at"] or file_time,
            "cluster_id": v.get("cluster_id") or None, "cluster_weight": v["cluster_weight"],
            "priority": v.get("priority") or None, "source_trace_ids": v["source_trace_ids"],
            "warnings": checked.warnings, "source_file": source_file, "line_no": line_no,
            "suggested_failure_type": v["suggested_failure_type"] or None, "judge_score": v["judge_score"]}


def label_summary(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    con.execute(LABELS_DDL)
    row = con.execute("""
        SELECT (SELECT count(*) FROM curated_labels), (SELECT count(*) FROM label_errors),
               count(*) FILTER (decision = 'accept'), count(*) FILTER (decision = 'reject'),
               count(*) FILTER (decision = 'skip') FROM current_labels""").fetchall()[0]
    return dict(zip(("labels", "rejected_rows", "current_accept", "current_reject",
                     "current_skip"), row, strict=True))

