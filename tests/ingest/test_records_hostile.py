"""Native records stored wrong before: every reader gives the same verdict on the same line."""

import json

import pytest

from rag_loop.ingest import ingest_directory
from tests.helpers import trace_line


def verdicts(con) -> dict[int, str]:
    stored = dict(con.execute("SELECT source_line, 'stored' FROM raw_traces").fetchall())
    return {**stored, **dict(con.execute("SELECT line_no, reason FROM quarantine").fetchall())}


@pytest.mark.parametrize("record, reason", [
    ({"timestamp": "0000-01-01T00:00:00Z"}, "bad_timestamp"),
    ({"timestamp": "10000-01-01T00:00:00Z"}, "bad_timestamp"),
    ({"timestamp": "infinity"}, "bad_timestamp"), ({"timestamp": "epoch"}, "bad_timestamp"),
    ({"timestamp": "2026-11-01T00:00:00+25:00"}, "bad_timestamp"),
    ({"trace_id": " \t"}, "missing_trace_id"), ({"trace_id": "\u200b"}, "missing_trace_id"),
    ({"latency_ms": "NaN"}, "wrong_type: latency_ms"),
    ({"latency_ms": "1e400"}, "wrong_type: latency_ms"),
    ({"chunks": [{"doc_id": "d", "score": "Infinity"}]}, "wrong_type: chunks[].score"),
    ({"spans": [{"name": "s", "start_time": "yesterday"}]}, "wrong_type: spans[].start_time"),
])
@pytest.mark.parametrize("after_blank_line", [False, True])  # read_json, then the read_csv reader
def test_values_that_used_to_be_stored_wrong_are_quarantined(con, tmp_path, record, reason,
                                                             after_blank_line):
    line = json.dumps({**json.loads(trace_line("bad")), **record}, ensure_ascii=False)
    for token in ("NaN", "1e400", "Infinity"):  # numbers JSON cannot spell, as bare tokens
        line = line.replace(f'"{token}"', token)
    lines = [trace_line("ok-1"), line, trace_line("ok-2")]
    (tmp_path / "t.jsonl").write_text(("\n" if after_blank_line else "") + "\n".join(lines) + "\n")
    ingest_directory(con, tmp_path)
    first = 2 if after_blank_line else 1
    found = verdicts(con)
    assert found[first] == found[first + 2] == "stored"
    assert found[first + 1] == reason


def test_a_lone_carriage_return_does_not_shift_line_numbers(con, tmp_path):
    lines = [trace_line(f"t{i}") for i in range(6)]
    lines[2] = lines[2].replace("How many", "How\rmany")  # raw \r inside a JSON string
    lines[3] = lines[3].replace(", ", ",\r ", 1)  # \r as whitespace between tokens: valid JSON
    (tmp_path / "t.jsonl").write_bytes("\n".join(lines).encode() + b"\n" + b"\x1f\n")
    ingest_directory(con, tmp_path)
    found = verdicts(con)
    assert {n: v for n, v in found.items() if n <= 6} == {
        1: "stored", 2: "stored", 3: "invalid_json", 4: "stored", 5: "stored", 6: "stored"}
    assert con.execute("SELECT trace_id FROM raw_traces WHERE source_line = 6").fetchall() == [("t5",)]


@pytest.mark.parametrize("field, value, reason", [
    ("turn_id", 2**63, "wrong_type: turn_id"), ("input_tokens", 2**64 - 1, "wrong_type: input_tokens"),
    ("chunks", [{"doc_id": "d", "rank": 2**63}], "wrong_type: chunks[].rank")])
@pytest.mark.parametrize("after_blank_line", [False, True])
def test_integers_beyond_bigint_are_quarantined_not_stored_as_null(con, tmp_path, field, value,
                                                                   reason, after_blank_line):
    line = json.dumps({**json.loads(trace_line("big")), field: value})
    (tmp_path / "t.jsonl").write_text(("\n" if after_blank_line else "") + trace_line("ok") + "\n"
                                      + line + "\n")
    ingest_directory(con, tmp_path)
    found = verdicts(con)
    assert sorted(found.values()) == sorted(["stored", reason])
