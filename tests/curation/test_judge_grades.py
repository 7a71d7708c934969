"""Curators grade the online judge (issue 45): the grades a label carries, how they are checked and
stored (JSONL and CSV alike), and the judge's agreement with curators computed from them."""

import json
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.curation.label_rules import check_label
from rag_loop.curation.labels import store_label_files
from rag_loop.evaluation import agreement
from rag_loop.evaluation.agreement import binary_kappa, grade_agreement, judge_grades, store_grade_agreement
from tests.helpers import GOOD, KNOWN, write_labels

FAITHFUL = {"metric": "Faithfulness", "judge_version": "v1", "judge_passed": False, "judge_score": 0.2}


def _errors(grades) -> list[str]:
    return check_label({**GOOD, "judge_grades": grades}, KNOWN, {"t1"}).errors


@pytest.mark.parametrize("grades, error", [
    ([{**FAITHFUL, "grade": "disagree"}], None),
    ([{**FAITHFUL, "curator_passed": "PASS"}], None),  # a CSV's word, any case
    ('[{"metric": "Faithfulness", "judge_passed": true, "grade": "agree"}]', None),  # a CSV cell's JSON
    ([], None), ("", None), (None, None),
    ([FAITHFUL], "neither a grade"),
    ([{**FAITHFUL, "grade": "maybe"}], "judge_grades #1 grade: 'maybe' is not one of agree, disagree"),
    ([{**FAITHFUL, "grade": "agree", "curator_passed": True}], "contradicts"),
    ([{**FAITHFUL, "judge_passed": None, "grade": "agree"}], "no pass / fail verdict"),
    ([{**FAITHFUL, "curator_passed": 1}], "is not pass or fail"),  # never Python's truthiness
    ([{**FAITHFUL, "judge_passed": "yes", "grade": "agree"}], "judge_passed: 'yes' is not pass or fail"),
    ([{**FAITHFUL, "metric": ""}], "judge_grades #1 metric: missing"),
    ([{**FAITHFUL, "metric": "a\nb", "grade": "agree"}], "not a metric name"),
    ([{**FAITHFUL, "judge_score": -1, "grade": "agree"}], "judge_score"),
    ([{**FAITHFUL, "grade": "agree"}] * 2, "graded twice"),
    ([{**FAITHFUL, "grade": "agree", "metric": f"m{i}"} for i in range(21)], "at most 20"),
    ("agree", "not a JSON list"), ([["Faithfulness", "agree"]], "list of objects"), ({"a": 1}, "list of objects"),
])
def test_each_grade_rule(grades, error):
    errors = _errors(grades)
    if error is None:
        assert not errors
    else:
        assert any(error in e for e in errors), errors


def _stored(db) -> list:
    return db.execute("SELECT trace_id, judge_grades FROM curated_labels ORDER BY trace_id, line_no").fetchall()


def test_grades_are_stored_with_the_label_from_jsonl_and_csv_alike(db, tmp_path):
    labels = tmp_path / "labels"
    grades = [{**FAITHFUL, "grade": "disagree", "curator_passed": True},
              {"metric": "Answer Relevancy", "judge_version": "v1", "judge_passed": True, "grade": "agree"}]
    write_labels(labels, "ana.jsonl", [{**GOOD, "judge_grades": grades}, {**GOOD, "trace_id": "t2"}])
    cell = json.dumps(grades).replace('"', '""')
    (labels / "bo.csv").write_text(f'trace_id,decision,judge_grades\nt3,later,"{cell}"\n')
    report = store_label_files(db, labels)
    assert (report.stored, report.rejected) == (3, 0)
    stored = dict(_stored(db))
    assert stored["t2"] == []
    assert stored["t1"] == stored["t3"] == [
        {"metric": "Faithfulness", "judge_version": "v1", "judge_passed": False, "judge_score": 0.2,
         "grade": "disagree", "curator_passed": True},
        {"metric": "Answer Relevancy", "judge_version": "v1", "judge_passed": True, "judge_score": None,
         "grade": "agree", "curator_passed": None}]


grade_values = st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=True) | \
    st.sampled_from(["agree", "disagree", "pass", "FAIL", "", " ", "v1", "Faithfulness", "\n", "[", "{}"]) | \
    st.text(max_size=8)
grade = st.fixed_dictionaries({}, optional={k: grade_values for k in (
    "metric", "judge_version", "judge_passed", "judge_score", "grade", "curator_passed")})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.lists(grade, max_size=3), grade_values, st.dictionaries(st.text(max_size=4), grade_values,
                                                                                     max_size=2)),
                min_size=1, max_size=5))
def test_random_grades_never_crash_and_every_row_is_one_label_or_one_error(db, tmp_path_factory, grades):
    labels = tmp_path_factory.mktemp("labels")
    rows = [{**GOOD, "judge_grades": g} for g in grades]
    (labels / "f.jsonl").write_text("".join(json.dumps(r).replace("\n", " ") + "\n" for r in rows))
    store_label_files(db, labels)
    stored = db.execute("SELECT line_no FROM curated_labels WHERE source_file = 'f.jsonl'").fetchall()
    errors = db.execute("SELECT line_no FROM label_errors WHERE source_file = 'f.jsonl'").fetchall()
    assert sorted(n for (n,) in stored + errors) == list(range(1, len(rows) + 1))
    os.utime(labels / "f.jsonl", ns=(1, 1))  # read again: the same outcome
    store_label_files(db, labels)
    again = db.execute("SELECT count(*) FROM curated_labels WHERE source_file = 'f.jsonl'").fetchall()
    assert again == [(len(stored),)]
    store_grade_agreement(db)  # whatever was stored, agreement is computed


def test_kappa_matches_the_textbook_and_says_when_it_is_undefined():
    judge = [True] * 20 + [False] * 20
    curator = [True] * 15 + [False] * 5 + [False] * 15 + [True] * 5  # 75% agree, both 50% pass
    result = binary_kappa(judge, curator)
    assert result.n == 40 and result.agreements == 30 and result.kappa == pytest.approx(0.5)
    assert result.ci_low < 0.5 < result.ci_high and -1 <= result.ci_low and result.ci_high <= 1
    assert binary_kappa(judge, curator) == result  # seeded: the same interval every run
    assert binary_kappa([True] * 5, [True] * 5).kappa is None  # both always pass: undefined
    assert binary_kappa([], []).n == 0 and binary_kappa([True], [False]).ci_low is None


def test_a_large_sample_takes_the_analytic_interval(monkeypatch):
    rng = np.random.default_rng(1)
    judge = rng.random(400) < 0.5
    curator = np.where(rng.random(400) < 0.8, judge, ~judge)
    bootstrap = binary_kappa(judge, curator)
    monkeypatch.setattr(agreement, "BOOTSTRAP_MAX_N", 100)
    analytic = binary_kappa(judge, curator)
    assert analytic.kappa == bootstrap.kappa
    assert analytic.ci_low == pytest.approx(bootstrap.ci_low, abs=0.05)
    assert analytic.ci_high == pytest.approx(bootstrap.ci_high, abs=0.05)


def test_agreement_per_metric_version_and_language_from_the_current_labels_only(db, tmp_path):
    db.execute("UPDATE raw_traces SET language = 'vi' WHERE trace_id = 't3'")
    labels = tmp_path / "labels"
    disagree = {**FAITHFUL, "grade": "disagree"}  # the judge failed it; the curator says pass
    write_labels(labels, "a.jsonl", [
        {**GOOD, "labeled_at": "2026-11-05T10:00:00Z", "judge_grades": [disagree]},
        {**GOOD, "trace_id": "t2", "judge_grades": [{**FAITHFUL, "judge_passed": True, "grade": "agree"}]},
        {**GOOD, "trace_id": "t3", "judge_grades": [{**FAITHFUL, "grade": "agree"},
                                                      {**FAITHFUL, "metric": "Answer Relevancy", "judge_version": "v2",
                                                       "judge_passed": None, "curator_passed": True}]}])
    write_labels(labels, "b.jsonl", [  # a relabel of t1: its grade replaces the one before
        {**GOOD, "labeled_at": "2026-11-06T10:00:00Z", "judge_grades": [{**FAITHFUL, "grade": "agree"}]}])
    store_label_files(db, labels)
    grades = judge_grades(db)
    assert len(grades) == 4 and grades.set_index(["trace_id", "metric"]).loc[("t1", "Faithfulness"), "grade"] == "agree"
    table = store_grade_agreement(db).set_index(["metric", "judge_version", "language"])
    everywhere = table.loc[("Faithfulness", "v1", "all")]
    assert (everywhere["n"], everywhere["agreements"], everywhere["agreement"]) == (3, 3, 1.0)
    assert everywhere["kappa"] == pytest.approx(1.0)
    assert table.loc[("Faithfulness", "v1", "vi"), "n"] == 1 and table.loc[("Faithfulness", "v1", "en"), "n"] == 2
    own_only = table.loc[("Answer Relevancy", "v2", "all")]  # no verdict to agree with: counted apart
    assert own_only["n"] == 0 and own_only["own_verdicts"] == 1 and pd.isna(own_only["kappa"])
    assert db.execute("SELECT count(*) FROM judge_grade_agreement").fetchall() == [(len(table),)]


def test_no_grades_give_an_empty_table(db):
    assert store_grade_agreement(db).empty
    assert db.execute("SELECT count(*) FROM judge_grade_agreement").fetchall() == [(0,)]
    assert grade_agreement(judge_grades(db)).empty


def test_the_demo_curator_grades_the_judge_so_the_demo_shows_agreement(demo_releases):
    import duckdb
    root, _ = demo_releases
    with duckdb.connect(str(root / "rag.duckdb")) as con:
        version = con.execute("SELECT judge_version FROM judgment_runs ORDER BY finished_at DESC LIMIT 1").fetchall()
        table = store_grade_agreement(con).set_index(["metric", "judge_version", "language"])
    print(table.round(3).to_string())
    for metric in ("Faithfulness", "Answer Relevancy"):
        overall = table.loc[(metric, version[0][0], "all")]
        assert overall["n"] >= 30 and overall["curators"] == 1
        assert {"en", "vi"} <= set(table.loc[metric].index.get_level_values("language"))
    assert table.loc[("Answer Relevancy", version[0][0], "all"), "kappa"] > 0  # the judge sees some of it
    from rag_loop.evaluation.alignment import store_alignment
    with duckdb.connect(str(root / "rag.duckdb")) as con:
        aligned, _ = store_alignment(con, {})
    print(aligned.drop(columns=["alignment_id", "source_version"]).round(3).to_string())
    assert set(aligned["metric"]) == {"Faithfulness", "Answer Relevancy"}
    assert (aligned["current_threshold"].dropna() > 0).all()  # the threshold its verdicts were given with
