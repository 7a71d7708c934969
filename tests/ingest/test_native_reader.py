"""The read_json reader types the chunk and span lists whole and finds a wrongly typed value in
them with one regular expression on their JSON text: every such value must be found (the line
then goes to the line loader, which names it)."""

import json
import math

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest.native import wrong_type_pattern
from rag_loop.ingest.records import duckdb_type, structure_problem
from rag_loop.schema import Trace

LISTS = {name: duckdb_type(Trace)[name] for name in ("chunks", "spans")}
KEYS = sorted({*LISTS["chunks"][0], *LISTS["spans"][0], "x"})
INT64 = (-(1 << 63), (1 << 63) - 1)
scalars = (st.none() | st.booleans() | st.integers(min_value=-2**65, max_value=2**65)
           | st.floats() | st.text(max_size=4))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2)
                      | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3), max_leaves=6)
elements = st.dictionaries(st.sampled_from(KEYS), values, max_size=4) | scalars


@pytest.fixture(scope="module")
def con():
    with duckdb.connect() as connection:
        yield connection


def _wrongly_typed(con, raw: str, expected: list) -> bool:
    """What the line loader refuses in the list: a value of the wrong JSON type, not finite, or
    an integer field beyond BIGINT. A non-object element is left out: it has no doc_id or name
    (`record_problem_sql`)."""
    problem = structure_problem(json.loads(con.execute("SELECT json_structure($raw)", {"raw": raw})
                                           .fetchall()[0][0]), expected)
    items = [e for e in json.loads(raw) if isinstance(e, dict)]
    beyond = any(not INT64[0] <= v <= INT64[1] for e in items for k, v in e.items()
                 if expected[0].get(k) == "BIGINT" and type(v) is int)
    not_finite = any(type(v) is float and not math.isfinite(v) for e in items for k, v in e.items()
                     if expected[0].get(k) == "DOUBLE")
    return problem not in (None, "[]") or beyond or not_finite


def _flagged(con, raw: str, expected: list) -> bool:
    # json(): the compact text read_json writes for a JSON column
    return con.execute("SELECT regexp_matches(json($raw)::VARCHAR, $pattern)",
                       {"raw": raw, "pattern": wrong_type_pattern(expected[0])}).fetchall()[0][0]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(LISTS)), items=st.lists(elements, max_size=3),
       ascii_only=st.booleans())
@example(name="chunks", items=[{"doc_id": "d", "rank": 2**63}], ascii_only=True)
@example(name="chunks", items=[{"doc_id": "d", "rank": 1.0}], ascii_only=True)
@example(name="chunks", items=[{"doc_id": "d", "score": float("nan")}], ascii_only=True)
@example(name="spans", items=[{"name": "n", "duration_ms": "1"}], ascii_only=True)
@example(name="spans", items=[{"name": "n", "duration_ms": float("-inf")}], ascii_only=True)
@example(name="chunks", items=[float("inf"), {"doc_id": "d", "x": float("nan")}], ascii_only=True)
def test_every_wrongly_typed_value_in_a_list_is_flagged(con, name, items, ascii_only):
    raw = json.dumps(items, ensure_ascii=ascii_only)
    expected = LISTS[name]
    if _wrongly_typed(con, raw, expected):
        assert _flagged(con, raw, expected)


@pytest.mark.parametrize("name, items", [
    ("chunks", [{"doc_id": "d", "score": 1, "rank": -2, "rerank_score": -0.5e-3, "selected": False,
                 "text": 'x, "rank": 2.5 \\ é', "doc_id_from": None}]),
    # a key-like run inside a string: its quotes are escaped, so `"rank":` does not match
    ("chunks", [{"doc_id": 'a","rank":"x', "text": '{"score":"1"}'}]),
    ("spans", [{"name": "n", "duration_ms": 1.5e3, "start_time": "2026-11-01T00:00:00Z"}, {"name": "m"}]),
])
def test_well_typed_lists_are_not_flagged(con, name, items):
    assert not _flagged(con, json.dumps(items), LISTS[name])
