"""Curator labels: validation row by row, storage that never loses what a curator wrote.

A label file (JSONL or CSV, rows shaped like the curation queue) is read once; its valid rows
land in `curated_labels`, its invalid rows in `label_errors` with every problem listed. A
relabel of a trace supersedes the earlier label (latest `labeled_at`, then the later file and
line); both rows are kept.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from rag_loop.curation.queue_files import read_queue
from rag_loop.logs import Log, quiet
from rag_loop.schema import FailureType, Origin
from rag_loop.store.ddl import LABELS_DDL

DECISIONS = ("accept", "reject", "skip")
EARLIEST_LABEL = pd.Timestamp("2000-01-01", tz="UTC")
MAX_TAG_CHARS = 40
LABEL_SUFFIXES = (".jsonl", ".csv")


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


def check_label(row: dict[str, Any], known: KnownSources, traces: set[str]) -> CheckedLabel:
    """Validate one curator row; the values come back normalized (lists, stripped text)."""
    values: dict[str, Any] = {}
    checked = CheckedLabel(values)
    if "_unparsable" in row:
        checked.values.update(trace_id="", decision="")
        checked.errors.append(row["_unparsable"])
        return checked
    for key in ("input", "curator", "cluster_id", "priority"):
        values[key] = _text(row.get(key), key, checked)
    values["cluster_weight"] = _number(row.get("cluster_weight"), "cluster_weight", checked)
    values["suggested_failure_type"] = _text(row.get("suggested_failure_type"),
                                             "suggested_failure_type", checked)
    values["judge_score"] = _number(row.get("judge_score"), "judge_score", checked)
    trace_id = _text(row.get("trace_id"), "trace_id", checked)
    values["trace_id"] = trace_id
    if not trace_id:
        checked.errors.append("trace_id: missing")
    elif trace_id not in traces:
        checked.errors.append(f"trace_id: unknown trace {trace_id!r}")
    decision = _text(row.get("decision"), "decision", checked).lower()
    values["decision"] = decision
    if decision not in DECISIONS:
        checked.errors.append(f"decision: {decision!r} is not one of {', '.join(DECISIONS)}")
    for key in ("expected_output", "origin", "failure_type"):
        values[key] = _text(row.get(key), key, checked)
    values["expected_sources"] = _string_list(row.get("expected_sources"), "expected_sources", checked)
    values["tags"] = _string_list(row.get("tags"), "tags", checked)
    values["source_trace_ids"] = _string_list(row.get("variant_trace_ids"), "variant_trace_ids",
                                              checked) or [trace_id]
    values["labeled_at"] = _timestamp(row.get("labeled_at"), checked)
    if decision == "accept":
        if not values["expected_output"]:
            checked.errors.append("expected_output: required to accept")
        if values["origin"] not in {o.value for o in Origin}:
            checked.errors.append(f"origin: {values['origin']!r} is not one of "
                                  f"{', '.join(o.value for o in Origin)}")
        if values["failure_type"] not in {f.value for f in FailureType}:
            checked.errors.append(f"failure_type: {values['failure_type']!r} is not one of "
                                  f"{', '.join(f.value for f in FailureType)}")
        for source in values["expected_sources"]:
            error, warning = check_source(source, known)
            checked.errors += [error] if error else []
            checked.warnings += [warning] if warning else []
        for tag in values["tags"]:
            if len(tag) > MAX_TAG_CHARS or "\n" in tag:
                checked.errors.append(f"tags: {tag[:50]!r} is not a short tag (≤ {MAX_TAG_CHARS} chars)")
    return checked


def _string_list(value: Any, name: str, checked: CheckedLabel) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                checked.errors.append(f"{name}: not a JSON list")
                return []
        else:
            value = [part for part in text.split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        checked.errors.append(f"{name}: must be a list of strings")
        return []
    return [v.strip() for v in value if v.strip()]


def _text(value: Any, name: str, checked: CheckedLabel) -> str:
    """A text field, stripped; anything but text (a list, a number...) is an error."""
    if value is None:
        return ""
    if not isinstance(value, str):
        checked.errors.append(f"{name}: must be text, not {type(value).__name__}")
        return ""
    return value.strip()


def _number(value: Any, name: str, checked: CheckedLabel) -> float | None:
    """A finite, non-negative number (or a text that is one); empty is None."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        checked.errors.append(f"{name}: {str(value)[:50]!r} is not a number")
        return None
    if not math.isfinite(number) or number < 0:
        checked.errors.append(f"{name}: {number} is not a finite, non-negative number")
        return None
    return number


def _timestamp(value: Any, checked: CheckedLabel) -> datetime | None:
    """An ISO 8601 text timestamp within [EARLIEST_LABEL, now + a day of clock skew]."""
    if value in (None, ""):
        return None  # the file's time is used
    if not isinstance(value, str):
        checked.errors.append(f"labeled_at: {value!r} is not an ISO 8601 timestamp text")
        return None
    try:
        parsed = pd.Timestamp(value)
        parsed = parsed.tz_localize("UTC") if parsed.tzinfo is None else parsed.tz_convert("UTC")
    except (ValueError, TypeError, OverflowError):
        checked.errors.append(f"labeled_at: {value[:50]!r} is not a timestamp")
        return None
    latest = pd.Timestamp.now(tz="UTC") + pd.Timedelta(days=1)
    if pd.isna(parsed) or not EARLIEST_LABEL <= parsed <= latest:
        checked.errors.append(f"labeled_at: {value[:50]!r} is not between {EARLIEST_LABEL.date()} "
                              "and now")
        return None
    return parsed.to_pydatetime()


@dataclass
class LabelReport:
    files: int = 0
    stored: int = 0
    rejected: int = 0
    warnings: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)


def label_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in LABEL_SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(directory).parts))


def store_label_files(con: duckdb.DuckDBPyConnection, directory: Path,
                      log: Log = quiet) -> LabelReport:
    """Read the label files not read before (by path, size, mtime), one transaction per file."""
    con.execute(LABELS_DDL)
    known, report = KnownSources.load(con), LabelReport()
    traces = {t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()}
    for path in label_files(directory):
        relative, stat = str(path.relative_to(directory)), path.stat()
        if con.execute("SELECT 1 FROM label_files WHERE path = ? AND size = ? AND mtime_ns = ?",
                       [relative, stat.st_size, stat.st_mtime_ns]).fetchall():
            continue
        file_time = datetime.fromtimestamp(stat.st_mtime, UTC)
        con.execute("BEGIN")
        for table in ("curated_labels", "label_errors"):  # an edited file replaces what it said
            con.execute(f"DELETE FROM {table} WHERE source_file = ?", [relative])
        stored = rejected = 0
        rows = _read_rows(path)
        for line_no, row in rows:
            checked = check_label(row, known, traces)
            if checked.errors:
                rejected += 1
                report.errors.append({"file": relative, "line": line_no, "trace_id": checked.values["trace_id"],
                                      "errors": checked.errors})
                con.execute("INSERT INTO label_errors VALUES (?, ?, ?, ?, ?, now())",
                            [relative, line_no, checked.values["trace_id"], checked.errors,
                             json.dumps(row, ensure_ascii=False, default=str)[:4000]])
                continue
            stored += 1
            report.warnings += len(checked.warnings)
            _insert_label(con, checked, relative, line_no, file_time)
        con.execute("INSERT INTO label_files VALUES (?, ?, ?, ?, ?, ?, now())",
                    [relative, stat.st_size, stat.st_mtime_ns, len(rows), stored, rejected])
        con.execute("COMMIT")
        report.files += 1
        report.stored += stored
        report.rejected += rejected
        log(f"{relative}: {stored} labels stored, {rejected} rejected")
    return report


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
        except (json.JSONDecodeError, RecursionError) as error:
            row = {"_unparsable": f"invalid JSON: {getattr(error, 'msg', 'nested too deeply')}"}
        rows.append((line_no, row if isinstance(row, dict) else {"_unparsable": "not an object"}))
    return rows


def _insert_label(con: duckdb.DuckDBPyConnection, checked: CheckedLabel, source_file: str,
                  line_no: int, file_time: datetime) -> None:
    v = checked.values
    label_id = hashlib.sha256(f"{source_file}:{line_no}:{v['trace_id']}".encode()).hexdigest()[:16]
    con.execute("""
        INSERT OR REPLACE INTO curated_labels (label_id, trace_id, decision, input,
            expected_output, expected_sources, tags, origin, failure_type, curator, labeled_at,
            cluster_id, cluster_weight, priority, source_trace_ids, warnings, source_file, line_no,
            stored_at, suggested_failure_type, judge_score) VALUES
        (?, ?, ?, nullif(?, ''), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now(), nullif(?, ''), ?)""",
        [label_id, v["trace_id"], v["decision"], v.get("input") or "", v["expected_output"],
         v["expected_sources"], v["tags"], v["origin"] or None, v["failure_type"] or None,
         v.get("curator") or None, v["labeled_at"] or file_time, v.get("cluster_id") or None,
         v["cluster_weight"], v.get("priority") or None,
         v["source_trace_ids"], checked.warnings, source_file, line_no,
         v["suggested_failure_type"], v["judge_score"]])


def label_summary(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    con.execute(LABELS_DDL)
    row = con.execute("""
        SELECT (SELECT count(*) FROM curated_labels), (SELECT count(*) FROM label_errors),
               count(*) FILTER (decision = 'accept'), count(*) FILTER (decision = 'reject'),
               count(*) FILTER (decision = 'skip') FROM current_labels""").fetchall()[0]
    return dict(zip(("labels", "rejected_rows", "current_accept", "current_reject",
                     "current_skip"), row))

