"""Curator labels: each validation rule, label files, relabels, CSV, the labeling command."""
import json
from datetime import UTC, datetime, timedelta, timezone

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.cli import main as cli
from rag_loop.curation.label_rules import check_label
from rag_loop.curation.labels import store_label_files
from rag_loop.curation.queue_files import export_queue, read_queue
from tests.helpers import GOOD, KNOWN, write_labels


@pytest.mark.parametrize("change, error", [
    ({"trace_id": ""}, "trace_id: missing"),
    ({"trace_id": "nope"}, "unknown trace"),
    ({"decision": "maybe"}, "decision"),
    ({"expected_output": " "}, "expected_output: required"),
    ({"origin": "prod"}, "origin"),
    ({"origin": None}, "origin"),
    ({"failure_type": "vibes"}, "failure_type"),
    ({"expected_sources": ["payroll"]}, "unknown document"),
    ({"expected_sources": ["leave@2019"]}, "no version"),
    ({"expected_sources": ["leave@2026#nope-en"]}, "unknown chunk"),
    ({"expected_sources": "leave, leave@2026"}, None),  # comma-separated text is a list
    ({"expected_sources": [1, 2]}, "list of strings"),
    ({"tags": ["x" * 41]}, "short tag"),
    ({"labeled_at": "yesterday-ish"}, "labeled_at"),
])
def test_each_validation_rule(change, error):
    checked = check_label({**GOOD, **change}, KNOWN, {"t1"})
    if error is None:
        assert not checked.errors and checked.values["expected_sources"] == ["leave", "leave@2026"]
    else:
        assert any(error in e for e in checked.errors), checked.errors


def test_reject_and_skip_need_no_expectation_and_old_versions_only_warn():
    assert not check_label({"trace_id": "t1", "decision": "reject"}, KNOWN, {"t1"}).errors
    checked = check_label({**GOOD, "expected_sources": ["leave@2025"]}, KNOWN, {"t1"})
    assert not checked.errors and "not the newest" in checked.warnings[0]


def test_valid_rows_of_a_file_land_and_invalid_ones_are_kept_with_errors(db, tmp_path):
    labels = tmp_path / "labels"
    write_labels(labels, "a.jsonl", [GOOD, {**GOOD, "trace_id": "t2", "origin": "?"}, {"x": 1}])
    (labels / "a.jsonl").write_text((labels / "a.jsonl").read_text() + "not json\n")
    report = store_label_files(db, labels)
    assert (report.stored, report.rejected) == (1, 3)
    errors = db.execute("SELECT line_no, errors FROM label_errors ORDER BY 1").fetchall()
    assert [e[0] for e in errors] == [2, 3, 4] and "invalid JSON" in errors[2][1][0]
    assert store_label_files(db, labels).files == 0  # read once


def test_a_relabel_supersedes_and_both_labels_are_kept(db, tmp_path):
    labels = tmp_path / "labels"
    write_labels(labels, "a.jsonl", [{**GOOD, "labeled_at": "2026-11-15T10:00:00Z"}])
    write_labels(labels, "b.jsonl", [{**GOOD, "expected_output": "Fifteen days.",
                                       "labeled_at": "2026-11-16T10:00:00Z"}])
    store_label_files(db, labels)
    assert db.execute("SELECT count(*) FROM curated_labels").fetchall() == [(2,)]
    assert db.execute("SELECT expected_output FROM current_labels").fetchall() == [("Fifteen days.",)]


def test_csv_labels_are_read_like_jsonl(db, tmp_path):
    export_queue([{**GOOD, "trace_id": "t2"}], tmp_path / "labels", "from-a-spreadsheet")
    (tmp_path / "labels" / "from-a-spreadsheet.jsonl").unlink()
    assert store_label_files(db, tmp_path / "labels").stored == 1


def test_labeling_command_walks_the_queue_through_its_prompts(db, tmp_path):
    db.close()
    queue = [{"trace_id": t, "batch": "b1", "priority": "P1", "cluster_id": "en-0001",
              "cluster_label": "leave", "cluster_size": 3, "cluster_weight": 3.0, "input": f"q {t}",
              "actual_output": "12 days", "language": "en", "signals": ["thumbs_down"],
              "retrieval_context": [{"chunk_id": "leave@2026#annual-en", "text": "15 days"}],
              "suggested_failure_type": "generation", "suggestion_reason": "r",
              "suggested_origin": "production_failure"} for t in ("t1", "t2", "t3")]
    queue_file, _ = export_queue(queue, tmp_path / "queue", "b1")
    answers = "\n".join([
        "a", "", "15 days.", "leave@1999", "", "leave, annual", "", "",  # empty output re-asked, bad source re-asked
        "r", "", "the same question as t1",  # a reject asks its reason, and re-asks an empty one
        "q"]) + "\n"
    result = CliRunner().invoke(cli, ["label", "--queue", str(queue_file), "--labels-dir",
                                      str(tmp_path / "labels"), "--curator", "ana",
                                      "--db", str(tmp_path / "db.duckdb")], input=answers)
    assert result.exit_code == 0, result.output
    assert result.output.count("Expected output:") == 2 and "leave has no version '1999'" in result.output
    rows = [json.loads(line) for line in (tmp_path / "labels" / "ana-b1.jsonl").read_text().splitlines()]
    assert [(r["trace_id"], r["decision"]) for r in rows] == [("t1", "accept"), ("t2", "reject")]
    assert rows[1]["reject_reason"] == "the same question as t1"
    assert rows[0]["expected_sources"] == ["leave@2026#annual-en"]  # the pre-filled suggestion
    assert rows[0]["tags"] == ["leave", "annual"] and rows[0]["failure_type"] == "generation"
    again = CliRunner().invoke(cli, ["label", "--queue", str(queue_file), "--labels-dir",
                                     str(tmp_path / "labels"), "--curator", "ana",
                                     "--db", str(tmp_path / "db.duckdb")], input="l\n")
    assert "2 already labeled" in again.output and "Query:   q t3" in again.output
    later = CliRunner().invoke(cli, ["label", "--queue", str(queue_file), "--labels-dir",
                                     str(tmp_path / "labels"), "--curator", "ana",
                                     "--db", str(tmp_path / "db.duckdb")], input="q\n")
    assert "Query:   q t3" in later.output  # "later" comes back in the next session
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    assert store_label_files(con, tmp_path / "labels").stored == 3
    assert con.execute("SELECT trace_id, decision, reject_reason FROM current_labels ORDER BY 1").fetchall() == [
        ("t1", "accept", None), ("t2", "reject", "the same question as t1"), ("t3", "later", None)]


def test_enums_are_read_whatever_their_case_and_skip_is_the_old_word_for_later():
    checked = check_label({**GOOD, "origin": "Production_Failure", "failure_type": "GENERATION",
                           "decision": "Accept"}, KNOWN, {"t1"})
    assert not checked.errors and (checked.values["origin"], checked.values["failure_type"]) == (
        "production_failure", "generation")
    assert check_label({"trace_id": "t1", "decision": "skip"}, KNOWN, {"t1"}).values["decision"] == "later"


def test_the_csv_export_opens_in_a_spreadsheet_with_vietnamese_intact(tmp_path):
    _, csv_file = export_queue([{**GOOD, "input": "Nhân viên được nghỉ phép bao nhiêu ngày?"}], tmp_path, "b")
    raw = csv_file.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and "nghỉ phép".encode() in raw  # UTF-8 with a BOM
    assert read_queue(csv_file)[0]["input"] == "Nhân viên được nghỉ phép bao nhiêu ngày?"


@pytest.mark.parametrize("text", ["now", "today", "Nov 5 2026", "5/11/2026", "2026/11/05", "yesterday"])
def test_labeled_at_is_iso_8601_only(text):
    checked = check_label({**GOOD, "labeled_at": text}, KNOWN, {"t1"})
    assert any(e.startswith("labeled_at:") for e in checked.errors), checked.errors


@settings(max_examples=80)
@given(st.datetimes(min_value=datetime(2000, 1, 2), max_value=datetime(2026, 11, 30)),
       st.sampled_from([None, UTC, timezone(timedelta(hours=7)), timezone(timedelta(hours=-5))]),
       st.sampled_from(["T", " "]))
def test_every_iso_8601_time_is_read_as_the_same_instant(moment, zone, separator):
    written = moment.replace(tzinfo=zone)
    checked = check_label({**GOOD, "labeled_at": written.isoformat(separator)}, KNOWN, {"t1"})
    assert not checked.errors, checked.errors
    assert checked.values["labeled_at"] == (written if zone else written.replace(tzinfo=UTC))


def test_the_terminal_labeller_starts_after_a_cut_line_and_names_only_a_label_file(db, tmp_path):
    """A label file cut mid-line (a full disk, a kill) costs that line only: the next label from
    `rag-loop label` is written whole on a line of its own; a curator name is a file name part."""
    db.close()
    queue = [{"trace_id": t, "batch": "b1", "priority": "P3", "cluster_id": "en-0001", "cluster_label": "leave",
              "cluster_size": 2, "cluster_weight": 2.0, "input": f"q {t}", "actual_output": "15 days",
              "language": "en", "signals": [], "retrieval_context": [], "suggested_failure_type": "none",
              "suggested_origin": "production_sample"} for t in ("t1", "t2")]
    queue_file, _ = export_queue(queue, tmp_path / "queue", "b1")
    labels = tmp_path / "labels"
    labels.mkdir()
    (labels / "ana-b1.jsonl").write_text('{"trace_id": "t1", "decision": "acc')  # cut, no line break
    args = ["label", "--queue", str(queue_file), "--labels-dir", str(labels), "--db", str(tmp_path / "db.duckdb")]
    result = CliRunner().invoke(cli, [*args, "--curator", "ana"], input="r\n\nnot a question\nq\n")
    assert result.exit_code == 0, result.output
    lines = (labels / "ana-b1.jsonl").read_text().splitlines()
    assert lines[0] == '{"trace_id": "t1", "decision": "acc' and json.loads(lines[1])["decision"] == "reject"
    refused = CliRunner().invoke(cli, [*args, "--curator", "../evil"], input="q\n")
    assert refused.exit_code == 2 and not (tmp_path / "evil-b1.jsonl").exists()
