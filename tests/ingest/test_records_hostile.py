"""Native records stored wrong before: every reader gives the same verdict on the same line."""

import json

import duckdb
import pytest

from rag_loop.ingest import ingest_directory
from tests.helpers import trace_line


def verdicts(con) -> dict[int, str]:
    stored = dict(con.execute("SELECT source_line, 'stored' FROM raw_traces").fetchall())
    return {**stored, **dict(con.execute("SELECT line_no, reason FROM quarantine").fetchall())}


WRONG = [
    ({"timestamp": "0000-01-01T00:00:00Z"}, "bad_timestamp"),
    ({"timestamp": "10000-01-01T00:00:00Z"}, "bad_timestamp"),
    ({"timestamp": "infinity"}, "bad_timestamp"), ({"timestamp": "epoch"}, "bad_timestamp"),
    ({"timestamp": "2026-11-01T00:00:00+25:00"}, "bad_timestamp"),
    ({"trace_id": " \t"}, "missing_trace_id"), ({"trace_id": "\u200b"}, "missing_trace_id"),
    ({"latency_ms": "NaN"}, "wrong_type: latency_ms"),
    ({"latency_ms": "1e400"}, "wrong_type: latency_ms"),
    ({"chunks": [{"doc_id": "d", "score": "Infinity"}]}, "wrong_type: chunks[].score"),
    ({"spans": [{"name": "s", "start_time": "yesterday"}]}, "wrong_type: spans[].start_time"),
]
BEYOND_BIGINT = [
    ("turn_id", 2**63, "wrong_type: turn_id"), ("input_tokens", 2**64 - 1, "wrong_type: input_tokens"),
    ("chunks", [{"doc_id": "d", "rank": 2**63}], "wrong_type: chunks[].rank")]


def _wrong_file(number: int, after_blank_line: bool) -> tuple[str, str]:
    """A stored record, the record of case `number` of WRONG, another stored record."""
    name = f"wrong-{number}-{after_blank_line}"
    line = json.dumps({**json.loads(trace_line(f"bad-{name}")), **WRONG[number][0]}, ensure_ascii=False)
    for token in ("NaN", "1e400", "Infinity"):  # numbers JSON cannot spell, as bare tokens
        line = line.replace(f'"{token}"', token)
    lines = [trace_line(f"ok-1-{name}"), line, trace_line(f"ok-2-{name}")]
    return f"{name}.jsonl", ("\n" if after_blank_line else "") + "\n".join(lines) + "\n"


def _bigint_file(number: int, after_blank_line: bool) -> tuple[str, str]:
    """A stored record, then the record of case `number` of BEYOND_BIGINT."""
    name = f"bigint-{number}-{after_blank_line}"
    field, value, _ = BEYOND_BIGINT[number]
    line = json.dumps({**json.loads(trace_line(f"big-{name}")), field: value})
    return f"{name}.jsonl", ("\n" if after_blank_line else "") + trace_line(f"ok-{name}") + "\n" + line + "\n"


@pytest.fixture(scope="module")
def verdicts_by_file(tmp_path_factory) -> dict[str, dict[int, str]]:
    """Every case's file, ingested in one run (each file is read, and falls back to the next
    reader, on its own; the trace ids differ between files): each file's verdicts by line."""
    directory = tmp_path_factory.mktemp("records")
    for after_blank_line in (False, True):
        files = [_wrong_file(n, after_blank_line) for n in range(len(WRONG))]
        files += [_bigint_file(n, after_blank_line) for n in range(len(BEYOND_BIGINT))]
        for name, text in files:
            (directory / name).write_text(text)
    with duckdb.connect() as con:
        ingest_directory(con, directory)
        found: dict[str, dict[int, str]] = {}
        for name, line, verdict in con.execute("SELECT source_file, source_line, 'stored' FROM raw_traces UNION ALL "
                                               "SELECT source_file, line_no, reason FROM quarantine").fetchall():
            found.setdefault(name, {})[line] = verdict
    return found


@pytest.mark.parametrize("number", range(len(WRONG)), ids=[f"record{n}-{why}" for n, (_, why) in enumerate(WRONG)])
@pytest.mark.parametrize("after_blank_line", [False, True])  # read_json, then the read_csv reader
def test_values_that_used_to_be_stored_wrong_are_quarantined(verdicts_by_file, number, after_blank_line):
    first = 2 if after_blank_line else 1
    found = verdicts_by_file[_wrong_file(number, after_blank_line)[0]]
    assert found[first] == found[first + 2] == "stored"
    assert found[first + 1] == WRONG[number][1]
    assert len(found) == 3


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


@pytest.mark.parametrize("number", range(len(BEYOND_BIGINT)),
                         ids=[f"{field}-{value}-{reason}" for field, value, reason in BEYOND_BIGINT])
@pytest.mark.parametrize("after_blank_line", [False, True])
def test_integers_beyond_bigint_are_quarantined_not_stored_as_null(verdicts_by_file, number, after_blank_line):
    found = verdicts_by_file[_bigint_file(number, after_blank_line)[0]]
    assert sorted(found.values()) == sorted(["stored", BEYOND_BIGINT[number][2]])
