"""Judge versus humans: figures, rows set aside with reasons, the CLI, the evaluator version."""

import json

import duckdb
import pytest
from click.testing import CliRunner

from rag_loop.cli import main as cli
from rag_loop.evaluation.calibration import calibrate, latest_calibration, read_rows
from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.evaluation.regression import EvalSettings, run_regression

ROWS = [
    {"question": "Leave?", "contexts": ["Employees get 15 days of paid leave."],
     "answer": "Employees get 15 days of paid leave.", "label_faithful": True},
    {"question": "Leave?", "contexts": ["Employees get 15 days of paid leave."],
     "answer": "Employees get 40 days of leave and a car.", "label_faithful": False},
    {"question": "Leave?", "contexts": ["Employees get 15 days of paid leave."],
     "answer": "Interns are paid weekly on Fridays.", "label": "unfaithful"},
    {"question": "Leave?", "contexts": ["Employees get 15 days of paid leave."],
     "answer": "You get 15 days of paid leave.", "human_label": "yes"},
]
BAD = [{"question": "q", "contexts": ["c"], "answer": "a"},  # no label
       {"question": "q", "contexts": ["c"], "answer": " ", "label_faithful": True},
       {"question": "q", "contexts": [], "answer": "a", "label_faithful": False},
       {"question": "q", "contexts": ["c"], "answer": "a", "label_faithful": "perhaps"}]


def write(path, rows, extra: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + extra)


def test_rows_without_label_answer_or_context_are_set_aside_with_reasons(tmp_path):
    write(tmp_path / "c.jsonl", ROWS + BAD, "{not json\n")
    rows, errors = read_rows(tmp_path / "c.jsonl")
    assert [r.faithful for r in rows] == [True, False, False, True]
    assert [e["line"] for e in errors] == [5, 6, 7, 8, 9]
    assert [e["reason"].split(" (")[0].split(":")[0] for e in errors] == [
        "no human label", "empty answer", "empty contexts", "no human label", "unreadable line"]


def test_figures_of_a_perfect_and_of_an_inverted_judge():
    labels = [True, True, False, False, False]
    perfect = calibrate([0.9, 0.8, 0.3, 0.2, 0.1], labels, threshold=0.5)
    assert perfect.roc_auc == 1.0 and perfect.kappa == 1.0
    assert (perfect.true_faithful, perfect.false_faithful, perfect.true_unfaithful,
            perfect.false_unfaithful) == (2, 0, 3, 0)
    assert perfect.precision_unfaithful == perfect.recall_unfaithful == 1.0
    strict = calibrate([0.9, 0.6, 0.3, 0.2, 0.1], labels, threshold=0.8)
    assert strict.kappa < 1.0 and strict.best_kappa == 1.0 and 0.3 < strict.best_threshold <= 0.6
    inverted = calibrate([0.1, 0.2, 0.8, 0.9, 0.7], labels, threshold=0.5)
    assert inverted.roc_auc == 0.0 and inverted.kappa < 0


def test_the_command_prints_stores_and_the_next_eval_records_it(tmp_path, small_release):  # noqa: F811
    write(tmp_path / "c.jsonl", ROWS + BAD[:1])
    db = str(tmp_path / "cal.duckdb")
    printed = CliRunner().invoke(cli, ["calibrate", str(tmp_path / "c.jsonl"), "--db", db,
                                       "--threshold", "0.5"])
    assert printed.exit_code == 0, printed.output
    assert "ROC-AUC:" in printed.output and "set aside: line 5: no human label" in printed.output
    with duckdb.connect(db) as con:
        stored = con.execute("SELECT rows, errors, threshold, roc_auc FROM judge_calibrations").fetchall()
        assert stored[0][:3] == (4, 1, 0.5) and stored[0][3] is not None
        model = OfflineJudge().describe()["model"]
        assert latest_calibration(con, model)["rows"] == 4
    goldens_dir, con = small_release
    from rag_loop.store.tables import create_tables
    create_tables(con)  # replay mode: traces not found are errored cases, fine here
    con.execute("ATTACH ? AS cal", [db])
    con.execute("CREATE TABLE judge_calibrations AS SELECT * FROM cal.judge_calibrations")
    report = run_regression(con, goldens_dir, OfflineJudge(),
                            EvalSettings(mode="replay", max_error_rate=1.0))
    judge = json.loads(con.execute("SELECT judge FROM eval_runs WHERE run_id = ?",
                                   [report.run_id]).fetchall()[0][0])
    assert judge["calibration"]["rows"] == 4 and judge["calibration"]["roc_auc"] == pytest.approx(stored[0][3])


def test_curator_agreement_with_what_they_were_shown(tmp_path):
    from rag_loop.curation.labels import store_label_files
    from rag_loop.evaluation.agreement import curator_agreement
    from tests.helpers import GOOD
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    from rag_loop.store.tables import create_tables
    create_tables(con)
    con.execute("INSERT INTO documents (doc_id, version, title, language, source_updated_at, indexed_at) "
                "VALUES ('leave', '2026', 'Leave', 'en', '2026-11-03 09:00:00+00', '2026-11-03 09:10:00+00')")
    con.execute("INSERT INTO document_chunks VALUES ('leave@2026#annual-en', 'leave', '2026', 'x')")
    for trace in ("t1", "t2", "t3"):
        con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query) "
                    "VALUES (?, '2026-11-05 10:00:00+00', 'q')", [trace])
    rows = [{**GOOD, "trace_id": "t1", "failure_type": "retrieval", "suggested_failure_type": "retrieval"},
            {**GOOD, "trace_id": "t2", "failure_type": "generation", "suggested_failure_type": "retrieval",
             "judge_score": 0.2},
            {**GOOD, "trace_id": "t3", "failure_type": "generation", "suggested_failure_type": "generation",
             "judge_score": "0.9"}]
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "l.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store_label_files(con, tmp_path / "labels")
    shown, judged = curator_agreement(con, threshold=0.5)
    assert shown.n == 3 and shown.agreement == pytest.approx(2 / 3)
    assert shown.confusion == {"generation": {"generation": 1, "retrieval": 1},
                                  "retrieval": {"retrieval": 1}}
    assert judged.n == 2 and judged.agreement == pytest.approx(0.5)
    assert con.execute("SELECT count(*) FROM judge_agreement").fetchall() == [(2,)]
