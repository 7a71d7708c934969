"""Parse a whole native JSONL file inside DuckDB: the fast readers of native traces.

`read_native_file` parses the file with one `read_json`; `read_native_lines` splits it into
lines with `read_csv` and parses them with `json_transform`, so a malformed line costs only
itself. Both read every scalar of the trace model as JSON text, so a value of the wrong JSON
type is seen instead of silently coerced (`read_json` turns 5 into "5" and 2.5 into 2), then
cast in SQL; `read_native_file` reads the chunk and span lists as one JSON text each instead,
checked by one regular expression (`wrong_type_pattern`) and typed by `json_transform`. A row
that fails a type or field check is not judged here: its raw line goes to the line loader
(`load_batch`), which gives it the same reason any reader would. What a reader cannot read
exactly raises `NeedsExactReader`: for `read_json` malformed JSON, invalid UTF-8, an oversized
or non-object record, blank lines that would shift line numbers; for `read_csv` invalid UTF-8,
a 0x1f byte, a stray carriage return or mixed line ends; for both a file too big for DuckDB's
memory.

Both parse outside a transaction: a table made inside one numbers its rows from ~3.6e16, and
the row ids are the line numbers (rows keep the file's order: `preserve_insertion_order`).

Strictness is about half of the ingestion's CPU beyond a bare `read_json` (DuckDB 2.0.1 has
no strict typing): on bench/ingest.py's 200k traces the `_read` statement takes ~4.3 CPU-s,
~3.5 with the lists typed by `read_json` itself, ~3.1 with every value so typed (coerced); at
1M traces the ingestion takes ~2.05x the bare read's CPU, a coercing reader ~1.6x (issue 42;
~1.95x and ~1.4x with a 3GB memory_limit, under which `_read` does not spill).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from rag_loop.ingest.lines import RAW_PREVIEW_CHARS, NeedsExactReader, Rejected, is_gzip, open_binary, oversized_reason
from rag_loop.ingest.records import (
    BatchCounts,
    duckdb_type,
    load_batch,
    quarantine_rejected,
    record_problem_sql,
    store_verdicts,
)
from rag_loop.schema import Trace

# DuckDB quotes the offending line in its message, cut to a length that may split a UTF-8
# character: the message itself then fails to decode, and that too says "read it exactly"
_READ_ERRORS = (duckdb.InvalidInputException, duckdb.ConversionException, duckdb.IOException,
                duckdb.OutOfMemoryException, UnicodeDecodeError)


def _first_line(error: Exception) -> str:
    """The first line of a reader's error message, whatever bytes it quotes, without the line
    number DuckDB gives (one past the line at the end of a cut record; the line reader that
    reads the file instead names the exact line in `quarantine`)."""
    text = error.object.decode("utf-8", "replace") if isinstance(error, UnicodeDecodeError) else str(error)
    first = text.splitlines()[0] if text else type(error).__name__
    return _DUCKDB_LINE.sub("", first)


_DUCKDB_LINE = re.compile(r",? at byte \d+ in line \d+|,? (?:in|on) line \d+")


def _sql_type(expected: Any, leaf: str | None = None) -> str:
    """DuckDB type of a model structure; scalars become `leaf` when given."""
    if isinstance(expected, dict):
        fields = ", ".join(f'"{k}" {_sql_type(v, leaf)}' for k, v in expected.items())
        return f"STRUCT({fields})"
    if isinstance(expected, list):
        return f"{_sql_type(expected[0], leaf)}[]"
    return leaf or expected


def _field(expr: str, name: str) -> str:
    """A struct field of `expr`, or a column of the row when `expr` is empty."""
    return f'{expr}."{name}"' if expr else f'"{name}"'


def typed_leaves_sql(expr: str, expected: Any, depth: int = 0) -> str:
    """SQL that turns the JSON-text leaves under `expr` into the model's types."""
    if isinstance(expected, dict):
        fields = ", ".join(f'"{k}" := {typed_leaves_sql(_field(expr, k), v, depth)}'
                           for k, v in expected.items())
        packed = f"struct_pack({fields})"
        return f"CASE WHEN {expr} IS NOT NULL THEN {packed} END" if expr else packed
    if isinstance(expected, list):
        item = f"x{depth}"
        return f"list_transform({expr}, lambda {item}: {typed_leaves_sql(item, expected[0], depth + 1)})"
    return {
        "VARCHAR": f"json_extract_string({expr}, '$')",
        "BIGINT": f"TRY_CAST({expr}::VARCHAR AS BIGINT)",
        "DOUBLE": f"TRY_CAST({expr}::VARCHAR AS DOUBLE)",
        "BOOLEAN": f"({expr}::VARCHAR = 'true')",
        "JSON": expr,
    }[expected]


def leaves_type_ok_sql(expr: str, expected: Any, depth: int = 0) -> str:
    """SQL true when every JSON value under `expr` has a type `structure_problem` accepts."""
    if isinstance(expected, dict):
        return " AND ".join(leaves_type_ok_sql(_field(expr, k), v, depth) for k, v in expected.items())
    if isinstance(expected, list):
        item = f"x{depth}"
        inner = leaves_type_ok_sql(item, expected[0], depth + 1)
        return f"coalesce(list_bool_and(list_transform({expr}, lambda {item}: {inner})), true)"
    text = f"{expr}::VARCHAR"
    check = {
        "VARCHAR": f"starts_with({text}, '\"')",
        # an integer written as an integer: 2.5 and 1e3 do not survive the round trip
        "BIGINT": f"TRY_CAST(TRY_CAST({text} AS BIGINT) AS VARCHAR) = {text}",
        "DOUBLE": f"NOT starts_with({text}, '\"') AND TRY_CAST({text} AS DOUBLE) IS NOT NULL",
        "BOOLEAN": f"{text} IN ('true', 'false')",
        "JSON": f"starts_with({text}, '{{')",
    }[expected]
    return f"({expr} IS NULL OR coalesce({check}, false))"


def _json_leaves(expected: Any) -> Any:
    """The `json_transform` structure of the model with every scalar as JSON."""
    if isinstance(expected, dict):
        return {k: _json_leaves(v) for k, v in expected.items()}
    if isinstance(expected, list):
        return [_json_leaves(expected[0])]
    return "JSON"


def _container_kinds(raw: str, expected: dict) -> tuple[str, str]:
    """SQL for the JSON types of the top-level lists and objects of `raw` (as `kinds`), and
    SQL true when they are lists and objects.

    `json_transform`, unlike `read_json`, turns a string where a list belongs into NULL.
    Elements of the chunk and span lists need no check: a non-object element lacks the
    required doc_id / name, so the row is judged by the line loader.
    """
    kinds = {k: "ARRAY" if isinstance(v, list) else "OBJECT"
             for k, v in expected.items() if isinstance(v, (list, dict))}
    paths = ", ".join(f"'$.{k}'" for k in kinds)
    checks = [f"coalesce(kinds[{i}], 'NULL') IN ('{kind}', 'NULL')"
              for i, kind in enumerate(kinds.values(), start=1)]
    return f"json_type({raw}, [{paths}])", " AND ".join(checks)


# What may follow `"key":` in a list's JSON text when the value does not have the key's type:
# anything but the type's first characters or null (an integer with a fraction, an exponent or
# 19 digits, maybe beyond BIGINT, too)
_MAYBE_WRONG = {
    "VARCHAR": r'[^"n]|n[^u]',
    "BIGINT": r'[^-0-9n]|n[^u]|-[^0-9]|-?[0-9]+[.eE]|-?[0-9]{19}',
    "DOUBLE": r'[^-0-9n]|n[^u]|-[^0-9]',
    "BOOLEAN": r'[^tfn]|t[^r]|f[^a]|n[^u]',
}
_OBJECT_LISTS = ("chunks", "spans")  # typed whole by `json_transform`, checked on their text


def wrong_type_pattern(fields: dict[str, str]) -> str:
    """A regular expression that matches the JSON text of a list of objects with scalar
    `fields` when some value may not have its field's type.

    The text is the compact JSON `read_json` writes for a JSON column (no whitespace, keys
    unescaped), where `"key":` is a key spelled `key`: a `"` followed by `:` ends a key, and the
    `"` before `key` opens it (or is an escaped quote inside a longer key). Conservative: the same
    key in a nested object, or a key ending in `\\"key`, matches too, and only sends the line to
    the line loader. (Not `[{,]"key":`: a leading character class costs RE2 about 0.1 CPU-s
    per 100 MB more.)
    """
    by_type: dict[str, list[str]] = {}
    for key, kind in fields.items():
        by_type.setdefault(kind, []).append(key)
    pattern = "|".join(f'"(?:{"|".join(keys)})":(?:{_MAYBE_WRONG[kind]})'
                       for kind, keys in by_type.items())
    assert "'" not in pattern
    return pattern


def _object_list_sql(name: str, element: dict[str, str]) -> tuple[str, str]:
    """SQL typing the JSON text of the list column `name`, and SQL true when the text is a list
    whose values all have their types. A non-object element types as no fields, and lacks the
    required doc_id or name (`record_problem_sql`)."""
    text = f'"{name}"::VARCHAR'
    typed = f"""json_transform("{name}", '{json.dumps([element])}')"""
    ok = (f"""("{name}" IS NULL OR (starts_with({text}, '[') """
          f"""AND NOT regexp_matches({text}, '{wrong_type_pattern(element)}')))""")
    return typed, ok


@cache
def _read_json_sql() -> str:
    """Parses the file `$path` into `_read`: the typed trace `t` and whether it is clean.

    Scalars are read as JSON text and typed one by one; the chunk and span lists, most of a
    trace's values, are read as one JSON text each, typed by one `json_transform` and checked
    by one regular expression."""
    expected = duckdb_type(Trace)
    columns = ", ".join(f"'{k}': '{'JSON' if k in _OBJECT_LISTS else _sql_type(v, 'JSON')}'"
                        for k, v in expected.items())
    fields, checks = [], []
    for key, value in expected.items():
        if key in _OBJECT_LISTS:
            typed, ok = _object_list_sql(key, value[0])
            checks.append(ok)
        else:
            typed = typed_leaves_sql(_field("", key), value)
            checks.append(leaves_type_ok_sql(_field("", key), value))
        fields.append(f'"{key}" := {typed}')
    return f"""
        CREATE OR REPLACE TEMP TABLE _read AS
        SELECT t, type_ok AND {record_problem_sql('t')} IS NULL AS clean
        FROM (SELECT struct_pack({", ".join(fields)}) AS t, {" AND ".join(checks)} AS type_ok
              FROM read_json($path, format = 'newline_delimited', records = true,
                             compression = $compression, maximum_object_size = $max_bytes,
                             columns = {{{columns}}}))"""


# a 0x1f byte never stands unescaped in JSON: each line is one field, blank lines are NULL
_DELIMITER = b"\x1f"
_READ_LINES_SQL = """
    CREATE OR REPLACE TEMP TABLE _lines AS
    SELECT raw FROM read_csv($path, columns = {'raw': 'VARCHAR'}, delim = $delimiter,
                             quote = '', escape = '', header = false, auto_detect = false,
                             compression = $compression)"""


@cache
def _parse_lines_sql() -> str:
    """Parses the non-blank lines of `_lines` within `$max_bytes` into `_read`."""
    expected = duckdb_type(Trace)
    structure = json.dumps(_json_leaves(expected))
    kinds, kinds_ok = _container_kinds("raw", expected)
    return f"""
        CREATE OR REPLACE TEMP TABLE _read AS
        SELECT line_no, t, valid AND type_ok AND {record_problem_sql('t')} IS NULL AS clean
        FROM (SELECT line_no, valid, {typed_leaves_sql('j', expected)} AS t,
                     {leaves_type_ok_sql('j', expected)} AND {kinds_ok} AS type_ok
              FROM (SELECT line_no, valid,
                           CASE WHEN valid THEN json_transform(raw, '{structure}') END AS j,
                           CASE WHEN valid THEN {kinds} END AS kinds
                    FROM (SELECT rowid + 1 AS line_no, raw, json_valid(raw) AS valid FROM _lines
                          WHERE raw IS NOT NULL AND strlen(raw) <= $max_bytes)))"""


def line_stats(path: Path, block: int = 16 << 20) -> tuple[int, int]:
    """Lines of the (maybe gzipped) file, a last one without a newline included, and the
    length in bytes of the longest."""
    lines = longest = start = offset = 0  # start: where the current line begins
    with open_binary(path) as handle:
        while data := handle.read(block):
            ends = np.flatnonzero(np.frombuffer(data, np.uint8) == ord("\n")) + offset
            if len(ends):
                starts = np.concatenate(([start], ends[:-1] + 1))
                longest = max(longest, int((ends - starts).max()))
                start = int(ends[-1]) + 1
                lines += len(ends)
            offset += len(data)
    if offset > start:
        lines += 1
        longest = max(longest, offset - start)
    return lines, longest


def _contains(path: Path, byte: bytes, block: int = 16 << 20) -> bool:
    with open_binary(path) as handle:
        while data := handle.read(block):
            if byte in data:
                return True
    return False


def lines_at(path: Path, wanted: Iterable[int]) -> pa.Table:
    """The raw text of the given line numbers, as the line loader takes it (line_no, raw)."""
    wanted = set(wanted)
    numbers, raws = [], []
    with open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            if number in wanted:
                numbers.append(number)
                raws.append(line.rstrip(b"\r\n").decode("utf-8"))
                if len(numbers) == len(wanted):
                    break
    return pa.table({"line_no": pa.array(numbers, pa.int64()), "raw": pa.array(raws, pa.string())})


@dataclass
class ParsedFile:
    """A native file parsed into `_read`; `numbered` (SQL, a subquery: not a view, whose
    creation and drop would cost two more statements a file) selects (line_no, t, trace_id, clean)."""

    numbered: str
    raw_lines: Callable[[list[int]], pa.Table]  # the text of these lines: (line_no, raw)
    rejected: list[Rejected] = field(default_factory=list)  # lines refused before parsing
    unclean: list[int] | None = None  # the line numbers of the rows not clean, when known


_NUMBERED_BY_ROWID = "(SELECT rowid + 1 AS line_no, t, t.trace_id AS trace_id, clean FROM _read) AS _read_numbered"
_NUMBERED = "(SELECT line_no, t, t.trace_id AS trace_id, clean FROM _read) AS _read_numbered"


def read_native_file(con: duckdb.DuckDBPyConnection, path: Path,
                     max_record_bytes: int) -> ParsedFile:
    """Parse the file with one `read_json`; call it outside a transaction."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        stats = pool.submit(line_stats, path)  # while DuckDB parses: it releases the GIL
        try:
            con.execute(_read_json_sql(), {"path": str(path), "max_bytes": max_record_bytes,
                                           "compression": _compression(path)})
        except _READ_ERRORS as error:
            stats.cancel()
            raise NeedsExactReader(_first_line(error)) from error
        lines, longest = stats.result()
    records, unclean = _check_row_ids(con, "_read", "list(rowid + 1 ORDER BY rowid) FILTER (WHERE NOT clean)")
    problem = (f"{lines - records} blank lines" if records != lines else
               f"a line of {longest} bytes" if longest > max_record_bytes else None)
    if problem:  # read_json does not enforce maximum_object_size on small records
        forget_read(con)
        raise NeedsExactReader(problem)
    return ParsedFile(_NUMBERED_BY_ROWID, lambda numbers: lines_at(path, numbers), unclean=unclean or [])


def read_native_lines(con: duckdb.DuckDBPyConnection, path: Path,
                      max_record_bytes: int) -> ParsedFile:
    """Split the file into lines with `read_csv` and parse them; call it outside a transaction."""
    if _contains(path, _DELIMITER):  # read_csv would take a trailing one for a field end
        raise NeedsExactReader("a 0x1f byte")
    try:
        con.execute(_READ_LINES_SQL, {"path": str(path), "delimiter": _DELIMITER.decode(),
                                      "compression": _compression(path)})
        _check_row_ids(con, "_lines")
        oversized = con.execute(f"""
            SELECT rowid + 1, strlen(raw), left(raw, {RAW_PREVIEW_CHARS}) FROM _lines
            WHERE strlen(raw) > ?""", [max_record_bytes]).fetchall()
        con.execute(_parse_lines_sql(), {"max_bytes": max_record_bytes})
    except _READ_ERRORS as error:
        forget_read(con)
        raise NeedsExactReader(_first_line(error)) from error
    rejected = [Rejected(n, oversized_reason(size, max_record_bytes), raw)
                for n, size, raw in oversized]
    return ParsedFile(_NUMBERED, lambda numbers: _lines_from_table(con, numbers), rejected)


def _lines_from_table(con: duckdb.DuckDBPyConnection, numbers: list[int]) -> pa.Table:
    return con.sql("""SELECT rowid + 1 AS line_no, raw FROM _lines
                      WHERE rowid + 1 IN (SELECT unnest($numbers::BIGINT[]))""",
                   params={"numbers": numbers}).to_arrow_table()


def _compression(path: Path) -> str:
    return "gzip" if is_gzip(path) else "none"


def _check_row_ids(con: duckdb.DuckDBPyConnection, table: str, also: str = "NULL") -> tuple[int, Any]:
    """The rows of `table` and the aggregate `also` over them (in the same statement), after
    checking that its row ids count 0, 1, 2... (line numbers)."""
    rows, first, last, value = con.execute(
        f"SELECT count(*), min(rowid), max(rowid), {also} FROM {table}").fetchall()[0]
    if rows and (first, last) != (0, rows - 1):
        forget_read(con)
        raise NeedsExactReader(f"row ids {first}..{last} are not line numbers")
    return rows, value


def store_read_file(con: duckdb.DuckDBPyConnection, parsed: ParsedFile,
                    source_file: str) -> BatchCounts:
    """Store the clean traces of a parsed file; unclean lines go to the line loader."""
    counts = quarantine_rejected(con, parsed.rejected, source_file, "native")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE _verdict AS SELECT line_no, line_no AS source_line,
                    NULL::VARCHAR AS span_id, trace_id, NULL::VARCHAR AS reason
                    FROM {parsed.numbered} WHERE clean""")
    counts += store_verdicts(con, source_file, "native", parsed=parsed.numbered)
    unclean = parsed.unclean
    if unclean is None:
        unclean = [n for (n,) in con.execute(
            f"SELECT line_no FROM {parsed.numbered} WHERE NOT clean").fetchall()]
    lines = parsed.raw_lines(unclean) if unclean else None
    forget_read(con)
    if lines is not None:
        counts += load_batch(con, lines, source_file, "native")
    return counts


def forget_read(con: duckdb.DuckDBPyConnection) -> None:
    """Free the parsed file."""
    con.execute("DROP TABLE IF EXISTS _read; DROP TABLE IF EXISTS _lines")
