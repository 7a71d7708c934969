"""Validate numbered JSON lines in DuckDB and store the good ones, quarantining the rest.

DuckDB parses each line three times: `json_valid`, `json_transform` into the typed trace
struct (lenient: a wrongly typed value would silently become NULL) and `json_structure` (the
JSON type of every value). The few distinct structures of a batch are checked in Python against the trace model,
so a wrongly typed value is quarantined with its path instead of being lost.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

import duckdb
import pyarrow as pa
from pydantic import BaseModel

from rag_loop.ingest.lines import RAW_PREVIEW_CHARS, Rejected
from rag_loop.schema import NESTED_FIELDS, Trace
from rag_loop.store.ddl import utc_day

_SCALARS: dict[Any, str] = {
    str: "VARCHAR", int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN",
    # kept as text by the parser, validated with TRY_CAST so a bad value gets its own reason
    datetime: "VARCHAR",
}


def duckdb_type(annotation: Any) -> Any:
    """DuckDB `json_transform` structure for a type annotation of the trace model: a fresh copy
    (dicts, lists and type names), so the caller may change it."""
    return json.loads(_duckdb_type_json(annotation))


@cache
def _duckdb_type_json(annotation: Any) -> str:
    return json.dumps(_duckdb_type(annotation))


def _duckdb_type(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _duckdb_type(inner)
    if origin is list:
        return [_duckdb_type(typing.get_args(annotation)[0])]
    if origin is dict:
        return "JSON"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {name: _duckdb_type(f.annotation) for name, f in annotation.model_fields.items()}
    return _SCALARS[annotation]


def trace_struct() -> str:
    """The JSON structure string that parses a native trace line in DuckDB."""
    return _duckdb_type_json(Trace)


def _rows_table(rows: Sequence[Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """Rows (`schema`'s columns, in order) as an Arrow table."""
    if not rows:
        return schema.empty_table()
    columns = zip(*rows, strict=True)
    return pa.table([pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


_SQL_TYPES = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.bool_(): "BOOLEAN",
              pa.timestamp("us", "UTC"): "TIMESTAMPTZ", pa.timestamp("us"): "TIMESTAMP"}
_FEW_ROWS = 8  # up to this many, binding the values costs less than registering a table


def insert_rows(con: duckdb.DuckDBPyConnection, sql: str, rows: Sequence[Sequence[Any]],
                schema: pa.Schema, parameters: list[Any] | None = None) -> None:
    """Run `sql` (its own `parameters` after) over `rows` (`schema`'s columns), which it reads
    as `_ingest_rows`: one statement where `executemany` runs one per row. Nothing for no rows."""
    if not rows:
        return
    if len(rows) <= _FEW_ROWS:
        row = "(" + ", ".join(f"?::{_SQL_TYPES[f.type]}" for f in schema) + ")"
        names = ", ".join(f'"{name}"' for name in schema.names)
        con.execute(f"WITH _ingest_rows ({names}) AS (VALUES {', '.join([row] * len(rows))}) {sql}",
                    [*(value for r in rows for value in r), *(parameters or [])])
        return
    con.register("_ingest_rows", _rows_table(rows, schema))
    try:
        con.execute(sql, parameters)
    finally:
        con.unregister("_ingest_rows")


_COMPATIBLE = {
    "VARCHAR": {"VARCHAR"},
    "BIGINT": {"UBIGINT", "BIGINT"},
    "DOUBLE": {"DOUBLE", "UBIGINT", "BIGINT"},
    "BOOLEAN": {"BOOLEAN"},
}


@dataclass
class BatchCounts:
    """What happened to the lines of one batch: every line lands in exactly one count."""

    ingested: int = 0
    duplicates: int = 0
    quarantined: int = 0

    def __iadd__(self, other: BatchCounts) -> BatchCounts:
        self.ingested += other.ingested
        self.duplicates += other.duplicates
        self.quarantined += other.quarantined
        return self


def structure_problem(found: Any, expected: Any, path: str = "") -> str | None:
    """The path of the first value whose JSON type does not fit the model, or None.

    `found` is DuckDB's `json_structure` of a record (element types of a list are merged,
    "JSON" where they disagree or for an empty object); `expected` is `duckdb_type(Trace)`.
    Keys the model does not know are ignored, as the model ignores them.
    """
    if found == "NULL":
        return None
    if isinstance(expected, dict):
        if found == "JSON" and not path.endswith("[]"):
            return None  # an empty object
        if not isinstance(found, dict):
            return path or "$"
        for key, value in found.items():
            if key in expected:
                problem = structure_problem(value, expected[key], f"{path}.{key}".lstrip("."))
                if problem:
                    return problem
        return None
    if isinstance(expected, list):
        if not isinstance(found, list):
            return path
        return structure_problem(found[0], expected[0], f"{path}[]")
    if expected == "JSON":  # a free-form object such as filters
        return None if found == "JSON" or isinstance(found, dict) else path
    return None if isinstance(found, str) and found in _COMPATIBLE[expected] else path


@cache
def _trace_columns() -> str:
    """SELECT list that maps the parsed struct `t` onto raw_traces' columns. A blank language
    is none; a language the trace gives is its `language_source` (the rest are identified after
    the run stores its files: rag_loop.ingest.language)."""
    names = [n for n in Trace.model_fields if n not in NESTED_FIELDS]
    exprs = [f't."{n}" AS "{n}"' if n != "language" else f'{_GIVEN_LANGUAGE} AS "language"' for n in names]
    return ", ".join([*exprs, f"CASE WHEN {_GIVEN_LANGUAGE} IS NOT NULL THEN 'attribute' END AS language_source"])


_GIVEN_LANGUAGE = """nullif(trim(t."language"), '')"""


_PROBLEM_ROW = pa.schema([("structure", pa.string()), ("problem", pa.string())])


def _classify_structures(con: duckdb.DuckDBPyConnection) -> None:
    expected = _model_type()
    rows = con.execute("SELECT DISTINCT structure FROM _parsed WHERE structure IS NOT NULL").fetchall()
    problems = []
    for (structure,) in rows:
        try:
            found = json.loads(structure)
        except RecursionError:
            problems.append((structure, "wrong_type: nested too deeply"))
            continue
        if not isinstance(found, dict):
            problems.append((structure, "not_an_object"))
        elif problem := structure_problem(found, expected):
            problems.append((structure, f"wrong_type: {problem}"))
    con.execute("CREATE OR REPLACE TEMP TABLE _structure_problems (structure VARCHAR, problem VARCHAR)")
    insert_rows(con, "INSERT INTO _structure_problems SELECT * FROM _ingest_rows", problems, _PROBLEM_ROW)


def load_batch(con: duckdb.DuckDBPyConnection, lines: pa.Table, source_file: str,
               source_format: str, set_aside_format: str | None = None) -> BatchCounts:
    """Store the valid, unseen traces of `lines` (line_no, raw); quarantine the invalid ones.

    Duplicates (a trace id already stored, or repeated in the batch) keep the first copy:
    the earliest ingested, then the lowest line number. Later copies are listed in
    `trace_duplicates`, so every line read is accounted for. `line_no` is the row key; an
    optional `source_line` column gives the position stored instead (OTLP traces assembled
    from spans: several traces may share their root span's line), an optional `span_id` the span
    that placed it. Quarantine and duplicate rows are written with `set_aside_format` when
    given (default `source_format`). `_verdict` and `_keep` stay for the caller to read.
    """
    con.register("_batch", _placed(lines))
    try:
        return _load_registered_batch(con, source_file, source_format,
                                      set_aside_format or source_format)
    finally:
        con.unregister("_batch")


def _placed(lines: pa.Table) -> pa.Table:
    """`lines` with the optional `source_line` (default: line_no) and `span_id` columns."""
    if "source_line" not in lines.column_names:
        lines = lines.append_column("source_line", lines.column("line_no"))
    if "span_id" not in lines.column_names:
        lines = lines.append_column("span_id", pa.nulls(lines.num_rows, pa.string()))
    return lines


# ISO 8601 as traces write it: a 4-digit year, an optional real offset (at most +-14:00)
_ISO_TIME = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|z|[+-](0\d|1[0-4])(:?\d{2})?)?$"
_BLANK = r"[\s\x{200B}-\x{200D}\x{2060}\x{FEFF}]"  # whitespace and zero-width characters
_FINITE = ("latency_ms", "cost_usd", "temperature")  # DOUBLE fields: NaN and 1e400 are refused
_FINITE_CHUNK = ("score", "rerank_score")
# a kept record's day, for the rows kept with it (its timestamp is text until raw_traces casts it)
_TRACE_DAY = utc_day('CAST(t."timestamp" AS TIMESTAMPTZ)')


def valid_time_sql(text: str) -> str:
    """SQL true when `text` is an ISO 8601 time between 1970 and 2262 (not 'epoch', 'infinity',
    year 0 or 10000, an offset of +25:00)."""
    return (f"(regexp_matches({text}, '{_ISO_TIME}') AND "
            f"coalesce(year(try_cast({text} AS TIMESTAMPTZ)) BETWEEN 1970 AND 2262, false))")


def record_problem_sql(t: str) -> str:
    """SQL naming what a typed trace `t` misses (trace id, query, a good timestamp...), or NULL."""
    finite = " ".join(f"WHEN NOT coalesce(isfinite({t}.{f}), true) THEN 'wrong_type: {f}'"
                      for f in _FINITE)
    finite_chunks = " ".join(
        f"""WHEN list_bool_or(list_transform({t}.chunks, lambda c: NOT coalesce(isfinite(c.{f}), true)))
                 THEN 'wrong_type: chunks[].{f}'""" for f in _FINITE_CHUNK)
    return f"""CASE WHEN coalesce(regexp_replace({t}.trace_id, '{_BLANK}', '', 'g'), '') = ''
                    THEN 'missing_trace_id'
               WHEN coalesce(trim({t}.original_query), '') = '' THEN 'missing_query'
               WHEN {t}."timestamp" IS NULL THEN 'missing_timestamp'
               WHEN NOT {valid_time_sql(f'{t}."timestamp"')} THEN 'bad_timestamp'
               WHEN list_bool_or(list_transform({t}.chunks, lambda c: c.doc_id IS NULL))
                    THEN 'missing_field: chunks[].doc_id'
               WHEN list_bool_or(list_transform({t}.spans, lambda x: x.name IS NULL))
                    THEN 'missing_field: spans[].name'
               WHEN list_bool_or(list_transform({t}.spans, lambda x: x.start_time IS NOT NULL
                                                 AND NOT {valid_time_sql('x.start_time')}))
                    THEN 'wrong_type: spans[].start_time'
               WHEN list_bool_or(list_transform({t}.spans,
                                                 lambda x: NOT coalesce(isfinite(x.duration_ms), true)))
                    THEN 'wrong_type: spans[].duration_ms'
               {finite} {finite_chunks}
          END"""


@cache
def _overflow_sql(raw: str) -> str:
    """SQL naming the first integer field of `raw` outside BIGINT, or NULL.

    `json_structure` calls 2^63 a UBIGINT like any positive integer, and `json_transform` into
    BIGINT turns it into NULL: read as HUGEINT and compared instead.
    """
    expected = _model_type()
    top = [k for k, v in expected.items() if v == "BIGINT"]
    nested = {k: [f for f, t in v[0].items() if t == "BIGINT"] for k, v in expected.items()
              if isinstance(v, list) and isinstance(v[0], dict)}
    nested = {k: fields for k, fields in nested.items() if fields}
    shape = {**dict.fromkeys(top, "HUGEINT"),
             **{k: [dict.fromkeys(fields, "HUGEINT")] for k, fields in nested.items()}}
    fits = "BETWEEN -9223372036854775808 AND 9223372036854775807"
    whens = [f"WHEN NOT coalesce(big.\"{f}\" {fits}, true) THEN 'wrong_type: {f}'" for f in top]
    whens += [f"""WHEN list_bool_or(list_transform(big."{k}", lambda x: NOT coalesce(x."{f}" {fits}, true)))
                  THEN 'wrong_type: {k}[].{f}'""" for k, fields in nested.items() for f in fields]
    return (f"(SELECT CASE {' '.join(whens)} END FROM "
            f"(SELECT json_transform({raw}, '{json.dumps(shape)}') AS big))")


def _load_registered_batch(con: duckdb.DuckDBPyConnection, source_file: str,
                           source_format: str, set_aside_format: str) -> BatchCounts:
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _parsed AS
        SELECT line_no, structure, t, t.trace_id AS trace_id,
               coalesce(overflow, {record_problem_sql('t')}) AS problem
        FROM (SELECT line_no, json_structure(raw) AS structure,
                     json_transform(raw, '{trace_struct()}') AS t, {_overflow_sql('raw')} AS overflow
              FROM _batch WHERE json_valid(raw))""")
    _classify_structures(con)
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _verdict AS
        SELECT b.line_no, b.source_line, b.span_id, p.trace_id,
               CASE WHEN p.line_no IS NULL THEN 'invalid_json'
                    ELSE coalesce(s.problem, p.problem) END AS reason
        FROM (SELECT line_no, source_line, span_id FROM _batch
              WHERE trim(raw, ' \t\r') <> '') b  -- blank lines are skipped, as in OTLP files
        LEFT JOIN _parsed p ON p.line_no = b.line_no
        LEFT JOIN _structure_problems s ON s.structure = p.structure""")
    return _store_batch_verdicts(con, source_file, source_format, set_aside_format)


def _store_batch_verdicts(con: duckdb.DuckDBPyConnection, source_file: str, source_format: str,
                          set_aside_format: str) -> BatchCounts:
    """Quarantine the lines of `_batch` that `_verdict` gives a reason, with their text; store the rest."""
    con.execute(f"""
        INSERT INTO quarantine
        SELECT ?, v.source_line, ?, v.reason, left(b.raw, {RAW_PREVIEW_CHARS}), now(), v.span_id
        FROM _verdict v JOIN _batch b USING (line_no) WHERE v.reason IS NOT NULL""",
                [source_file, set_aside_format])
    return store_verdicts(con, source_file, source_format, set_aside_format=set_aside_format)


_INT64 = (-(1 << 63), (1 << 63) - 1)
_PLAIN_DEPTH = 64  # deeper free-form values go to `load_batch`, which names what it finds


def fits_model(record: Any) -> bool:
    """True when `record` (a dict our own code built, such as an assembled OTLP trace) is an
    object whose values all have the JSON types the trace model expects (in int64 range, no
    empty object or null in a list) and whose JSON is valid (finite floats): then `load_batch`'s
    JSON and type checks cannot refuse it, and `load_typed_records` stores it with one parse.
    Conservative: False only means "check it the long way"."""
    try:
        return type(record) is dict and _fits(record, _model_type())
    except RecursionError:
        return False


@cache
def _model_type() -> Any:
    """`duckdb_type(Trace)`, one object shared by its readers, which never change it."""
    return duckdb_type(Trace)


def _fits(value: dict, fields: dict[str, Any]) -> bool:
    """The values of the object `value` against the struct `fields` (`duckdb_type`)."""
    for key, item in value.items():
        if item is None:
            continue
        expected = fields.get(key)
        if expected is None:  # a key the model does not know: ignored, if valid JSON
            if not _plain(item, 0):
                return False
        elif type(expected) is str:
            if not _fits_scalar(item, expected):
                return False
        elif type(expected) is dict:
            if type(item) is not dict or not _fits(item, expected):
                return False
        elif type(item) is not list or not all(_fits_item(element, expected[0]) for element in item):
            return False
    return True


def _fits_item(element: Any, expected: Any) -> bool:
    """A list element: not null, not an empty object (`json_structure` would merge it away)."""
    if type(expected) is dict:
        return type(element) is dict and bool(element) and _fits(element, expected)
    return element is not None and _fits_scalar(element, expected)


def _fits_scalar(item: Any, expected: str) -> bool:
    kind = type(item)
    if kind is str:
        return expected == "VARCHAR"
    if kind is int:
        return expected in ("BIGINT", "DOUBLE") and _INT64[0] <= item <= _INT64[1]
    if kind is float:
        return expected == "DOUBLE" and math.isfinite(item)
    if kind is bool:
        return expected == "BOOLEAN"
    return expected == "JSON" and kind is dict and _plain(item, 0)  # a free-form object (filters)


def _plain(value: Any, depth: int) -> bool:
    """Valid JSON whatever its shape: no NaN or infinity, not nested too deeply."""
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    if kind is dict or kind is list:
        return depth < _PLAIN_DEPTH and all(_plain(v, depth + 1)
                                            for v in (value.values() if kind is dict else value))
    return value is None or kind in (str, int, bool)


def load_typed_records(con: duckdb.DuckDBPyConnection, lines: pa.Table, source_file: str,
                       source_format: str, set_aside_format: str) -> BatchCounts:
    """`load_batch` for records `fits_model` passed (line_no, raw, source_line, span_id): the
    same rows and reasons, with each record parsed once (`json_transform`) instead of validated
    three times, since only what a typed record can miss (`record_problem_sql`) can refuse it."""
    con.register("_batch", _placed(lines))
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE _parsed AS
            SELECT line_no, t, t.trace_id AS trace_id, {record_problem_sql('t')} AS problem
            FROM (SELECT line_no, json_transform(raw, '{trace_struct()}') AS t FROM _batch)""")
        con.execute("""
            CREATE OR REPLACE TEMP TABLE _verdict AS
            SELECT b.line_no, b.source_line, b.span_id, p.trace_id, p.problem AS reason
            FROM _batch b JOIN _parsed p USING (line_no)""")
        return _store_batch_verdicts(con, source_file, source_format, set_aside_format)
    finally:
        con.unregister("_batch")


def store_verdicts(con: duckdb.DuckDBPyConnection, source_file: str, source_format: str,
                   parsed: str = "_parsed", set_aside_format: str | None = None) -> BatchCounts:
    """Store the traces `_verdict` (line_no, source_line, span_id, trace_id, reason) accepts,
    typed in `{parsed}.t` (joined on line_no).

    Rows with a reason are counted as quarantined; the caller stored them with their text.
    """
    # the stored ids are narrowed to the batch's first: NOT IN over all of raw_traces hashes
    # every stored id per batch (~75 CPU-ms at 1M traces), a semi join only probes them
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _keep AS
        SELECT line_no, source_line FROM _verdict
        WHERE reason IS NULL AND trace_id NOT IN (
            SELECT trace_id FROM raw_traces WHERE trace_id IN (SELECT trace_id FROM _verdict))
        QUALIFY row_number() OVER (PARTITION BY trace_id ORDER BY line_no) = 1""")
    total, bad, kept = con.execute("""
        SELECT count(*), count(reason), (SELECT count(*) FROM _keep) FROM _verdict""").fetchall()[0]
    # a statement costs ~1-5 ms even on no rows: those with nothing to write are not run
    if total - bad - kept:
        con.execute("""
            INSERT INTO trace_duplicates
            SELECT ?, v.source_line, v.trace_id, ?, now(), v.span_id FROM _verdict v
            WHERE v.reason IS NULL AND v.line_no NOT IN (SELECT line_no FROM _keep)
              AND NOT EXISTS (SELECT 1 FROM raw_traces r  -- the same record, read again
                              WHERE r.trace_id = v.trace_id AND r.source_file = ? AND r.source_line = v.source_line)
            """, [source_file, set_aside_format or source_format, source_file])
    if kept:
        _store_kept(con, f"{parsed} JOIN _keep USING (line_no)", source_file, source_format)
    return BatchCounts(ingested=kept, duplicates=total - bad - kept, quarantined=bad)


def _store_kept(con: duckdb.DuckDBPyConnection, new: str, source_file: str, source_format: str) -> None:
    """The traces `new` selects (t, source_line) into raw_traces and its child tables."""
    con.execute(f"""
        INSERT INTO raw_traces BY NAME
        SELECT {_trace_columns()}, ? AS source_format, ? AS source_file,
               source_line, now() AS ingested_at
        FROM {new}""", [source_format, source_file])
    # the day is computed per trace, before unnest (in the same SELECT it is computed per row)
    con.execute(f"""
        INSERT INTO trace_chunks BY NAME
        SELECT trace_id, unnest(chunks, recursive := true), day
        FROM (SELECT t.trace_id, t.chunks, {_TRACE_DAY} AS day FROM {new})""")
    con.execute(f"""
        INSERT INTO trace_spans BY NAME
        SELECT trace_id, span_id, parent_span_id, name, kind,
               try_cast(start_time AS TIMESTAMPTZ) AS start_time, duration_ms, status, day
        FROM (SELECT trace_id, unnest(spans, recursive := true), day
              FROM (SELECT t.trace_id, t.spans, {_TRACE_DAY} AS day FROM {new}))""")
    con.execute(f"""
        INSERT INTO trace_feedback BY NAME
        SELECT t.trace_id, t.feedback.rating, t.feedback.category, t.feedback.comment, {_TRACE_DAY} AS day
        FROM {new} WHERE t.feedback IS NOT NULL""")


def quarantine_rejected(con: duckdb.DuckDBPyConnection, rejected: list[Rejected],
                        source_file: str, source_format: str) -> BatchCounts:
    """Store records refused before parsing (not UTF-8, oversized, unreadable file)."""
    insert_rows(con, "INSERT INTO quarantine (source_file, line_no, format, reason, raw, quarantined_at, "
                     "span_id) SELECT ?, line_no, ?, reason, raw, now(), span_id FROM _ingest_rows",
                [(r.line_no, r.reason, r.raw, r.span_id) for r in rejected], _REJECTED_ROW,
                [source_file, source_format])
    return BatchCounts(quarantined=len(rejected))


_REJECTED_ROW = pa.schema([("line_no", pa.int64()), ("reason", pa.string()), ("raw", pa.string()),
                           ("span_id", pa.string())])
