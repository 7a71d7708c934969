"""`rag-loop few-shot`: curators' grades measured as an LLM judge's examples, stored for
trace_judgments' `few_shot` setting (the measurement itself: test_few_shot.py)."""

import duckdb
from click.testing import CliRunner

from rag_loop import cli
from rag_loop.evaluation.few_shot import load_few_shot
from tests.evaluation.test_few_shot import METRIC, _follower, _grades
from tests.helpers.standin_openai import StandIn


def test_the_command_measures_stores_and_names_what_to_adopt(tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_LOOP_TEST_KEY", "k")
    monkeypatch.setattr("rag_loop.evaluation.few_shot.graded_cases", lambda con: _grades())
    db = str(tmp_path / "db.duckdb")
    with StandIn() as server:
        server.reply = _follower
        result = CliRunner().invoke(cli.main, ["few-shot", "--base-url", server.base_url, "--model", "m",
                                               "--api-key-env", "RAG_LOOP_TEST_KEY",
                                               "--threshold", f"{METRIC}=0.7", "--db", db])
    assert result.exit_code == 0, result.output
    assert f"{METRIC}: adopted: held-out kappa 0.00 -> 1.00" in result.output
    with duckdb.connect(db) as con:
        stored = load_few_shot(con, "latest")
    assert stored is not None and len(stored.examples[METRIC]) == 4
    assert f"few_shot_id {stored.few_shot_id} stored" in result.output


def test_no_grades_is_an_error_that_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr("rag_loop.evaluation.few_shot.graded_cases", lambda con: _grades().iloc[:0])
    result = CliRunner().invoke(cli.main, ["few-shot", "--db", str(tmp_path / "db.duckdb")])
    assert result.exit_code == 1 and "no graded verdicts yet" in result.output


def test_a_threshold_must_be_a_number():
    result = CliRunner().invoke(cli.main, ["few-shot", "--threshold", "Faithfulness=high"])
    assert result.exit_code == 2 and "METRIC=NUMBER" in result.output
