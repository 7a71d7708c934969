"""Label files as they are found after a full disk or a killed writer (issue 43): a cut line costs
that line only, in the workspace and in `curated_labels`; a cut CSV row is never stored shorter;
and both pick the same current label for a trace."""

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.curation.labels import CUT_ROW, read_label_rows, store_label_files
from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.workspace.store import Workspace
from tests.curation.test_label_storage import _fresh_database

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TRACES = ("t1", "t2", "t3", "t4")


def _curation(folder):
    """A curation folder whose queue export (batch "b") holds TRACES; no label yet."""
    rows = [{"trace_id": t, "batch": "b", "priority": "P1", "language": "en", "input": f"question {t}",
             "cluster_id": "en-0001", "cluster_label": "leave", "cluster_size": 4, "signals": []} for t in TRACES]
    export_for_workspace(rows, {}, folder / "queue", "b")
    return folder


@pytest.fixture(scope="module")
def database():
    """One database for the module (built in ~0.2 s): raw_traces t1..t4, see `_emptied`."""
    con = _fresh_database()  # raw_traces t1..t3
    con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query) "
                "VALUES ('t4', '2026-11-05 10:00:00+00', 'q')")
    store_label_files(con, Path("/nonexistent"))  # creates the label tables
    yield con
    con.close()


def _emptied(con):
    """The database with no label stored yet."""
    for table in ("curated_labels", "label_errors", "label_files"):
        con.execute(f"DELETE FROM {table}")
    return con


def _stored(con) -> dict[str, str]:
    return dict(con.execute("SELECT trace_id, curator FROM current_labels").fetchall())


def _line(trace_id: str, curator: str) -> str:
    return json.dumps({"trace_id": trace_id, "batch": "b", "decision": "reject", "reject_reason": "duplicate",
                       "curator": curator, "labeled_at": "2026-11-05T10:00:00+00:00"}) + "\n"


@FAST
@given(cut=st.floats(0.0, 1.0, exclude_max=True))
def test_a_label_after_a_cut_line_is_kept_and_the_cut_line_costs_itself_only(tmp_path_factory, database, cut):
    folder = _curation(tmp_path_factory.mktemp("curation"))
    whole, last = _line("t1", "ana") + _line("t2", "ana"), _line("t3", "ana")
    partial = last[:int(cut * (len(last) - 1))]  # the writer stopped inside t3's line (never after its "}")
    labels = folder / "labels"
    labels.mkdir()
    (labels / "ana-b.jsonl").write_text(whole + partial)
    workspace = Workspace(folder)
    assert set(workspace.decisions()) == {"t1", "t2"}  # the cut line hides nothing else
    saved = workspace.save_label("ana", "t4", {"decision": "later"})
    assert not saved.errors
    assert set(workspace.decisions()) == {"t1", "t2", "t4"}  # the next label, appended to that file
    con = _emptied(database)
    report = store_label_files(con, labels)
    assert set(_stored(con)) == {"t1", "t2", "t4"}
    assert [e["line"] for e in report.errors] == ([3] if partial.strip() else [])  # only the cut line


def test_a_label_after_a_whole_line_without_its_line_break_is_kept_with_it(tmp_path, database):
    folder = _curation(tmp_path)
    labels = folder / "labels"
    labels.mkdir()
    (labels / "ana-b.jsonl").write_text(_line("t1", "ana").rstrip("\n"))  # a JSON object is whole without it
    Workspace(folder).save_label("ana", "t2", {"decision": "later"})
    assert (labels / "ana-b.jsonl").read_text().count("\n") == 2
    con = _emptied(database)
    assert store_label_files(con, labels).errors == [] and set(_stored(con)) == {"t1", "t2"}


CSV_HEADER = "trace_id,decision,origin,failure_type,expected_output,curator\n"
CSV_ROWS = ["t1,accept,production_failure,retrieval,25 days of paid annual leave.,ana\n",
            't2,accept,production_failure,retrieval,"15 days, not 12;\nsee the handbook",ana\n',
            't3,reject,,,,"ben"\n',
            "t4,accept,manual,none,Ten.,ana\n"]
EXPECTED = {"t1": "25 days of paid annual leave.", "t2": "15 days, not 12;\nsee the handbook", "t4": "Ten."}


@FAST
@given(cut=st.integers(len(CSV_HEADER), len(CSV_HEADER + "".join(CSV_ROWS))))
def test_a_cut_csv_row_is_never_stored_shorter_even_without_a_settle_time(tmp_path_factory, database, cut):
    folder = _curation(tmp_path_factory.mktemp("curation"))
    labels = folder / "labels"
    labels.mkdir()
    text = CSV_HEADER + "".join(CSV_ROWS)
    (labels / "sheet.csv").write_bytes(text[:cut].encode())
    whole, ends, end = set(), {len(CSV_HEADER)}, len(CSV_HEADER)
    for row in CSV_ROWS:
        end += len(row)
        ends.add(end)
        whole |= {row.split(",", 1)[0]} if end <= cut else set()
    con = _emptied(database)
    report = store_label_files(con, labels, settle_seconds=0)  # as the workspace's release runs it
    stored = dict(con.execute("SELECT trace_id, coalesce(expected_output, '') FROM current_labels").fetchall())
    assert set(stored) == whole
    assert all(stored[t] == EXPECTED.get(t, "") for t in stored)  # never a prefix of what was written
    assert len(report.errors) == (0 if cut in ends else 1)  # the cut row, as one error
    assert set(Workspace(folder).decisions()) == whole  # the workspace reads the same rows


def test_csv_rows_with_broken_cells_are_errors_of_their_own_lines(tmp_path):
    path = tmp_path / "sheet.csv"
    path.write_text(CSV_HEADER + CSV_ROWS[0] + "t2,accept,too,few\n" + '"t3"x,reject,,,,ben\n' + CSV_ROWS[3]
                    + "t1,later,,,,ana")
    rows = read_label_rows(path)
    assert [(line, row.get("trace_id")) for line, row in rows] == [(2, "t1"), (3, None), (4, None), (5, "t4"),
                                                                   (6, None)]
    assert "4 cells where the header has 6" in rows[1][1]["_unparsable"]
    assert "invalid CSV" in rows[2][1]["_unparsable"] and rows[4][1]["_unparsable"] == CUT_ROW


MOMENTS = [None, "", "2026-11-05T10:00:00+00:00", "2026-11-05T12:00:00+02:00", "2026-11-05T10:00:00",
           "2026-11-05 09:59:59.999999+00:00", "2026-11-05T05:00:00-05:00", "2026-11-06T00:00:00+00:00",
           "yesterday"]
FILE_TIMES = {"a.jsonl": datetime(2026, 11, 5, 10, tzinfo=UTC), "b.jsonl": datetime(2026, 11, 4, tzinfo=UTC),
              "sub/c.jsonl": datetime(2026, 11, 7, tzinfo=UTC)}


def _label(number: int, trace_id: str, decision: str, moment: str | None) -> dict:
    row = {"trace_id": trace_id, "decision": decision, "curator": f"c{number}"}
    row |= {"expected_output": "Fifteen days.", "origin": "manual", "failure_type": "none"} if decision == "accept" \
        else {"reject_reason": "duplicate"} if decision == "reject" else {}
    return row | ({"labeled_at": moment} if moment is not None else {})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(sorted(FILE_TIMES)), st.sampled_from(["t1", "t2"]),
                          st.sampled_from(["accept", "reject", "later"]), st.sampled_from(MOMENTS)),
                min_size=1, max_size=10))
def test_the_workspace_and_curated_labels_pick_the_same_current_label(tmp_path_factory, database, labels):
    """Offsets naming one instant, a naive time (UTC), no time (the file's), an invalid one (the
    row is refused by both), ties broken by the later file, then line."""
    folder = _curation(tmp_path_factory.mktemp("curation"))
    files: dict[str, list[dict]] = {}
    for number, (name, trace_id, decision, moment) in enumerate(labels):
        files.setdefault(name, []).append(_label(number, trace_id, decision, moment))
    for name, rows in files.items():
        path = folder / "labels" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (FILE_TIMES[name].timestamp(),) * 2)
    con = _emptied(database)
    store_label_files(con, folder / "labels")
    stored = dict(con.execute("SELECT trace_id, curator FROM current_labels").fetchall())
    shown = {t: d.curator for t, d in Workspace(folder).decisions().items()}
    assert shown == stored


@pytest.mark.parametrize("first_moment, second_moment, current", [
    ("2026-11-05T12:00:00+02:00", "2026-11-05T10:00:00+00:00", "c1"),  # one instant: the later line
    (None, "2026-11-05T10:00:00+00:00", "c0"),  # no time: the file's (the 6th), after 10:00 on the 5th
])
def test_one_instant_written_two_ways_is_a_tie_and_no_time_is_the_files(tmp_path, first_moment, second_moment,
                                                                         current):
    folder = _curation(tmp_path)
    path = folder / "labels" / "a.jsonl"
    path.parent.mkdir(parents=True)
    rows = [_label(0, "t1", "later", first_moment), _label(1, "t1", "reject", second_moment)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(path, (datetime(2026, 11, 6, tzinfo=UTC).timestamp(),) * 2)
    assert Workspace(folder).decisions()["t1"].curator == current
