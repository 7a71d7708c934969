"""A bad label row is an error row, never a crash; every row ends as one label or one error."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.curation.labels import store_label_files
from tests.helpers import GOOD


def outcome(con, name: str) -> tuple[list, list]:
    labels = con.execute("SELECT line_no, decision, expected_output FROM curated_labels "
                         "WHERE source_file = ? ORDER BY line_no", [name]).fetchall()
    errors = con.execute("SELECT line_no, errors FROM label_errors WHERE source_file = ? "
                         "ORDER BY line_no", [name]).fetchall()
    return labels, errors


@pytest.mark.parametrize("change, error", [
    ({"input": {"q": 1}}, "input: must be text"), ({"input": ["a"]}, "input: must be text"),
    ({"cluster_weight": [1]}, "cluster_weight"), ({"cluster_weight": "heavy"}, "cluster_weight"),
    ({"expected_output": ["15", "days"]}, "expected_output: must be text"),
    ({"expected_output": 15}, "expected_output: must be text"),
    ({"expected_output": True}, "expected_output: must be text"),
    ({"labeled_at": 1763200000}, "labeled_at"), ({"labeled_at": "9999-12-31"}, "labeled_at"),
    ({"curator": ["ana"]}, "curator: must be text")])
def test_wrongly_typed_fields_are_error_rows(db, tmp_path, change, error):  # noqa: F811
    labels = tmp_path / "labels"
    labels.mkdir()
    rows = [{**GOOD, **change}, {**GOOD, "trace_id": "t2"}]
    (labels / "f.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store_label_files(db, labels)
    stored, errors = outcome(db, "f.jsonl")
    assert [line for line, *_ in stored] == [2]
    assert len(errors) == 1 and errors[0][0] == 1 and any(error in e for e in errors[0][1])


def test_an_edited_file_replaces_what_it_said(db, tmp_path):  # noqa: F811
    labels = tmp_path / "labels"
    labels.mkdir()
    path = labels / "f.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    store_label_files(db, labels)
    for _ in range(3):  # the curator mistypes, re-saves twice
        path.write_text(json.dumps({**GOOD, "decision": "acept"}) + "\n" + " " * _)
        store_label_files(db, labels)
    assert outcome(db, "f.jsonl")[0] == []
    assert len(outcome(db, "f.jsonl")[1]) == 1  # not one error row per re-read
    assert db.execute("SELECT count(*) FROM current_labels").fetchall() == [(0,)]


def test_csv_and_encodings(db, tmp_path):  # noqa: F811
    labels = tmp_path / "labels"
    labels.mkdir()
    header = "trace_id,decision,expected_output,origin,failure_type\n"
    (labels / "bracket.csv").write_text(
        header + "t1,accept,[leave@2026#annual-en] 15 days,production_failure,retrieval\n")
    (labels / "cp1252.csv").write_bytes((header + "t2,accept,15 jours de congé,manual,none\n")
                                        .encode("cp1252"))
    (labels / "utf16.jsonl").write_bytes(json.dumps(GOOD).encode("utf-16"))
    (labels / "mixed.jsonl").write_bytes(json.dumps({**GOOD, "trace_id": "t3"}).encode() + b"\n"
                                         + b'{"trace_id": "t2", "expected_output": "\xff"}\n')
    store_label_files(db, labels)
    assert outcome(db, "bracket.csv")[0] == [(2, "accept", "[leave@2026#annual-en] 15 days")]
    assert outcome(db, "cp1252.csv")[0] == [] and len(outcome(db, "cp1252.csv")[1]) == 1
    assert outcome(db, "utf16.jsonl")[0] == [] and len(outcome(db, "utf16.jsonl")[1]) == 1
    stored, errors = outcome(db, "mixed.jsonl")
    assert [s[0] for s in stored] == [1] and errors[0][0] == 2 and "not UTF-8" in errors[0][1][0]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)
FIELDS = ("trace_id", "decision", "expected_output", "expected_sources", "tags", "origin",
          "failure_type", "labeled_at", "input", "curator", "cluster_weight", "variant_trace_ids")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.fixed_dictionaries({}, optional={k: json_values for k in FIELDS}).map(lambda d: {**GOOD, **d}),
    st.binary(max_size=20)), min_size=1, max_size=6))
def test_every_row_ends_as_one_label_or_one_error(db, tmp_path_factory, rows):  # noqa: F811
    labels = tmp_path_factory.mktemp("labels")
    body = b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()).replace(b"\n", b" ")
                    + b"\n" for r in rows)
    (labels / "f.jsonl").write_bytes(body)
    store_label_files(db, labels)
    stored, errors = outcome(db, "f.jsonl")
    lines = [n for n, raw in enumerate(body.split(b"\n"), start=1) if raw.strip()]
    assert sorted([s[0] for s in stored] + [e[0] for e in errors]) == lines
    os.utime(labels / "f.jsonl", ns=(1, 1))  # read again: same outcome, nothing doubled
    store_label_files(db, labels)
    assert outcome(db, "f.jsonl") == (stored, errors)
