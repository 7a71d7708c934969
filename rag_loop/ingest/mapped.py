"""Files of a team's own log shape, read through the mapping file of their folder
(rag_loop.ingest.field_map): JSONL, a JSON array (or the list a `records` path names), Parquet
or CSV. Each record is mapped, then stored or quarantined by the native reader's checks; what
the mapping itself could not do (a path that failed, a value that is no timestamp) is
quarantined with the field and the path. Every record read is counted once.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from fnmatch import fnmatch
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from rag_loop.ingest.field_map import MAPPING_FILE_NAMES, FileFormat, Mapping, compiled_path, load_mapping, map_record
from rag_loop.ingest.lines import Rejected, iter_line_batches, open_binary, oversized_reason, preview
from rag_loop.ingest.records import BatchCounts, load_batch, quarantine_rejected

MAPPED_FORMAT = "mapped"  # raw_traces.source_format of a mapped record
SUFFIXES: dict[str, FileFormat] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
                                   ".csv": "csv"}
BATCH_RECORDS = 10_000


def file_format(path: Path, mapping: Mapping) -> FileFormat | None:
    """The mapping's format, else the file's suffix (a .gz ending aside); None: not a data file."""
    if mapping.spec.format is not None:
        return mapping.spec.format
    name = path.name.lower().removesuffix(".gz")
    return next((fmt for suffix, fmt in SUFFIXES.items() if name.endswith(suffix)), None)


def mapping_for(path: Path, levels: int) -> Mapping | None:
    """The mapping of the nearest folder holding a mapping file, from the file's own up to
    `levels` folders above it (the traces folder), when it applies to this file; raises
    MappingError for a mapping file that cannot be used."""
    folder = path.parent
    for _ in range(levels + 1):
        for name in MAPPING_FILE_NAMES:
            candidate = folder / name
            if candidate.is_file():
                stat = candidate.stat()
                mapping = _loaded(candidate, stat.st_mtime_ns, stat.st_size)
                relative = path.relative_to(folder).as_posix()
                if mapping.spec.files and not any(fnmatch(relative, p) for p in mapping.spec.files):
                    return None
                return mapping if file_format(path, mapping) else None
        folder = folder.parent
    return None


@lru_cache(maxsize=64)
def _loaded(path: Path, mtime_ns: int, size: int) -> Mapping:
    return load_mapping(path)


def is_mapping_file(path: Path) -> bool:
    return path.name in MAPPING_FILE_NAMES


@dataclass
class Coverage:
    """Per mapped field: records read, records where its path resolved, and its failures."""

    records: int = 0
    resolved: Counter = field(default_factory=Counter)
    failures: dict[str, Counter] = field(default_factory=dict)

    def add(self, resolved: set[str], failures: list[tuple[str, str, str]]) -> None:
        self.records += 1
        self.resolved.update(resolved)
        for target, _, why in failures:
            self.failures.setdefault(target, Counter())[why] += 1

    def rows(self, mapping: Mapping) -> list[dict[str, Any]]:
        """One row per mapped field: field, path, resolved share, most common failure."""
        return [{"field": target, "path": where, "records": self.records, "resolved": self.resolved[target],
                 "share": self.resolved[target] / self.records if self.records else None,
                 "top_failure": (self.failures[target].most_common(1)[0][0] if target in self.failures else None)}
                for target, where in mapping.paths().items()]


def read_records(path: Path, fmt: FileFormat, mapping: Mapping,
                 max_record_bytes: int) -> Iterator[tuple[int, Any] | Rejected]:
    """The file's records in order with their line (JSONL, CSV: the line the record starts
    on; a JSON array, Parquet: its position, from 1), or a Rejected for one that cannot be
    parsed. With `group_by`, the rows sharing a key are one record `{"key", "rows"}` at its
    first row's line (a row without a key is quarantined). A file that cannot be read at all
    raises (the caller quarantines it whole)."""
    rows = _rows(path, fmt, mapping, max_record_bytes)
    if mapping.spec.group_by is None:
        yield from rows
        return
    groups: dict[str, tuple[int, Any, list[Any]]] = {}
    for item in rows:
        if isinstance(item, Rejected):
            yield item
            continue
        line_no, row = item
        key = _search(mapping.spec.group_by, row)
        if key is None or isinstance(key, dict | list):
            yield Rejected(line_no, f"mapping_failed: group_by (path {mapping.spec.group_by!r}): no key",
                           preview(json.dumps(row, default=str, ensure_ascii=False)))
            continue
        marker = json.dumps(key)
        groups.setdefault(marker, (line_no, key, []))[2].append(row)
    for line_no, key, members in groups.values():
        yield line_no, {"key": key, "rows": members}


def _rows(path: Path, fmt: FileFormat, mapping: Mapping,
          max_record_bytes: int) -> Iterator[tuple[int, Any] | Rejected]:
    if fmt == "jsonl":
        yield from _jsonl(path, max_record_bytes)
    elif fmt == "json":
        with open_binary(path) as handle:
            document = json.loads(handle.read())
        records = document if mapping.spec.records is None else _search(mapping.spec.records, document)
        if not isinstance(records, list):
            raise ValueError(f"records: not a list in the document but {type(records).__name__}")
        yield from enumerate(records, start=1)
    elif fmt == "parquet":
        position = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_RECORDS):
            for row in batch.to_pylist():
                position += 1
                yield position, _plain(row)
    else:
        yield from _csv(path)


def _search(expression: str, document: Any) -> Any:
    return compiled_path(expression).search(document)


def _jsonl(path: Path, max_record_bytes: int) -> Iterator[tuple[int, Any] | Rejected]:
    for batch in iter_line_batches(path, max_record_bytes, exact=True):
        yield from batch.rejected
        for line_no, raw in zip(batch.lines.column("line_no").to_pylist(), batch.lines.column("raw").to_pylist()):
            if not raw.strip(" \t\r"):
                continue
            try:
                yield line_no, json.loads(raw)
            except (ValueError, RecursionError):
                yield Rejected(line_no, "invalid_json", preview(raw))


def _csv(path: Path) -> Iterator[tuple[int, Any] | Rejected]:
    with open_binary(path) as handle:
        text = io.TextIOWrapper(handle, encoding="utf-8", errors="surrogateescape", newline="")
        reader = csv.DictReader(text)
        start = 2  # the header is line 1
        for row in reader:
            if None in row or any("\udc80" <= ch <= "\udcff" for v in row.values() if isinstance(v, str) for ch in v):
                why = "invalid_utf8" if None not in row else "csv: more cells than the header names"
                yield Rejected(start, why, preview(json.dumps(row, default=str, ensure_ascii=False)
                                                 .encode("utf-8", "replace")))
            else:  # a CSV cannot tell an empty text from a missing one: missing
                yield start, {name: (value if value != "" else None) for name, value in row.items()}
            start = reader.line_num + 1


def _plain(value: Any) -> Any:
    """A Parquet value as JSON would hold it: instants as ISO text, NaN as missing."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def store_mapped_file(con: duckdb.DuckDBPyConnection, path: Path, relative: str, mapping: Mapping,
                      max_record_bytes: int) -> BatchCounts:
    """Map, check and store every record of one file inside the caller's transaction, with
    the mapping's coverage of it (`mapping_coverage`). A record the mapping fails on is
    quarantined with the field and path."""
    fmt = file_format(path, mapping)
    assert fmt is not None
    counts, coverage = BatchCounts(), Coverage()
    numbers: list[int] = []
    lines: list[str] = []
    rejected: list[Rejected] = []

    def flush() -> None:
        nonlocal counts
        counts += quarantine_rejected(con, rejected, relative, MAPPED_FORMAT)
        if lines:
            counts += load_batch(con, pa.table({"line_no": pa.array(numbers, pa.int64()),
                                                "raw": pa.array(lines, pa.string())}), relative, MAPPED_FORMAT)
        numbers.clear(), lines.clear(), rejected.clear()

    for item in read_records(path, fmt, mapping, max_record_bytes):
        if isinstance(item, Rejected):
            rejected.append(item)
            continue
        line_no, record = item
        mapped = map_record(record, mapping.spec)
        coverage.add(mapped.resolved, mapped.failures)
        raw = preview(json.dumps(record, default=str, ensure_ascii=False))
        if mapped.failures:
            target, where, why = mapped.failures[0]
            rejected.append(Rejected(line_no, f"mapping_failed: {target} (path {where!r}): {why}"[:500], raw))
            continue
        try:
            text = json.dumps(mapped.trace, ensure_ascii=False, allow_nan=False)
        except (ValueError, TypeError) as error:
            rejected.append(Rejected(line_no, f"mapping_failed: not JSON ({error})"[:500], raw))
            continue
        if len(text.encode()) > max_record_bytes:
            rejected.append(Rejected(line_no, oversized_reason(len(text.encode()), max_record_bytes), raw))
            continue
        numbers.append(line_no)
        lines.append(text)
        if len(lines) >= BATCH_RECORDS:
            flush()
    flush()
    _name_paths(con, relative, mapping)
    con.execute("DELETE FROM mapping_coverage WHERE source_file = ?", [relative])
    con.executemany("INSERT INTO mapping_coverage VALUES (?, ?, ?, ?, ?, ?, ?, ?, now())",
                    [[relative, str(mapping.path), mapping.digest, row["field"], row["path"], row["records"],
                      row["resolved"], row["top_failure"]] for row in coverage.rows(mapping)])
    return counts


_REASON_FIELDS = {"missing_trace_id": "trace_id", "missing_query": "original_query",
                  "missing_timestamp": "timestamp", "bad_timestamp": "timestamp"}


def _name_paths(con: duckdb.DuckDBPyConnection, relative: str, mapping: Mapping) -> None:
    """The native checks name a trace field; for a mapped file the reason also says which
    path of the mapping gave it (or that the mapping gives none)."""
    paths = mapping.paths()
    rows = con.execute("SELECT DISTINCT reason FROM quarantine WHERE source_file = ? AND format = ? "
                       "AND reason NOT LIKE 'mapping_failed:%' AND reason NOT LIKE '% (mapping: %'",
                       [relative, MAPPED_FORMAT]).fetchall()
    for (reason,) in rows:
        target = _REASON_FIELDS.get(reason) or (reason.split(": ", 1)[1] if ": " in reason else None)
        if target is None or not target[:1].isalpha():
            continue
        where = paths.get(target)
        said = f"path {where!r}" if where else "not in the mapping"
        con.execute("UPDATE quarantine SET reason = reason || ? WHERE source_file = ? AND format = ? AND reason = ?",
                    [f" (mapping: {said})", relative, MAPPED_FORMAT, reason])
