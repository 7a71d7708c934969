"""Label storage: bulk inserts keep the row-by-row semantics; a file is read only once settled."""
import hashlib
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.curation import labels as labels_module
from rag_loop.curation.labels import store_label_files
from rag_loop.store.tables import create_tables
from tests.helpers import GOOD, write_labels

HEADER = "trace_id,decision,origin,failure_type,expected_output\n"
ROW = "t1,accept,production_failure,retrieval,25 days of paid annual leave.\n"


def _age(path, seconds: float) -> None:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))


def test_a_label_csv_still_being_written_waits_until_it_settles(db, tmp_path):
    labels = tmp_path / "labels"
    labels.mkdir()
    path = labels / "late.csv"
    path.write_text(HEADER + ROW[:-len(" paid annual leave.\n")])  # the writer is mid-row: "25 days of"
    report = store_label_files(db, labels, settle_seconds=5)
    assert (report.files, report.stored) == (0, 0)
    assert len(report.waiting) == 1 and report.waiting[0].startswith("late.csv: modified ")
    assert "settle" in report.waiting[0]
    assert db.execute("SELECT count(*) FROM label_files").fetchall() == [(0,)]
    assert db.execute("SELECT count(*) FROM curated_labels").fetchall() == [(0,)]
    path.write_text(HEADER + ROW)  # the writer finishes
    assert [w.split(":")[0] for w in store_label_files(db, labels, settle_seconds=5).waiting] == ["late.csv"]
    _age(path, 10)
    report = store_label_files(db, labels, settle_seconds=5)
    assert (report.files, report.stored, report.waiting) == (1, 1, [])
    assert db.execute("SELECT expected_output FROM curated_labels").fetchall() == [("25 days of paid annual leave.",)]
    assert store_label_files(db, labels, settle_seconds=5).files == 0  # read once


def test_an_edited_label_file_keeps_its_earlier_labels_until_the_edit_settles(db, tmp_path):
    labels = tmp_path / "labels"
    labels.mkdir()
    path = labels / "f.csv"
    path.write_text(HEADER + ROW)
    _age(path, 10)
    assert store_label_files(db, labels, settle_seconds=5).stored == 1
    path.write_text(HEADER + ROW.replace("25 days", "15 days") + "t2,reject,,,\n")
    report = store_label_files(db, labels, settle_seconds=5)
    assert report.files == 0 and [w.split(":")[0] for w in report.waiting] == ["f.csv"]
    assert db.execute("SELECT expected_output FROM curated_labels").fetchall() == [("25 days of paid annual leave.",)]
    now = datetime.now(UTC) + timedelta(seconds=6)  # `now` stands in for the clock
    assert store_label_files(db, labels, settle_seconds=5, now=now).stored == 2
    assert db.execute("SELECT trace_id, expected_output FROM curated_labels ORDER BY 1").fetchall() == [
        ("t1", "15 days of paid annual leave."), ("t2", "")]
    assert db.execute("SELECT count(*) FROM label_files WHERE path = 'f.csv'").fetchall() == [(2,)]


def test_a_label_file_modified_in_the_future_waits(db, tmp_path):
    labels = tmp_path / "labels"
    write_labels(labels, "a.jsonl", [GOOD])
    _age(labels / "a.jsonl", -60)
    report = store_label_files(db, labels, settle_seconds=5)
    assert report.files == 0 and "in the future" in report.waiting[0]
    assert store_label_files(db, labels).files == 1  # the default settle time of 0 reads any file, as before


def test_a_label_file_that_changes_while_it_is_read_waits(db, tmp_path, monkeypatch):
    labels = tmp_path / "labels"
    labels.mkdir()
    path = labels / "f.csv"
    path.write_text(HEADER + ROW[:-len(" paid annual leave.\n")])
    read_rows = labels_module.read_label_rows

    def read_then_the_writer_goes_on(p):
        rows = read_rows(p)
        with open(p, "a") as handle:
            handle.write(" paid annual leave.\n")
        return rows

    monkeypatch.setattr(labels_module, "read_label_rows", read_then_the_writer_goes_on)
    report = store_label_files(db, labels)
    assert report.files == 0 and report.waiting == ["f.csv: changed while it was read: still being written"]
    assert db.execute("SELECT count(*) FROM label_files").fetchall() == [(0,)]
    monkeypatch.setattr(labels_module, "read_label_rows", read_rows)
    assert store_label_files(db, labels).stored == 1
    assert db.execute("SELECT expected_output FROM curated_labels").fetchall() == [("25 days of paid annual leave.",)]


def test_stored_label_rows_keep_their_columns_ids_and_types(db, tmp_path):
    labels = tmp_path / "labels"
    write_labels(labels, "a.jsonl", [
        {**GOOD, "labeled_at": "2026-11-15T17:00:00+07:00", "input": " q ", "curator": "ana", "cluster_id": "en-1",
         "cluster_weight": "2.5", "priority": "P1", "suggested_failure_type": "retrieval", "judge_score": 0.25,
         "variant_trace_ids": ["t1", "t2"], "expected_sources": ["leave@2026#annual-en", "leave"]},
        {"trace_id": "t2", "decision": "reject"}, {"trace_id": "nope", "decision": "reject"}])
    moment = datetime(2026, 11, 16, 8, 30, tzinfo=UTC)
    os.utime(labels / "a.jsonl", (moment.timestamp(), moment.timestamp()))
    report = store_label_files(db, labels)
    assert (report.stored, report.rejected) == (2, 1)
    rows = db.execute("""SELECT label_id, trace_id, decision, input, expected_output, expected_sources, tags, origin,
                                failure_type, curator, labeled_at, cluster_id, cluster_weight, priority,
                                source_trace_ids, warnings, source_file, line_no, suggested_failure_type,
                                judge_score, stored_at IS NOT NULL FROM curated_labels ORDER BY line_no""").fetchall()
    label_id = hashlib.sha256(b"a.jsonl:1:t1").hexdigest()[:16]
    assert rows[0] == (label_id, "t1", "accept", "q", "15 days.", ["leave@2026#annual-en", "leave"], ["leave"],
                       "production_failure", "retrieval", "ana", datetime(2026, 11, 15, 10, tzinfo=UTC), "en-1", 2.5,
                       "P1", ["t1", "t2"], [], "a.jsonl", 1, "retrieval", 0.25, True)
    assert rows[1] == (hashlib.sha256(b"a.jsonl:2:t2").hexdigest()[:16], "t2", "reject", None, "", [], [], None,
                       None, None, moment, None, None, None, ["t2"], [], "a.jsonl", 2, None, None, True)
    types = db.execute("SELECT typeof(expected_sources), typeof(tags), typeof(source_trace_ids), typeof(warnings) "
                       "FROM curated_labels LIMIT 1").fetchall()
    assert types == [("VARCHAR[]",) * 4]
    errors = db.execute("SELECT source_file, line_no, trace_id, errors, raw, found_at IS NOT NULL "
                        "FROM label_errors").fetchall()
    assert errors == [("a.jsonl", 3, "nope", ["trace_id: unknown trace 'nope'"],
                       '{"trace_id": "nope", "decision": "reject"}', True)]
    assert db.execute("SELECT path, rows, stored, rejected FROM label_files").fetchall() == [("a.jsonl", 3, 2, 1)]


def test_rows_giving_the_same_label_id_the_later_wins(db, tmp_path, monkeypatch):
    class OneDigest:  # every row of every file gets one label id
        def __init__(self, _):
            pass

        def hexdigest(self):
            return "f" * 64

    monkeypatch.setattr(labels_module.hashlib, "sha256", OneDigest)
    labels = tmp_path / "labels"
    write_labels(labels, "a.jsonl", [GOOD, {**GOOD, "expected_output": "second"}, {**GOOD, "trace_id": "t2"}])
    report = store_label_files(db, labels)
    assert report.stored == 3  # counted as today: every valid row
    assert db.execute("SELECT trace_id, line_no FROM curated_labels").fetchall() == [("t2", 3)]
    write_labels(labels, "b.jsonl", [{**GOOD, "expected_output": "from b"}])
    store_label_files(db, labels)  # INSERT OR REPLACE across files, as before
    assert db.execute("SELECT source_file, expected_output FROM curated_labels").fetchall() == [("b.jsonl", "from b")]


def test_a_failed_label_insert_rolls_back_the_whole_file(db, tmp_path, monkeypatch):
    labels = tmp_path / "labels"
    write_labels(labels, "a.jsonl", [GOOD, {"trace_id": "nope"}])
    store_label_files(db, labels)
    write_labels(labels, "a.jsonl", [{**GOOD, "trace_id": "t2"}, {"trace_id": "nope"}, {"x": 1}])
    insert_frame = labels_module._insert_frame

    def fail_on_errors(con, schema, rows, statement):
        if schema is labels_module.ERROR_COLUMNS:
            raise duckdb.IOException("disk full")
        insert_frame(con, schema, rows, statement)

    monkeypatch.setattr(labels_module, "_insert_frame", fail_on_errors)
    with pytest.raises(duckdb.IOException):
        store_label_files(db, labels)
    assert db.execute("SELECT trace_id FROM curated_labels").fetchall() == [("t1",)]  # the earlier read, intact
    assert db.execute("SELECT count(*) FROM label_errors").fetchall() == [(1,)]
    assert db.execute("SELECT count(*) FROM label_files").fetchall() == [(1,)]
    monkeypatch.setattr(labels_module, "_insert_frame", insert_frame)
    assert store_label_files(db, labels).rejected == 2


def _fresh_database() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_tables(con)
    con.execute("INSERT INTO documents (doc_id, version, title, language, source_updated_at, indexed_at) "
                "VALUES ('leave', '2026', 'Leave', 'en', '2026-11-03 09:00:00+00', NULL)")
    con.execute("INSERT INTO document_chunks VALUES ('leave@2026#annual-en', 'leave', '2026', '15 days')")
    for trace in ("t1", "t2", "t3"):
        con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query) "
                    "VALUES (?, '2026-11-05 10:00:00+00', 'q')", [trace])
    return con


NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)
SETTLE = 5.0


@pytest.fixture(scope="module")
def examples_database():
    """One database for the examples below (a fresh one costs ~45 ms of CPU each), its label
    tables emptied for each example: what a fresh database holds."""
    con = _fresh_database()
    store_label_files(con, Path("/nonexistent"))  # creates the label tables
    yield con
    con.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["jsonl", "csv"]),
                          st.one_of(st.floats(SETTLE + 0.01, 1e6),  # settled: modified at least SETTLE s before NOW
                                    st.floats(-1e3, SETTLE - 0.01)),  # unsettled, or in the future
                          st.sampled_from(["t1", "t2", "nope"])), min_size=1, max_size=6))
def test_every_settled_label_file_is_read_once_and_no_unsettled_one_is_recorded(tmp_path_factory,
                                                                                examples_database, files):
    labels = tmp_path_factory.mktemp("labels")
    ages = {}
    for i, (suffix, age, trace) in enumerate(files):
        path = labels / f"{i}.{suffix}"
        if suffix == "csv":
            path.write_text(HEADER + ROW.replace("t1", trace))
        else:
            path.write_text(json.dumps({**GOOD, "trace_id": trace}) + "\n")
        moment = NOW.timestamp() - age
        os.utime(path, (moment, moment))
        ages[path.name] = age
    settled = sorted(name for name, age in ages.items() if age >= SETTLE)
    unsettled = sorted(set(ages) - set(settled))
    con = examples_database
    for table in ("curated_labels", "label_errors", "label_files"):
        con.execute(f"DELETE FROM {table}")

    def recorded() -> list[str]:
        return sorted(p for (p,) in con.execute("SELECT path FROM label_files").fetchall())

    for _ in range(2):  # a second call reads nothing again, and still waits for the same files
        report = store_label_files(con, labels, settle_seconds=SETTLE, now=NOW)
        assert recorded() == settled
        assert sorted(w.split(":")[0] for w in report.waiting) == unsettled
        sources = {s for (s,) in con.execute("SELECT source_file FROM curated_labels UNION ALL "
                                             "SELECT source_file FROM label_errors").fetchall()}
        assert sources == set(settled)
    later = store_label_files(con, labels, settle_seconds=SETTLE, now=NOW + timedelta(seconds=SETTLE + 1e3))
    assert later.files == len(unsettled) and later.waiting == []
    assert recorded() == sorted(ages)  # every file once
