"""Files of a team's own log shape, read through the mapping file of their folder
(rag_loop.ingest.field_map): JSONL, a JSON array (or the list a `records` path names), Parquet
or CSV. Each record is mapped, then stored or quarantined by the native reader's checks; what
the mapping itself could not do (a path that failed, a value that is no timestamp) is
quarantined with the field and the path. Every record read is counted once. A JSONL file whose
mapping compiles to SQL (rag_loop.ingest.mapped_sql) is mapped in DuckDB, the lines the SQL is
not certainly exact on by `map_record`: the same rows, reasons and coverage, without a Python
parse and dump per record.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from fnmatch import fnmatch
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rag_loop.ingest.field_map import (
    MAPPING_FILE_NAMES,
    FileFormat,
    Mapping,
    compiled_path,
    load_mapping,
    map_record,
    parse_json,
)
from rag_loop.ingest.lines import (
    RAW_PREVIEW_CHARS,
    LineBatch,
    NeedsExactReader,
    Rejected,
    is_gzip,
    iter_line_batches,
    open_binary,
    oversized_reason,
    preview,
    read_as_glob,
)
from rag_loop.ingest.mapped_sql import SqlMapping, sql_mapping
from rag_loop.ingest.native import leaves_type_ok_sql, typed_leaves_sql  # the fast reader's typing
from rag_loop.ingest.records import (
    BatchCounts,
    duckdb_type,
    load_batch,
    quarantine_rejected,
    record_problem_sql,
    store_verdicts,
)
from rag_loop.schema import Trace

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


def mapping_files(directory: Path) -> list[Path]:
    """The mapping files under `directory`, hidden folders aside (as the trace files are
    listed): a changed one is new input, e.g. the fix that lets its files be read."""
    found = []
    for folder, subfolders, names in os.walk(directory):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        found.extend(Path(folder) / name for name in sorted(names) if name in MAPPING_FILE_NAMES)
    return found


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
            document = parse_json(handle.read())
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
                yield line_no, parse_json(raw)
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
    quarantined with the field and path. A JSONL file whose mapping compiles to SQL
    (`mapped_sql`) is mapped in DuckDB, its lines the SQL is not exact on by `map_record`."""
    fmt = file_format(path, mapping)
    assert fmt is not None
    coverage = Coverage()
    plan = sql_mapping(mapping.spec) if fmt == "jsonl" else None
    if plan is None:
        counts = _store_records(con, read_records(path, fmt, mapping, max_record_bytes), relative, mapping,
                                max_record_bytes, coverage)
    else:
        whole = _store_sql_file(con, path, plan, relative, mapping, max_record_bytes, coverage)
        counts = whole if whole is not None else BatchCounts()
        for batch in _line_batches(path, max_record_bytes) if whole is None else ():
            counts += quarantine_rejected(con, batch.rejected, relative, MAPPED_FORMAT)
            counts += _store_sql_batch(con, batch.lines, plan, relative, mapping, max_record_bytes, coverage)
        con.execute("DROP TABLE IF EXISTS _mapped_typed")
    _name_paths(con, relative, mapping)
    con.execute("DELETE FROM mapping_coverage WHERE source_file = ?", [relative])
    rows = coverage.rows(mapping)
    if rows:  # one statement (a statement a row cost more than mapping a small file)
        con.execute("""INSERT INTO mapping_coverage
                       SELECT $file, $mapping, $digest, unnest($fields::VARCHAR[]), unnest($paths::VARCHAR[]),
                              unnest($records::BIGINT[]), unnest($resolved::BIGINT[]),
                              unnest($failures::VARCHAR[]), now()""",
                    {"file": relative, "mapping": str(mapping.path), "digest": mapping.digest,
                     **{name: [row[key] for row in rows] for name, key in (
                         ("fields", "field"), ("paths", "path"), ("records", "records"),
                         ("resolved", "resolved"), ("failures", "top_failure"))}})
    return counts


def _store_records(con: duckdb.DuckDBPyConnection, items: Iterable[tuple[int, Any] | Rejected], relative: str,
                   mapping: Mapping, max_record_bytes: int, coverage: Coverage) -> BatchCounts:
    """Map records in Python (`map_record`) and store them through the native line loader."""
    def mapped() -> Iterator[tuple[int, str] | Rejected]:
        for item in items:
            if isinstance(item, Rejected):
                yield item
                continue
            text = _mapped_text(item[0], item[1], mapping, max_record_bytes, coverage)
            yield text if isinstance(text, Rejected) else (item[0], text[0])
    return _store_texts(con, mapped(), relative)


def _store_texts(con: duckdb.DuckDBPyConnection, items: Iterable[tuple[int, str] | Rejected],
                 relative: str) -> BatchCounts:
    """Store mapped records (line, native JSON text) through the native line loader
    (`load_batch`), in batches, and quarantine the refused ones."""
    counts = BatchCounts()
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

    for item in items:
        if isinstance(item, Rejected):
            rejected.append(item)
            continue
        numbers.append(item[0])
        lines.append(item[1])
        if len(lines) >= BATCH_RECORDS:
            flush()
    flush()
    return counts


def _mapped_text(line_no: int, record: Any, mapping: Mapping, max_record_bytes: int,
                 coverage: Coverage) -> tuple[str, Any] | Rejected:
    """The record mapped, as the native JSON line and its trace id, or why it is quarantined."""
    mapped = map_record(record, mapping.spec)
    coverage.add(mapped.resolved, mapped.failures)
    raw = preview(json.dumps(record, default=str, ensure_ascii=False))
    if mapped.failures:
        target, where, why = mapped.failures[0]
        return Rejected(line_no, f"mapping_failed: {target} (path {where!r}): {why}"[:500], raw)
    try:
        text = json.dumps(mapped.trace, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError) as error:
        return Rejected(line_no, f"mapping_failed: not JSON ({error})"[:500], raw)
    if len(text.encode()) > max_record_bytes:
        return Rejected(line_no, oversized_reason(len(text.encode()), max_record_bytes), raw)
    return text, mapped.trace.get("trace_id")


def _line_batches(path: Path, max_record_bytes: int) -> Iterator[LineBatch]:
    """The file's lines as `iter_line_batches` splits them: Arrow's fast reader, and from the
    first line it cannot read exactly on, the exact reader."""
    done = 0
    with open_binary(path) as handle:
        bom = handle.read(3) == b"\xef\xbb\xbf"  # Arrow's reader drops it; json.loads refuses it
    try:
        if bom:
            raise NeedsExactReader("a byte order mark")
        for batch in iter_line_batches(path, max_record_bytes):
            numbers = batch.lines.column("line_no").to_pylist()[-1:] + [r.line_no for r in batch.rejected]
            done = max([done, *numbers])
            yield batch
    except NeedsExactReader:
        for batch in iter_line_batches(path, max_record_bytes, exact=True):
            if batch.lines.num_rows and batch.lines.column("line_no")[-1].as_py() <= done:
                if not any(r.line_no > done for r in batch.rejected):
                    continue
            lines = batch.lines.filter(pc.greater(batch.lines.column("line_no"), done))
            yield LineBatch(lines, [r for r in batch.rejected if r.line_no > done])


@cache
def _typed_sql(select: str, max_record_bytes: int, factor: int, extra: int, targets: int) -> str:
    """Maps the lines of `_mapped_lines` (`select`) and types them into `_mapped_typed` as the
    native fast reader types its lines; clean: exact, of the model's types, refused by no check,
    and certainly within the size limit as Python's JSON text."""
    expected = duckdb_type(Trace)
    resolved = "".join(f", r{i}" for i in range(targets))
    small = f"(bytes * {factor} + {extra} <= {max_record_bytes} OR strlen(to_json(j)) * 2 + 64 <= {max_record_bytes})"
    return f"""
        CREATE OR REPLACE TEMP TABLE _mapped_typed AS
        SELECT line_no, t, t.trace_id AS trace_id{resolved},
               exact AND type_ok AND {record_problem_sql('t')} IS NULL AND {small} AS clean
        FROM (SELECT line_no, bytes, j, exact{resolved}, {typed_leaves_sql('j', expected)} AS t,
                     {leaves_type_ok_sql('j', expected)} AS type_ok FROM ({select}))"""


def _map_in_sql(con: duckdb.DuckDBPyConnection, plan: SqlMapping, max_record_bytes: int) -> None:
    con.execute(_typed_sql(plan.select, max_record_bytes, plan.factor, plan.extra, len(plan.targets)))


# a file whose SQL leaves more lines than this to `map_record` is mapped in batches instead:
# the texts Python maps are held in memory until their batch is stored
WHOLE_FILE_PYTHON_LINES = 5 * BATCH_RECORDS
_BOM = b"\xef\xbb\xbf"
_READ_FILE_SQL = """
    CREATE OR REPLACE TEMP TABLE _mapped_file AS
    SELECT raw FROM read_csv($path, columns = {'raw': 'VARCHAR'}, delim = $delimiter, quote = '', escape = '',
                             header = false, auto_detect = false, new_line = '\\n', ignore_errors = true,
                             compression = $compression)"""


def _plain_lines(path: Path, block: int = 16 << 20) -> tuple[int, int] | None:
    """(lines, bytes without their line ends) of a (maybe gzipped) file that DuckDB's read_csv
    splits as the line reader does: no byte order mark, carriage return or 0x1f byte (a field
    end); None otherwise, or when the file cannot be read (the line reader then says why)."""
    lines = size = 0
    last = b"\n"
    try:
        with open_binary(path) as handle:
            while data := handle.read(block):
                if (size == 0 and data.startswith(_BOM)) or b"\r" in data or b"\x1f" in data:
                    return None
                ends = data.count(b"\n")
                lines += ends
                size += len(data) - ends
                last = data[-1:]
    except (OSError, EOFError, zlib.error):
        return None
    return lines + (last != b"\n"), size


def _read_file(con: duckdb.DuckDBPyConnection, path: Path) -> bool:
    """Read the JSONL file's lines into `_mapped_file` inside the caller's transaction, and the
    view `_mapped_numbered` (line_no, raw; blank lines NULL) over it; False, and nothing kept,
    when DuckDB would not split it exactly as the line reader. read_csv is told to skip a line
    it cannot read (not UTF-8, over its size limit) rather than fail, which would end the
    transaction: the table must then hold every line and every byte of the file, in order.
    The file is scanned before DuckDB reads it, not meanwhile: read_csv still fails on a
    carriage return, and on a cut gzip stream."""
    name = str(path)
    if read_as_glob(path) or not name.isprintable():  # a glob, or not UTF-8: DuckDB cannot open it alone
        return False
    plain = _plain_lines(path)
    if plain is None:
        return False
    lines, size = plain
    con.execute(_READ_FILE_SQL, {"path": name, "delimiter": "\x1f",
                                 "compression": "gzip" if is_gzip(path) else "none"})
    rows, first, last, chars = con.execute(
        "SELECT count(*), min(rowid), max(rowid), coalesce(sum(strlen(raw)), 0) FROM _mapped_file").fetchall()[0]
    if rows != lines or chars != size or (rows and last - first + 1 != rows):
        con.execute("DROP TABLE _mapped_file")
        return False
    con.execute(f"CREATE OR REPLACE TEMP VIEW _mapped_numbered AS SELECT rowid - {first or 0} + 1 AS line_no, raw "
                "FROM _mapped_file")
    return True


def _store_sql_file(con: duckdb.DuckDBPyConnection, path: Path, plan: SqlMapping, relative: str, mapping: Mapping,
                    max_record_bytes: int, coverage: Coverage) -> BatchCounts | None:
    """Map a whole JSONL file in one SQL statement and store it in one go (per-batch stores
    scan the growing tables again each time); None, with nothing stored, when DuckDB cannot
    read the file exactly or too many lines are left to Python: then it goes in batches."""
    if not _read_file(con, path):
        return None
    try:
        oversized = con.execute(f"""
            SELECT line_no, strlen(raw), left(raw, {RAW_PREVIEW_CHARS}) FROM _mapped_numbered
            WHERE strlen(raw) > ?""", [max_record_bytes]).fetchall()
        con.execute(f"""CREATE OR REPLACE TEMP VIEW _mapped_lines AS SELECT line_no, raw FROM _mapped_numbered
                        WHERE strlen(raw) <= {int(max_record_bytes)}""")
        _map_in_sql(con, plan, max_record_bytes)
        (unclean,) = con.execute("SELECT count(*) FROM _mapped_typed WHERE NOT clean").fetchall()[0]
        if unclean > WHOLE_FILE_PYTHON_LINES:
            return None

        def raws(numbers: list[int]) -> dict[int, str]:
            return dict(con.execute("SELECT line_no, raw FROM _mapped_lines WHERE line_no IN "
                                    "(SELECT unnest($n::BIGINT[]))", {"n": numbers}).fetchall())

        rejected = [Rejected(n, oversized_reason(size, max_record_bytes), preview(raw)) for n, size, raw in oversized]
        counts = quarantine_rejected(con, rejected, relative, MAPPED_FORMAT)
        counts += _store_mapped_lines(con, raws, plan, relative, mapping, max_record_bytes, coverage)
        return counts
    finally:
        con.execute("DROP VIEW IF EXISTS _mapped_lines; DROP VIEW IF EXISTS _mapped_numbered; "
                    "DROP TABLE IF EXISTS _mapped_file")


def _store_sql_batch(con: duckdb.DuckDBPyConnection, lines: pa.Table, plan: SqlMapping, relative: str,
                     mapping: Mapping, max_record_bytes: int, coverage: Coverage) -> BatchCounts:
    """Map a batch of lines (line_no, raw) in SQL and store it."""
    con.register("_mapped_lines", lines)
    try:
        _map_in_sql(con, plan, max_record_bytes)
    finally:
        con.unregister("_mapped_lines")

    def raws(numbers: list[int]) -> dict[int, str]:
        chosen = lines.filter(pc.is_in(lines.column("line_no"), value_set=pa.array(numbers, pa.int64())))
        return dict(zip(chosen.column("line_no").to_pylist(), chosen.column("raw").to_pylist()))

    return _store_mapped_lines(con, raws, plan, relative, mapping, max_record_bytes, coverage)


def _store_mapped_lines(con: duckdb.DuckDBPyConnection, raws: Callable[[list[int]], dict[int, str]],
                        plan: SqlMapping, relative: str, mapping: Mapping, max_record_bytes: int,
                        coverage: Coverage) -> BatchCounts:
    """Store the lines of `_mapped_typed` the SQL maps exactly and cleanly; map the others (their
    text: `raws`) in Python. A clean line whose trace id a Python-mapped line has on an earlier
    line is mapped in Python too, so that the first copy wins as if all were stored in one go."""
    python: dict[int, tuple[str, Any] | Rejected] = {}

    def in_python(numbers: list[int]) -> None:
        if not numbers:
            return
        texts = raws(numbers)
        for line_no in numbers:
            try:
                record = parse_json(texts[line_no])
            except (ValueError, RecursionError):
                python[line_no] = Rejected(line_no, "invalid_json", preview(texts[line_no]))
                continue
            python[line_no] = _mapped_text(line_no, record, mapping, max_record_bytes, coverage)

    in_python([n for (n,) in con.execute("SELECT line_no FROM _mapped_typed WHERE NOT clean").fetchall()])
    first: dict[str, int] = {}
    for line_no, item in python.items():
        if not isinstance(item, Rejected) and isinstance(item[1], str):
            first[item[1]] = min(first.get(item[1], line_no), line_no)
    if first:
        later = [n for (n,) in con.execute("""
            SELECT m.line_no FROM _mapped_typed m
            JOIN (SELECT unnest($ids::VARCHAR[]) AS id, unnest($lines::BIGINT[]) AS first) p
              ON m.trace_id = p.id AND m.line_no > p.first WHERE m.clean""",
            {"ids": list(first), "lines": list(first.values())}).fetchall()]
        if later:
            con.execute("UPDATE _mapped_typed SET clean = false WHERE line_no IN (SELECT unnest($n::BIGINT[]))",
                        {"n": later})
            in_python(later)
    counted = ", ".join(f"count_if(r{i})" for i in range(len(plan.targets)))
    clean, *resolved = con.execute(f"SELECT count(*), {counted} FROM _mapped_typed WHERE clean").fetchall()[0]
    coverage.records += clean
    coverage.resolved.update({target: n for target, n in zip(plan.targets, resolved) if n})
    con.execute("""CREATE OR REPLACE TEMP TABLE _verdict AS
                   SELECT line_no, line_no AS source_line, NULL::VARCHAR AS span_id, trace_id, NULL::VARCHAR AS reason
                   FROM _mapped_typed WHERE clean""")
    counts = store_verdicts(con, relative, MAPPED_FORMAT, parsed="_mapped_typed")
    counts += _store_texts(con, [item if isinstance(item, Rejected) else (line_no, item[0])
                                 for line_no, item in sorted(python.items())], relative)
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
    named: dict[str, str] = {}
    for (reason,) in rows:
        target = _REASON_FIELDS.get(reason) or (reason.split(": ", 1)[1] if ": " in reason else None)
        if target is None or not target[:1].isalpha():
            continue
        where = paths.get(target)
        named[reason] = f" (mapping: {'path ' + repr(where) if where else 'not in the mapping'})"
    if named:  # one statement for every reason (a file's reasons are few, but one each cost a scan each)
        con.execute("""UPDATE quarantine SET reason = quarantine.reason || s.suffix
                       FROM (SELECT unnest($reasons::VARCHAR[]) AS reason, unnest($suffixes::VARCHAR[]) AS suffix) s
                       WHERE source_file = $file AND format = $format AND quarantine.reason = s.reason""",
                    {"reasons": list(named), "suffixes": list(named.values()), "file": relative,
                     "format": MAPPED_FORMAT})
