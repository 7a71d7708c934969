"""Records our own code built (assembled OTLP traces) skip the line loader's JSON and type
checks when `fits_model` passes them: property-based, `load_typed_records` then stores the
same rows with the same reasons as `load_batch`, and `fits_model` passes nothing
`load_batch` would refuse for its JSON or a wrong type."""

import json

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest.records import fits_model, load_batch, load_typed_records
from rag_loop.store.tables import create_tables
from tests.helpers.otlp import json_values

# each table's rows but the time they were written at
TABLES = {"raw_traces": "* EXCLUDE (ingested_at)", "trace_chunks": "*", "trace_spans": "*", "trace_feedback": "*",
          "quarantine": "* EXCLUDE (quarantined_at)", "trace_duplicates": "* EXCLUDE (seen_at)"}
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


def stored(emptied, records: list[dict], typed: bool) -> dict[str, list]:
    con = emptied(f"typed={typed}")  # one database a loader (tests/ingest/conftest.py)
    create_tables(con)
    con.execute("SET TimeZone = 'UTC'")
    table = pa.table({"line_no": pa.array(range(1, len(records) + 1), pa.int64()),
                      "raw": pa.array([json.dumps(r, ensure_ascii=False) for r in records], pa.string())})
    (load_typed_records if typed else load_batch)(con, table, "f.jsonl", "otlp", "otlp_trace")
    return {name: sorted(map(repr, con.execute(f"SELECT {columns} FROM {name}").fetchall()))
            for name, columns in TABLES.items()}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(built=records())
@example(built=[{"trace_id": "t", "original_query": "q", "timestamp": "2026-11-01T08:00:00Z",
                 "turn_id": 2**63, "temperature": float("nan"), "chunks": [{}]}])
def test_typed_records_are_stored_as_the_line_loader_stores_them(emptied, built):
    typed = [r for r in built if fits_model(r)]
    by_line_loader = stored(emptied, typed, typed=False)
    assert stored(emptied, typed, typed=True) == by_line_loader
    reasons = [row for row in by_line_loader["quarantine"] if "wrong_type" in row or "invalid_json" in row]
    assert not reasons
