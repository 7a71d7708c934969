"""Read a whole native JSONL file with one DuckDB `read_json`: the fast path for clean files.

Every scalar of the trace model is read as JSON text, so a value of the wrong JSON type is
seen instead of silently coerced (`read_json` turns 5 into "5" and 2.5 into 2), then cast in
SQL. A row that fails a type or field check is not judged here: its raw line is handed to
the line-by-line loader, which gives it the same reason it would get in any file. Whatever
`read_json` cannot read exactly (malformed JSON, invalid UTF-8, an oversized or non-object
record, blank lines that would shift line numbers, a file too big for DuckDB's memory limit)
raises `NeedsExactReader`.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rag_loop.ingest.loader import BatchCounts, load_batch, record_problem_sql, store_verdicts
from rag_loop.ingest.reader import NeedsExactReader, is_gzip, open_binary
from rag_loop.schema import Trace
from rag_loop.storage import duckdb_type

_READ_ERRORS = (duckdb.InvalidInputException, duckdb.ConversionException, duckdb.IOException,
                duckdb.OutOfMemoryException)


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


def _typed(expr: str, expected: Any, depth: int = 0) -> str:
    """SQL that turns the JSON-text leaves under `expr` into the model's types."""
    if isinstance(expected, dict):
        fields = ", ".join(f'"{k}" := {_typed(_field(expr, k), v, depth)}'
                           for k, v in expected.items())
        packed = f"struct_pack({fields})"
        return f"CASE WHEN {expr} IS NOT NULL THEN {packed} END" if expr else packed
    if isinstance(expected, list):
        item = f"x{depth}"
        return f"list_transform({expr}, lambda {item}: {_typed(item, expected[0], depth + 1)})"
    return {
        "VARCHAR": f"json_extract_string({expr}, '$')",
        "BIGINT": f"TRY_CAST({expr}::VARCHAR AS BIGINT)",
        "DOUBLE": f"TRY_CAST({expr}::VARCHAR AS DOUBLE)",
        "BOOLEAN": f"({expr}::VARCHAR = 'true')",
        "JSON": expr,
    }[expected]


def _type_ok(expr: str, expected: Any, depth: int = 0) -> str:
    """SQL true when every JSON value under `expr` has a type `structure_problem` accepts."""
    if isinstance(expected, dict):
        return " AND ".join(_type_ok(_field(expr, k), v, depth) for k, v in expected.items())
    if isinstance(expected, list):
        item = f"x{depth}"
        inner = _type_ok(item, expected[0], depth + 1)
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


@cache
def _parse_sql() -> str:
    """Reads the file `$path` into `_read`: the typed trace `t` and whether it is clean."""
    expected = duckdb_type(Trace)
    columns = ", ".join(f"'{k}': '{_sql_type(v, 'JSON')}'" for k, v in expected.items())
    return f"""
        CREATE OR REPLACE TEMP TABLE _read AS
        SELECT t, type_ok AND {record_problem_sql('t')} IS NULL AS clean
        FROM (SELECT {_typed('', expected)} AS t, {_type_ok('', expected)} AS type_ok
              FROM read_json($path, format = 'newline_delimited', records = true,
                             compression = $compression, maximum_object_size = $max_bytes,
                             columns = {{{columns}}}))"""


def count_lines(path: Path, block: int = 16 << 20) -> int:
    """Lines of the (maybe gzipped) file, a last line without a newline included."""
    lines, last = 0, b"\n"
    with open_binary(path) as handle:
        while data := handle.read(block):
            lines += data.count(b"\n")
            last = data[-1:]
    return lines + (last != b"\n")


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


def read_native_file(con: duckdb.DuckDBPyConnection, path: Path, max_record_bytes: int) -> None:
    """Parse the file into `_read`, or raise `NeedsExactReader` if that cannot be exact.

    Call it outside a transaction: a table made inside one numbers its rows from ~3.6e16,
    and the row ids are the line numbers (rows keep the file's order).
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        line_count = pool.submit(count_lines, path)  # counts while DuckDB parses, GIL released
        try:
            con.execute(_parse_sql(), {"path": str(path), "max_bytes": max_record_bytes,
                                       "compression": "gzip" if is_gzip(path) else "none"})
        except _READ_ERRORS as error:
            line_count.cancel()
            raise NeedsExactReader(str(error).splitlines()[0]) from error
        lines = line_count.result()
    records, first, last = con.execute(
        "SELECT count(*), min(rowid), max(rowid) FROM _read").fetchall()[0]
    problem = (f"{lines - records} blank lines" if records != lines else
               f"row ids {first}..{last} are not line numbers"
               if records and (first, last) != (0, records - 1) else None)
    if problem:
        forget_read(con)
        raise NeedsExactReader(problem)


def store_read_file(con: duckdb.DuckDBPyConnection, path: Path, source_file: str) -> BatchCounts:
    """Store the clean traces of `_read`; unclean lines go through the line loader for a reason."""
    con.execute("""CREATE OR REPLACE TEMP VIEW _read_numbered AS
                   SELECT rowid + 1 AS line_no, t, t.trace_id AS trace_id, clean FROM _read""")
    con.execute("""CREATE OR REPLACE TEMP TABLE _verdict AS SELECT line_no, trace_id,
                   NULL::VARCHAR AS reason FROM _read_numbered WHERE clean""")
    counts = store_verdicts(con, source_file, "native", parsed="_read_numbered")
    unclean = [n for (n,) in con.execute(
        "SELECT line_no FROM _read_numbered WHERE NOT clean").fetchall()]
    forget_read(con)
    if unclean:
        counts += load_batch(con, lines_at(path, unclean), source_file, "native")
    return counts


def forget_read(con: duckdb.DuckDBPyConnection) -> None:
    """Free the parsed file."""
    con.execute("DROP VIEW IF EXISTS _read_numbered; DROP TABLE IF EXISTS _read")
