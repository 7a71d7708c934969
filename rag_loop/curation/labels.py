"""Curator labels: validation row by row, storage that never loses what a curator wrote.

A label file (JSONL or CSV, rows shaped like the curation queue) is read once; its valid rows
land in `curated_labels`, its invalid rows in `label_errors` with every problem listed (a row
is validated by the pydantic model `LabelRow`, in label_rules.py). A relabel of a trace supersedes the earlier
label (`current_order`: latest `labeled_at`, then the later file and line); both rows are kept. A file
is read only once settled (see `store_label_files`), and its rows are stored with one statement per
table. A bad row costs that row only (`read_label_rows`), and a label is appended on a line of its
own (`append_label`), so a line cut by a full disk or a killed writer never takes another with it.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rag_loop.curation.label_rules import CheckedLabel, KnownSources, check_label
from rag_loop.curation.queue_files import _from_cell
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


CURATOR_NAME = re.compile(r"[\w@+-][\w.@+-]{0,63}")  # a file name part: no slash, no leading dot


def valid_curator(name: object) -> bool:
    """A curator name names their label file: letters, digits and . @ + -, no leading dot."""
    return isinstance(name, str) and CURATOR_NAME.fullmatch(name) is not None


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
        rows = read_label_rows(path)
        after = path.stat()
        if (after.st_size, after.st_mtime_ns) != (stat.st_size, stat.st_mtime_ns):
            report.waiting.append(f"{relative}: changed while it was read: still being written")
            log(f"{relative}: not read yet, it changed while it was read")
            continue
        labels: dict[str, dict[str, Any]] = {}  # by label_id: a later row of the same id wins
        errors: list[dict[str, Any]] = []
        modified = file_time(stat)
        for line_no, row in rows:
            checked = check_label(row, known, traces)
            if checked.errors:
                error = {"file": relative, "line": line_no, "trace_id": checked.values["trace_id"],
                         "errors": checked.errors}
                report.errors.append(error)
                errors.append({**error, "raw": json.dumps(row, ensure_ascii=False, default=str)[:4000]})
                continue
            report.warnings += len(checked.warnings)
            label = _label_values(checked, relative, line_no, modified)
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
    ("suggested_failure_type", _TEXT), ("judge_score", pa.float64()), ("reject_reason", _TEXT),
    ("judge_grades", pa.list_(pa.struct([  # curated_labels' JUDGE_GRADE, in its order
        ("metric", _TEXT), ("judge_version", _TEXT), ("judge_passed", pa.bool_()), ("judge_score", pa.float64()),
        ("grade", _TEXT), ("curator_passed", pa.bool_())])))])
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


def read_label_rows(path: Path) -> list[tuple[int, dict]]:
    """Numbered rows of a label file, each one on its own: a row that cannot be read becomes an
    error row of its line (`_unparsable`), and the rows around it are read as usual. JSONL: a
    line that is not a JSON object, or not UTF-8. CSV: see `_csv_rows`."""
    if path.suffix == ".csv":
        return _csv_rows(path)
    return jsonl_rows(path.read_bytes())


def jsonl_rows(data: bytes, first_line: int = 1) -> list[tuple[int, dict]]:
    """Numbered rows of JSON lines that start at line `first_line` of their file (the rest of a
    file read before, `read_label_rows`)."""
    rows = []
    for line_no, raw in enumerate(data.split(b"\n"), start=first_line):
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


_read_rows = read_label_rows  # the name bench/labels.py imports


def _csv_rows(path: Path) -> list[tuple[int, dict]]:
    """Rows of a CSV label file by the line each starts on. A row is an error of its own line when
    its quoting is broken, its cells do not match the header, or it is cut: the file ends inside a
    quoted cell, or its last row has no line break. A cut row is never read as a shorter value (a
    JSON line is never cut into a valid object; a CSV row is, so it must end with its line break).
    A file that is not UTF-8 is one error row, line 0."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        return [(0, {"_unparsable": f"unreadable CSV: not UTF-8 (byte {error.start})"})]
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    rows: list[tuple[int, dict]] = []
    read_last = False  # whether the last record read is the last of `rows` (not a header or blank)
    while True:
        start = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as error:
            cut = "unexpected end of data" in str(error)
            rows.append((start, {"_unparsable": CUT_ROW if cut else f"invalid CSV: {error}"}))
            read_last = False
            continue
        read_last = bool(cells) and header is not None
        if not cells:
            continue  # a blank line
        if header is None:
            header = cells
        elif len(cells) != len(header):
            rows.append((start, {"_unparsable": f"{len(cells)} cells where the header has {len(header)}"}))
        else:
            rows.append((start, {key: _csv_value(value) for key, value in zip(header, cells)}))
    if read_last and not text.endswith(("\n", "\r")):
        rows[-1] = (rows[-1][0], {"_unparsable": CUT_ROW})  # the last row, without its line break
    return rows


CUT_ROW = ("cut off: the row does not end with a line break (the file may still be being written, or "
           "its writer was stopped); end the row with a line break to have it read")


def _csv_value(cell: str) -> Any:
    """A cell as `read_queue` reads it: the formula guard removed, a JSON list or object decoded."""
    value = _from_cell(cell)
    if value.startswith(("[", "{")):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            pass  # text that merely starts with a bracket: "[doc#chunk] 15 days"
    return value


def append_label(path: Path, record: dict[str, Any]) -> None:
    """Append one label as a JSON line, under an exclusive lock (two writers never interleave),
    on a line of its own: after a cut last line (a full disk, a killed writer) a line break
    comes first, so the cut line stays one error row and this label is read whole. Synced to
    disk before returning, so a label reported saved is saved."""
    try:
        line = json.dumps(record, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate read from a JSON escape: keep it escaped
        line = json.dumps(record, ensure_ascii=True, default=str).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            end = handle.seek(0, os.SEEK_END)
            handle.seek(max(end - 1, 0))
            fresh = end == 0 or handle.read(1) == b"\n"
            handle.write((b"" if fresh else b"\n") + line + b"\n")  # append mode: always at the end
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def file_time(stat: os.stat_result) -> datetime:
    """A label file's modification time: the `labeled_at` of its rows that have none."""
    return datetime.fromtimestamp(stat.st_mtime, UTC)


def label_time(labeled_at: datetime | None, modified: datetime) -> datetime:
    """When a label was given: its validated `labeled_at` (an instant), else its file's time."""
    return labeled_at or modified


def current_order(labeled_at: datetime, source_file: str, line_no: int) -> tuple[datetime, str, int]:
    """The rule for which label of a trace is current: the one with the largest key, i.e. the
    latest `label_time`, then the later file (its path under the labels folder), then the later
    line. `curated_labels` stores `label_time` as `labeled_at` and the `current_labels` view orders
    by the same three columns; the workspace picks with this key. Tests hold the two together."""
    return labeled_at, source_file, line_no


def _label_values(checked: CheckedLabel, source_file: str, line_no: int,
                  modified: datetime) -> dict[str, Any]:
    """A `curated_labels` row (but stored_at) of a valid label; empty optional texts are NULL."""
    v = checked.values
    return {"label_id": hashlib.sha256(f"{source_file}:{line_no}:{v['trace_id']}".encode()).hexdigest()[:16],
            "trace_id": v["trace_id"], "decision": v["decision"], "input": v.get("input") or None,
            "expected_output": v["expected_output"], "expected_sources": v["expected_sources"],
            "tags": v["tags"], "origin": v["origin"] or None, "failure_type": v["failure_type"] or None,
            "curator": v.get("curator") or None, "labeled_at": label_time(v["labeled_at"], modified),
            "cluster_id": v.get("cluster_id") or None, "cluster_weight": v["cluster_weight"],
            "priority": v.get("priority") or None, "source_trace_ids": v["source_trace_ids"],
            "warnings": checked.warnings, "source_file": source_file, "line_no": line_no,
            "suggested_failure_type": v["suggested_failure_type"] or None, "judge_score": v["judge_score"],
            "reject_reason": v["reject_reason"] or None,
            "judge_grades": [{**g, "judge_version": g["judge_version"] or None, "grade": g["grade"] or None}
                             for g in v["judge_grades"]]}


def label_summary(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    con.execute(LABELS_DDL)
    row = con.execute("""
        SELECT (SELECT count(*) FROM curated_labels), (SELECT count(*) FROM label_errors),
               count(*) FILTER (decision = 'accept'), count(*) FILTER (decision = 'reject'),
               count(*) FILTER (decision = 'later') FROM current_labels""").fetchall()[0]
    return dict(zip(("labels", "rejected_rows", "current_accept", "current_reject",
                     "current_later"), row, strict=True))

