"""A mapping of simple paths run in DuckDB SQL over JSONL lines: the fast path of mapped ingestion.

`sql_mapping` compiles a mapping whose paths are all simple (identifiers, quoted identifiers,
dots, `[n]` indexes, `@`) and whose options the SQL reproduces (constants, `position`, `type`,
`values`, `format` iso or epoch_*, `hash`, `each`, `fields`) into one SELECT over the table
`_mapped_lines` (line_no, raw). Anything else (`then`, `until`, a strptime format, a `type` or
conversion on `each`/`fields`, JMESPath functions, filters, projections, `group_by`, `records`)
gives None: the mapping keeps the Python path (`field_map.map_record`).

The SELECT gives each line the native trace as a struct of JSON leaves (`j`, the shape
`native.typed_leaves_sql` types) and `exact`: true only when that is certainly what `map_record` makes
of the line, with no mapping failure, once the native typing's checks pass too (an unconverted
leaf of a text, integer, boolean or number field is left to them: `_TYPE_CHECKED`). A line
that is not exact is mapped again by `map_record`, which says why it fails: the SQL must be
exact where it says so, never complete. It is
conservative: a value kind, text shape or conversion it does not reproduce to the bit (a float
where `int` is asked, an epoch beyond 2106 or with sub-microseconds, a text `float()` reads but
the pattern below does not, an object as a leaf) sends the line to Python.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import jmespath

from rag_loop.ingest.field_map import EPOCH_UNITS, NESTED_MODELS, FieldMap, FieldSpec, constant_value
from rag_loop.ingest.records import duckdb_type
from rag_loop.schema import Trace

# JSON that DuckDB's parser accepts and Python's json.loads refuses (a trailing comma, lowercase
# nan or inf; the pattern also catches such text inside strings: those lines just take Python),
# or that Python cannot read (nested deeper than its recursion, a 1000-digit number)
# (nan|inf) in any case, as a value: after ':', ',' or '['; each pattern starts with a literal,
# which RE2 finds with memchr (a leading class such as [:,\[] reads ~4 times slower)
_ODD = r"\s*[-+]?([nN][aA][nN]|[iI][nN][fF])"  # Python reads NaN, Infinity, -Infinity alike: fine to send
_NOT_PYTHON_JSON = (r",\s*([\]}]|" + _ODD[3:] + ")", ":" + _ODD, r"\[" + _ODD)
_DEEP = 200  # brackets: fewer cannot nest deep enough for json.loads to give up (its recursion limit)
_MICROS = {"epoch_s": 1_000_000, "epoch_ms": 1_000, "epoch_us": 1}
# instants before this many seconds (2106; 2038 in nanoseconds) are rounded by Python's
# float division exactly to the microsecond the integer arithmetic below gives
_EPOCH_LIMIT = {"epoch_s": 1 << 32, "epoch_ms": 1 << 32, "epoch_us": 1 << 32, "epoch_ns": 1 << 31}
_SCALAR_KINDS = "('VARCHAR', 'BIGINT', 'UBIGINT', 'BOOLEAN')"


@dataclass(frozen=True)
class SqlMapping:
    """A mapping compiled to SQL: `select` gives line_no, j, exact and r<i> (target i resolved)."""

    select: str
    targets: list[str]
    factor: int  # Python's JSON text of a mapped line is at most factor * its bytes + extra
    extra: int


def plain_json_sql(text: str) -> str:
    """SQL true when Python's json.loads reads the JSON text `text` as DuckDB does: no trailing
    comma, no nan or inf in a case Python refuses, not too deep, no 1000-digit number."""
    brackets = f"strlen({text}) - strlen(replace(replace({text}, '[', ''), '{{', ''))"
    odd = " OR ".join(f"regexp_matches({text}, '{pattern}')" for pattern in _NOT_PYTHON_JSON)
    return (f"(NOT ({odd}) AND {brackets} < {_DEEP} "
            f"AND NOT (strlen({text}) > 4300 AND regexp_matches({text}, '[0-9]{{1000}}')))")


def sql_mapping(spec: FieldMap) -> SqlMapping | None:
    """The SQL of `spec`, or None when some option needs the Python path."""
    if spec.group_by is not None or spec.records is not None:
        return None
    builder = _Builder(_Level("v", []))
    try:
        fields = builder.object(spec.fields, (), "", None)
        structure = builder.level.structure()
        j = builder.level.resolve(_struct(duckdb_type(Trace), fields))
        exact = [builder.level.resolve(c) for c in builder.exact]
        resolved = [(t, builder.level.resolve(c)) for t, c in builder.resolved]
        lists = [(name, builder.level.resolve(c)) for name, c in builder.lists]
    except _NotSql:
        return None
    exact_sql = " AND ".join(["v IS NOT NULL", "regexp_matches(raw, '^[ \\t\\n\\r]*[{]')", plain_json_sql("raw"),
                              *exact])
    resolved_sql = "".join(f", coalesce({sql}, false) AS r{i}" for i, (_, sql) in enumerate(resolved))
    lists_sql = "".join(f", {sql} AS {name}" for name, sql in lists)
    select = f"""
        SELECT line_no, strlen(raw) AS bytes, {j} AS j, coalesce({exact_sql}, false) AS exact{resolved_sql}
        FROM (SELECT line_no, raw, v{lists_sql}
              FROM (SELECT line_no, raw, try(json_transform(raw, '{_sql_text(json.dumps(structure))}')) AS v
                    FROM _mapped_lines WHERE NOT regexp_full_match(raw, '[ \\t\\r]*')))"""
    top = [len(t) + 48 + builder.constants.get(t, 0) for t, _ in resolved if "[]" not in t]
    per_element = sum(len(t) + 48 + builder.constants.get(t, 0) for t, _ in resolved if "[]" in t) + 4
    factor = 5 * len(resolved) + per_element // 2 + 1
    return SqlMapping(select, [target for target, _ in resolved], factor, sum(top) + 64)


class _NotSql(Exception):
    """An option of the mapping that the SQL path does not reproduce."""


Step = tuple[str, Any]  # ("field", name) or ("index", n)


def simple_steps(expression: str) -> tuple[Step, ...]:
    """The steps of a simple JMESPath (`a.b`, `"a.b"`, `a[0]`, `a[-1]`, `@`); _NotSql otherwise."""
    try:
        return tuple(_steps(jmespath.compile(expression).parsed))
    except RecursionError as error:
        raise _NotSql("too deep") from error


def _steps(node: dict[str, Any]) -> list[Step]:
    kind = node["type"]
    if kind in ("current", "identity"):
        return []
    if kind == "field":
        name = node["value"]
        if not isinstance(name, str) or '"' in name or "\\" in name or not name.isprintable():
            raise _NotSql(name)
        return [("field", name)]
    if kind == "subexpression":
        return [step for child in node["children"] for step in _steps(child)]
    if kind == "index_expression":
        base, *indexes = node["children"]
        steps = _steps(base)
        for index in indexes:
            if index["type"] != "index":
                raise _NotSql(kind)
            steps.append(("index", index["value"]))
        return steps
    raise _NotSql(kind)


def _json_path(steps: tuple[Step, ...]) -> str:
    """DuckDB's JSON path of `steps`."""
    return "$" + "".join(f'."{v}"' if k == "field" else f"[{v}]" if v >= 0 else f"[#{v}]" for k, v in steps)


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


_PLACE = re.compile(r"⟪(\d+):(\d+)⟫")


@dataclass(eq=False)
class _Level:
    """The paths read at one level (the record `v`, or a list's element `e`), all parsed by one
    `json_transform`: the leading names of each path are struct fields, down to the first
    that is read whole (a path ends there, or an index follows); the rest is `json_extract`."""

    var: str
    levels: list[_Level]  # every level of the mapping: placeholders name theirs by place
    paths: list[tuple[Step, ...]] = field(default_factory=list)
    lists: dict[tuple[str, ...], _Level] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.levels.append(self)

    def ref(self, steps: tuple[Step, ...]) -> str:
        """A placeholder for the JSON at `steps`, resolved once every path is known."""
        if steps not in self.paths:
            self.paths.append(steps)
        return f"⟪{self.levels.index(self)}:{self.paths.index(steps)}⟫"

    def _leaves(self) -> set[tuple[str, ...]]:
        """The names read whole: where a path ends or an index follows, and an object two of
        whose keys read differ only by case (DuckDB's struct fields ignore case: json_extract
        reads below it, case-sensitive as JMESPath is)."""
        leaves = {_names(steps) for steps in self.paths}
        while True:
            kept = {n for n in leaves if not any(n[:k] in leaves for k in range(len(n)))}
            children: dict[tuple[str, ...], set[str]] = {}
            for names in [*kept, *self.lists]:
                for k in range(len(names)):
                    children.setdefault(names[:k], set()).add(names[k])
            clash = {p for p, c in children.items() if len({n.lower() for n in c}) != len(c)}
            if () in kept | clash and self.var != "v":
                raise _NotSql("a list element read whole")
            if not clash - leaves:
                return kept
            leaves |= clash

    def structure(self) -> Any:
        """The `json_transform` structure of the paths and lists read."""
        tree: dict[str, Any] = {}
        leaves = self._leaves() - {()}
        for names in leaves:
            node = tree
            for name in names[:-1]:
                node = node.setdefault(name, {})
            node[names[-1]] = "JSON"
        for names, element in self.lists.items():
            others = [*leaves, *(n for n in self.lists if n != names)]
            if any(names[:len(other)] == other or other[:len(names)] == names for other in others):
                raise _NotSql("a list also read as a value, or within another list")
            node = tree
            for name in names[:-1]:
                node = node.setdefault(name, {})
                if not isinstance(node, dict):
                    raise _NotSql("a list below a value")
            node[names[-1]] = [element.structure()]
        return tree or {"rag_loop_nothing": "JSON"}

    def access(self, steps: tuple[Step, ...]) -> str:
        """SQL of the JSON at `steps` (NULL when absent)."""
        names = _names(steps)
        leaves = self._leaves()
        cut = next(k for k in range(len(names) + 1) if names[:k] in leaves)
        base = self.var + "".join(f'."{n}"' for n in names[:cut])
        if cut == 0:  # the record whole (the line, once DuckDB read it)
            base = "CASE WHEN v IS NOT NULL THEN raw::JSON END"
        rest = steps[cut:]
        return f"json_extract({base}, '{_sql_text(_json_path(rest))}')" if rest else base

    def resolve(self, sql: str) -> str:
        """`sql` with the placeholders of every level replaced by their SQL."""
        return _PLACE.sub(lambda m: self.levels[int(m[1])].access(self.levels[int(m[1])].paths[int(m[2])]), sql)


def _names(steps: tuple[Step, ...]) -> tuple[str, ...]:
    """The leading field names of `steps`."""
    names = []
    for kind, value in steps:
        if kind != "field":
            break
        names.append(value)
    return tuple(names)


def _literal(value: Any) -> str:
    """A value as a SQL JSON literal; _NotSql when it is not JSON (a YAML date, NaN)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise _NotSql("a constant that is not JSON") from error
    return "NULL::JSON" if value is None else f"'{_sql_text(text)}'::JSON"


@dataclass
class _Builder:
    """While the SQL of each field is written, collects at its level: the paths read, the
    columns computed once for the fields that use them (`lists`: the elements of an `each`, a
    converted value), the conditions of an exact line and each coverage target's resolved test."""

    level: _Level
    lists: list[tuple[str, str]] = field(default_factory=list)
    exact: list[str] = field(default_factory=list)
    resolved: list[tuple[str, str]] = field(default_factory=list)
    constants: dict[str, int] = field(default_factory=dict)  # target: length of a constant it may give

    def object(self, specs: dict[str, FieldSpec], base: tuple[Step, ...], prefix: str, position: str | None,
               guard: str | None = None) -> dict[str, str]:
        """SQL per field of `specs`, their paths read below `base`; `guard` is SQL true when
        the object they are read from is there (`fields` with a path)."""
        out = {}
        for name, spec in specs.items():
            target = f"{prefix}{name}"
            if spec.each is not None:
                out[name] = self.each(spec, target)
            elif spec.fields is not None:
                out[name] = self.fields(spec, target, position)
            else:
                value, exact = self.leaf(spec, target, base, position, list_field=name == "citations")
                if guard is not None:
                    value = f"CASE WHEN {guard} THEN {value} END"
                out[name] = value
                self.exact.append(exact)
                self.resolved.append((target, f"{value} IS NOT NULL"))
        return out

    def leaf(self, spec: FieldSpec, target: str, base: tuple[Step, ...], position: str | None,
             list_field: bool) -> tuple[str, str]:
        """(value, exact) of a field that is neither a list nor an object of fields."""
        if spec.then is not None or spec.until is not None:
            raise _NotSql("then, until")
        if spec.format is not None and spec.format not in (*EPOCH_UNITS, "iso"):
            raise _NotSql("strptime")
        if "value" in spec.model_fields_set:
            value, failed = constant_value(spec)
            if failed:
                raise _NotSql("a constant the mapping fails on")
            if isinstance(value, dict) or (value is not None and list_field != isinstance(value, list)):
                raise _NotSql("a constant object, or a constant of the wrong shape")
            self.constants[target] = len(_literal(value))
            return (f"CAST({_literal(value)} AS JSON[])" if list_field else _literal(value)), "true"
        if spec.position:
            if position is None:
                return "NULL::JSON", "true"
            raw = f"to_json({position})"
        else:
            raw = self.level.ref(base + simple_steps(spec.path or "@"))
        if spec.values:
            self.constants[target] = max(len(_literal(v)) for v in spec.values.values())
        value, exact = _converted(spec, raw, list_field, _target_type(target))
        state = value.removesuffix(".v")
        if self.level.var == "v" and value != state and exact == f"{state}.ok":  # converted: computed once
            column = f"_leaf{len(self.lists)}"
            self.lists.append((column, state))
            return f"{column}.v", f"{column}.ok"
        return value, exact

    def each(self, spec: FieldSpec, target: str) -> str:
        if self.level.var != "v" or spec.type is not None or spec.values or spec.format or spec.hash:
            raise _NotSql("each converted, or inside a list")
        assert spec.path is not None and spec.each is not None
        steps = simple_steps(spec.path)
        names = _names(steps)
        if len(names) != len(steps) or not names or names in self.level.lists:
            raise _NotSql("a list read at an index, or twice")
        element = _Level("e", self.level.levels)
        self.level.lists[names] = element
        listed = self.level.var + "".join(f'."{n}"' for n in names)
        self.exact.append(f"CASE WHEN v IS NULL THEN false WHEN {listed} IS NOT NULL THEN true "
                          f"ELSE coalesce(json_type(raw, '{_sql_text(_json_path(steps))}'), 'NULL') = 'NULL' END")
        column = f"_list{len(self.lists)}"  # lists and _leaf columns share the numbering
        inner = _Builder(element)
        fields = inner.object(spec.each, (), f"{target}[].", "i")
        self.constants.update(inner.constants)
        struct = _struct(duckdb_type(NESTED_MODELS[target]), fields)
        self.lists.append((column, f"list_transform({listed}, lambda e, i: {struct})"))
        checks = [check for check in inner.exact if check != "true"]
        if checks:
            self.exact.append(f"coalesce(list_bool_and(list_transform({listed}, lambda e, i: "
                              f"{' AND '.join(checks)})), true)")
        for inner_target, _ in inner.resolved:  # resolved: the element's field is not NULL
            name = inner_target.rsplit(".", 1)[1]
            self.resolved.append((inner_target,
                                  f'list_bool_or(list_transform({column}, lambda x: x."{name}" IS NOT NULL))'))
        return column

    def fields(self, spec: FieldSpec, target: str, position: str | None) -> str:
        if self.level.var != "v" or spec.type is not None or spec.position or "value" in spec.model_fields_set:
            raise _NotSql("fields converted, constant or inside a list")
        assert spec.fields is not None
        base, guard = (), None
        if spec.path is not None:  # read below it; constants only when it is there
            base = simple_steps(spec.path)
            if any("value" in s.model_fields_set for s in spec.fields.values()):
                guard = f"coalesce(json_type({self.level.ref(base)}), 'NULL') <> 'NULL'"
        fields = self.object(spec.fields, base, f"{target}.", position, guard=guard)
        struct = _struct(duckdb_type(NESTED_MODELS[target]), fields)
        present = " OR ".join(f"{sql} IS NOT NULL" for sql in fields.values())
        return f"CASE WHEN {present} THEN {struct} END"


def _struct(expected: dict[str, Any], fields: dict[str, str]) -> str:
    """struct_pack of the model's fields: the mapped ones' SQL, NULL (JSON leaves) for the rest."""
    parts = [f'"{name}" := {fields.get(name) or "NULL::" + _null_type(kind)}' for name, kind in expected.items()]
    return f"struct_pack({', '.join(parts)})"


def _null_type(kind: Any) -> str:
    if isinstance(kind, dict):
        return "STRUCT(" + ", ".join(f'"{k}" {_null_type(v)}' for k, v in kind.items()) + ")"
    if isinstance(kind, list):
        return f"{_null_type(kind[0])}[]"
    return "JSON"


def _step(state: str, value: str, ok: str) -> str:
    """One conversion over the struct `state` {v, ok} (bound once as `s`): the new {v, ok}."""
    return f"list_transform([{state}], lambda s: {{'v': {value}, 'ok': s.ok AND ({ok})}})[1]"


_KIND = "json_type(s.v)"
_TEXT = "json_extract_string(s.v, '$')"
_BLANK = f"regexp_full_match({_TEXT}, ' *')"


def _target_type(target: str) -> Any:
    """The trace model's DuckDB type of a target (`latency_ms`, `chunks[].score`, `feedback.rating`)."""
    kind: Any = duckdb_type(Trace)
    for name in target.replace("[]", "").split("."):
        kind = kind[name]
        kind = kind[0] if isinstance(kind, list) else kind
    return kind


# a leaf of these types is checked where the native typing reads it (`leaves_type_ok_sql`: a
# string, an integer written as one, true or false, a number; `record_problem_sql`: every
# DOUBLE field finite): a clean line holds only JSON values Python reads alike there
_TYPE_CHECKED = ("VARCHAR", "BIGINT", "BOOLEAN", "DOUBLE")


def _converted(spec: FieldSpec, raw: str, list_field: bool, kind: Any) -> tuple[str, str]:
    """(value, exact): SQL of the field's JSON value after `type`, `values`, `format` and `hash`,
    in `field_map._value`'s order, and SQL true when that is certainly Python's value (for a
    target of type `kind`)."""
    later = spec.format is not None or spec.hash  # a None these meet is not None in Python
    state = f"{{'v': CASE WHEN json_type({raw}) <> 'NULL' THEN {raw} END, 'ok': true}}"
    start = state
    if spec.type is not None:
        value, ok = _TYPES[spec.type]
        if later or spec.type == "json":
            ok = f"({ok}) AND (s.v IS NULL OR ({value}) IS NOT NULL)"
        state = _step(state, value, f"s.v IS NULL OR ({ok})")
    if spec.values is not None:
        state = _step(state, *_renamed(spec.values, later))
    if spec.format == "iso":
        state = _step(state, "s.v", f"s.v IS NULL OR {_KIND} = 'VARCHAR'")
    elif spec.format is not None:
        state = _step(state, *_epoch(spec.format))
    if spec.hash:
        printable = f"regexp_full_match({_TEXT}, '[\\x20\\x21\\x23-\\x5b\\x5d-\\x7e]*')"
        state = _step(state, f"""to_json(left(sha256(CASE WHEN {_KIND} = 'VARCHAR' THEN '"' || {_TEXT} || '"'
                                                         ELSE s.v::VARCHAR END), 16))""",
                      f"s.v IS NULL OR {_KIND} IN ('BIGINT', 'UBIGINT', 'BOOLEAN') "
                      f"OR ({_KIND} = 'VARCHAR' AND {printable})")
    if state == start and not list_field:  # no conversion: told by the JSON text, parsed no more
        text = f"{raw}::VARCHAR"
        value = f"CASE WHEN {text} <> 'null' THEN {raw} END"
        if kind in _TYPE_CHECKED:
            return value, "true"
        number = f"coalesce(isfinite(TRY_CAST({text} AS DOUBLE)), false)"  # not nan, inf, 1e400
        return value, (f"CASE WHEN {text} IS NULL OR {text} = 'null' OR left({text}, 1) IN ('\"', 't', 'f') "
                       f"THEN true ELSE {number} END")
    if state == start:
        value, ok = _final(raw, list_field)
        value = f"CASE WHEN json_type({raw}) <> 'NULL' THEN {value} END"
        return value, f"({raw} IS NULL OR json_type({raw}) = 'NULL' OR {ok})"
    value, ok = _final("s.v", list_field)
    state = _step(state, value, f"s.v IS NULL OR {ok}")
    return f"{state}.v", f"{state}.ok"


def _final(x: str, list_field: bool) -> tuple[str, str]:
    """A converted value `x` (not JSON null) as the trace takes it, and SQL true when Python
    would hold the same: a scalar (a finite float), or a list for `citations`."""
    if list_field:
        return f"CASE WHEN json_type({x}) = 'ARRAY' THEN CAST({x} AS JSON[]) END", f"json_type({x}) = 'ARRAY'"
    return x, (f"json_type({x}) IN {_SCALAR_KINDS} OR (json_type({x}) = 'DOUBLE' "
               f"AND coalesce(isfinite(TRY_CAST({x}::VARCHAR AS DOUBLE)), false))")


_INT = r" *[-+]?[0-9]{1,18} *"
_FLOAT = r" *[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]{1,3})? *"
_TYPES: dict[str, tuple[str, str]] = {  # field_map._typed: (value, exact) over s.v, not NULL
    "string": (f"""CASE {_KIND} WHEN 'VARCHAR' THEN s.v
                        WHEN 'BOOLEAN' THEN CASE WHEN s.v::VARCHAR = 'true' THEN '"True"' ELSE '"False"' END::JSON
                        WHEN 'BIGINT' THEN to_json(s.v::VARCHAR) WHEN 'UBIGINT' THEN to_json(s.v::VARCHAR) END""",
               f"{_KIND} IN {_SCALAR_KINDS}"),
    "int": (f"""CASE WHEN {_KIND} <> 'VARCHAR' THEN s.v
                     WHEN regexp_full_match({_TEXT}, '{_INT}') THEN to_json(trim({_TEXT})::BIGINT) END""",
            f"{_KIND} IN ('BIGINT', 'UBIGINT', 'BOOLEAN') OR ({_KIND} = 'VARCHAR' AND "
            f"(regexp_full_match({_TEXT}, '{_INT}') OR {_BLANK}))"),
    "float": (f"""CASE WHEN {_KIND} <> 'VARCHAR' THEN s.v
                       WHEN regexp_full_match({_TEXT}, '{_FLOAT}')
                       THEN to_json(TRY_CAST(trim({_TEXT}) AS DOUBLE)) END""",
              f"{_KIND} IN ('BIGINT', 'UBIGINT', 'DOUBLE', 'BOOLEAN') OR ({_KIND} = 'VARCHAR' AND "
              f"(coalesce(isfinite(TRY_CAST(CASE WHEN regexp_full_match({_TEXT}, '{_FLOAT}') THEN trim({_TEXT}) END "
              f"AS DOUBLE)), false) OR {_BLANK}))"),
    "bool": (f"""CASE WHEN {_KIND} <> 'VARCHAR' THEN s.v
                      WHEN regexp_full_match({_TEXT}, ' *(?i:true|1|yes) *') THEN 'true'::JSON
                      WHEN regexp_full_match({_TEXT}, ' *(?i:false|0|no) *') THEN 'false'::JSON END""",
             f"{_KIND} <> 'VARCHAR' OR regexp_full_match({_TEXT}, ' *(?i:true|1|yes|false|0|no)? *')"),
    "json": (f"CASE WHEN {_KIND} <> 'VARCHAR' THEN s.v WHEN json_valid({_TEXT}) THEN "
             f"CASE WHEN json_type({_TEXT}::JSON) <> 'NULL' THEN {_TEXT}::JSON END END",
             f"{_KIND} <> 'VARCHAR' OR (json_valid({_TEXT}) AND {plain_json_sql(_TEXT)})"),
}


def _renamed(values: dict[str, Any], later: bool) -> tuple[str, str]:
    """`values`: a text, an integer or a boolean looked up by its Python str()."""
    key = (f"CASE {_KIND} WHEN 'VARCHAR' THEN {_TEXT} WHEN 'BOOLEAN' THEN s.v::VARCHAR "
           f"WHEN 'BIGINT' THEN s.v::VARCHAR WHEN 'UBIGINT' THEN s.v::VARCHAR END")
    whens = " ".join(f"WHEN {_text_literal(k)} THEN {_literal(v)}" for k, v in values.items())
    value = f"CASE {key} {whens} ELSE s.v END" if values else "s.v"
    ok = f"s.v IS NULL OR {_KIND} <> 'DOUBLE'"
    if later and any(v is None for v in values.values()):  # a None that format or hash meets
        nulls = ", ".join(_text_literal(k) for k, v in values.items() if v is None)
        ok = f"({ok}) AND coalesce({key} NOT IN ({nulls}), true)"
    return value, ok


def _text_literal(text: Any) -> str:
    if not isinstance(text, str):
        raise _NotSql("a key that is not a text")
    return "'" + text.replace("'", "''") + "'"


def _epoch(fmt: str) -> tuple[str, str]:
    """An epoch integer (a JSON integer or a text of digits) as Python's ISO text."""
    number = f"TRY_CAST(CASE WHEN {_KIND} = 'VARCHAR' THEN {_TEXT} ELSE s.v::VARCHAR END AS HUGEINT)"
    micros = f"({number} // 1000)" if fmt == "epoch_ns" else f"({number} * {_MICROS[fmt]})"
    unit = 1_000_000_000 if fmt == "epoch_ns" else 1_000_000 // _MICROS[fmt]
    digits = (f"({_KIND} IN ('BIGINT', 'UBIGINT') "
              f"OR ({_KIND} = 'VARCHAR' AND regexp_full_match({_TEXT}, '[0-9]{{1,19}}')))")
    limit = _EPOCH_LIMIT[fmt] * unit - 1
    ok = (f"s.v IS NULL OR ({digits} AND {number} BETWEEN 0 AND {limit}"
          + (f" AND {number} % 1000 = 0)" if fmt == "epoch_ns" else ")"))
    at = f"make_timestamp(CAST({micros} AS BIGINT))"
    text = (f"strftime({at}, '%Y-%m-%dT%H:%M:%S') || CASE WHEN {micros} % 1000000 <> 0 THEN '.' || "
            f"lpad(CAST({micros} % 1000000 AS VARCHAR), 6, '0') ELSE '' END || '+00:00'")
    return f"CASE WHEN {digits} THEN CASE WHEN {number} BETWEEN 0 AND {limit} THEN to_json({text}) END END", ok
