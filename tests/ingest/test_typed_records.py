"""Records our own code built (assembled OTLP traces) skip the line loader's JSON and type
checks when `fits_model` passes them: property-based, `load_typed_records` then stores the
same rows with the same reasons as `load_batch`, and `fits_model` passes nothing
`load_batch` would refuse for its JSON or a wrong type."""

import json

import duckdb
import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest.records import fits_model, load_batch, load_typed_records
from rag_loop.store.tables import create_tables
from tests.helpers.otlp import json_values

TIMES = ("received_at", "ingested_at", "quarantined_at", "seen_at")
TABLES = ("raw_traces", "trace_chunks", "trace_spans", "trace_feedback", "quarantine", "trace_duplicates")
# values a model field may get: right types, wrong types, and what JSON cannot spell
field_values = st.one_of(
    json_values, st.text(max_size=12), st.integers(-2**64, 2**64), st.floats(),
    st.lists(st.one_of(st.none(), st.text(max_size=5), st.integers(), st.just({})), max_size=3),
    st.lists(st.dictionaries(st.sampled_from(["doc_id", "name", "score", "rank", "selected", "x"]),
                             json_values, max_size=4), max_size=3),
    st.sampled_from(["2026-11-01T08:00:00Z", "yesterday", " ", "2026-11-01T08:00:00+25:00"]))
fields = st.sampled_from(["trace_id", "timestamp", "original_query", "turn_id", "temperature",
                          "latency_ms", "is_fallback", "citations", "filters", "feedback",
                          "chunks", "spans", "language", "unknown"])


@st.composite
def records(draw) -> list[dict]:
    """Valid traces, each with a few fields replaced (some repeat an earlier trace id)."""
    built = []
    for number in range(draw(st.integers(1, 6))):
        record = {"trace_id": f"t{draw(st.integers(0, number))}", "original_query": "q",
                  "timestamp": "2026-11-01T08:00:00Z",
                  "chunks": [{"doc_id": "d", "chunk_id": "c", "score": 0.5, "rank": 1}],
                  "spans": [{"name": "llm", "duration_ms": 3.0}]}
        record.update(draw(st.dictionaries(fields, field_values, max_size=3)))
        built.append(record)
    return built


def stored(records: list[dict], typed: bool) -> dict[str, list]:
    con = duckdb.connect()
    create_tables(con)
    con.execute("SET TimeZone = 'UTC'")
    table = pa.table({"line_no": pa.array(range(1, len(records) + 1), pa.int64()),
                      "raw": pa.array([json.dumps(r, ensure_ascii=False) for r in records], pa.string())})
    (load_typed_records if typed else load_batch)(con, table, "f.jsonl", "otlp", "otlp_trace")
    rows = {}
    for name in TABLES:
        columns = [c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {name})").fetchall()
                   if c not in TIMES]
        rows[name] = sorted(map(repr, con.execute(f"SELECT {', '.join(columns)} FROM {name}").fetchall()))
    return rows


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records())
@example([{"trace_id": "t", "original_query": "q", "timestamp": "2026-11-01T08:00:00Z",
           "turn_id": 2**63, "temperature": float("nan"), "chunks": [{}]}])
def test_typed_records_are_stored_as_the_line_loader_stores_them(built):
    typed = [r for r in built if fits_model(r)]
    assert stored(typed, typed=True) == stored(typed, typed=False)
    reasons = [row for row in stored(typed, typed=False)["quarantine"]
               if "wrong_type" in row or "invalid_json" in row]
    assert not reasons
