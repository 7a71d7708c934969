"""Curator labels: validation row by row, storage that never loses what a curator wrote.

A label file (JSONL or CSV, rows shaped like the curation queue) is read once; its valid rows
land in `curated_labels`, its invalid rows in `label_errors` with every problem listed (a row
is validated by the pydantic model `LabelRow`, in label_rules.py). A relabel of a trace supersedes the earlier
label (latest `labeled_at`, then the later file and line); both rows are kept. A file is read only
once settled (see `store_label_files`), and its rows are stored with one statement per table.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from rag_loop.curation.label_rules import CheckedLabel, KnownSources, check_label
from rag_loop.curation.queue_files import read_queue
from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import LABELS_DDL

LABEL_SUFFIXES = (".jsonl", ".csv")


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


def settled_label_files(directory: Path, settle_seconds: float, now: datetime | None = None) -> list[Path]:
    """The label files unchanged for `settle_seconds`, the ones store_label_files would read
    (a file removed while the folder is listed is left out)."""
    settled = []
    for path in label_files(directory):
        try:
            if _unsettled(path.stat(), settle_seconds, now) is None:
                settled.append(path)
        except FileNotFoundError:
            continue
    return settled


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
    ("suggested_failure_type", _TEXT), ("judge_score", pa.float64()), ("reject_reason", _TEXT)])
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
            "suggested_failure_type": v["suggested_failure_type"] or None, "judge_score": v["judge_score"],
            "reject_reason": v["reject_reason"] or None}


def label_summary(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    con.execute(LABELS_DDL)
    row = con.execute("""
        SELECT (SELECT count(*) FROM curated_labels), (SELECT count(*) FROM label_errors),
               count(*) FILTER (decision = 'accept'), count(*) FILTER (decision = 'reject'),
               count(*) FILTER (decision = 'later') FROM current_labels""").fetchall()[0]
    return dict(zip(("labels", "rejected_rows", "current_accept", "current_reject",
                     "current_later"), row, strict=True))

