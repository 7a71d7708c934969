"""The trust floor (issue 45): a gate on a graded metric says beside its verdict how well its judge
agrees with curators; under the floor, or with too few grades, its failure does not block and
says so, unless the setting keeps blocking; a metric curators cannot grade blocks as set."""

import duckdb
import pytest
from dagster import materialize

from rag_loop.evaluation.gates import verdict
from rag_loop.evaluation.trust import JudgeTrust, TrustSettings, apply_trust, judge_trust
from rag_loop.store.ddl import GRADE_AGREEMENT_COLUMNS
from rag_loop_dagster.assets.evaluation import regression_eval
from tests.evaluation.test_blocked_run import evaluation  # noqa: F401

FAILURE = {"metric": "Faithfulness", "blocking": True, "slice": "all", "value": "all", "n": 40,
           "problems": "pass rate 0.70 < 0.80"}


def _agreement(con, version: str, rows) -> None:
    con.execute(f"CREATE OR REPLACE TABLE judge_grade_agreement ({GRADE_AGREEMENT_COLUMNS})")
    for metric, n, kappa in rows:
        con.execute("INSERT INTO judge_grade_agreement (metric, judge_version, language, n, kappa, ci_low, ci_high) "
                    "VALUES (?, ?, 'all', ?, ?, ?, ?)", [metric, version, n, kappa, kappa - 0.1, kappa + 0.1])


def test_the_floor_decides_from_kappa_and_n_of_this_judge_version():
    con = duckdb.connect()
    _agreement(con, "v1", [("Faithfulness", 45, 0.8), ("Answer Relevancy", 45, 0.3), ("Contextual Relevancy", 12, 0.9)])
    trust = judge_trust(con, ["Faithfulness", "Answer Relevancy", "Contextual Relevancy", "Correctness [GEval]"], "v1")
    assert [t.status for t in trust.values()] == ["trusted", "not trusted", "not trusted", "not graded"]
    assert trust["Faithfulness"].words() == "judge agrees with curators: kappa 0.80 [0.70, 0.90], n=45"
    assert trust["Answer Relevancy"].words() == "judge not trusted: kappa 0.30 [0.20, 0.40], n=45, under the 0.6 floor"
    assert "12 grades, fewer than the 30" in trust["Contextual Relevancy"].words()
    other = judge_trust(con, ["Faithfulness"], "v2")["Faithfulness"]  # another judge version: no grades
    assert other.words() == "judge not trusted: 0 grades, fewer than the 30 the floor needs"


@pytest.mark.parametrize("untrusted, blocks", [("warn", False), ("block", True)])
def test_an_untrusted_judges_failure_says_so_and_blocks_only_when_asked(untrusted, blocks):
    settings = TrustSettings(untrusted=untrusted)
    low = {"Faithfulness": JudgeTrust("Faithfulness", "v1", "not trusted", 32, 0.0, 0.0, 0.0, "under the 0.6 floor")}
    (failure,) = apply_trust([FAILURE], low, settings)
    assert failure["blocking"] is blocks and "judge not trusted: kappa 0.00 [0.00, 0.00], n=32" in failure["problems"]
    assert failure["problems"].endswith(": does not block") is not blocks
    assert verdict([failure]).startswith("BLOCKED") is blocks


def test_a_trusted_judge_blocks_with_its_agreement_beside_the_verdict_and_an_ungraded_metric_as_set():
    trusted = {"Faithfulness": JudgeTrust("Faithfulness", "v1", "trusted", 45, 0.8, 0.7, 0.9),
               "Correctness [GEval]": JudgeTrust("Correctness [GEval]", "v1", "not graded", why="not graded")}
    correctness = {**FAILURE, "metric": "Correctness [GEval]"}
    faithfulness, other = apply_trust([FAILURE, correctness], trusted)
    assert faithfulness["blocking"] and faithfulness["problems"].endswith("(judge agrees with curators: kappa 0.80 "
                                                                          "[0.70, 0.90], n=45)")
    assert other["blocking"] and other["problems"] == FAILURE["problems"]  # the verdict's words as before
    assert other["judge"] == "judge agreement not measured (not graded)"


UNREACHABLE = {"metric": "Faithfulness", "min_mean": 1.5}


def _run(resources, **config):
    return materialize([regression_eval], resources=resources, raise_on_error=False, run_config={
        "ops": {"regression_eval": {"config": {"gates": [UNREACHABLE], "monitoring_only": [], **config}}}})


def test_a_gate_whose_judge_has_no_grades_does_not_block_and_blocks_again_when_asked(evaluation):  # noqa: F811
    resources, tmp_path = evaluation
    warned = _run(resources)
    assert warned.success
    checks = {c.check_name: c for c in warned.get_asset_check_evaluations()}
    assert checks["hard_gates"].passed and not checks["monitoring_gates"].passed
    assert checks["monitoring_gates"].description == (
        "monitoring gates: Faithfulness on the whole run (n=2): mean 1.00 < 1.50 (judge not trusted: 0 grades, "
        "fewer than the 30 the floor needs): does not block")
    blocked = _run(resources, untrusted_judge="block")
    assert not blocked.success
    hard = next(c for c in blocked.get_asset_check_evaluations() if c.check_name == "hard_gates")
    assert hard.description.startswith("BLOCKED by its hard gates: Faithfulness on the whole run") and \
        "judge not trusted" in hard.description
    with duckdb.connect(str(tmp_path / "eval.duckdb")) as con:  # the run records its judge's trust
        judge = con.execute("SELECT judge FROM eval_runs ORDER BY started_at DESC LIMIT 1").fetchall()[0][0]
    assert '"trust": {"Faithfulness": "judge not trusted: 0 grades' in judge
