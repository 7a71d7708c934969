"""The regression eval judges as the online loop does (issue 45): with the deployment's adopted
alignment it scores with the fitted thresholds, records the aligned judge version, and the trust
floor looks up that version's agreement with curators, not the plain judge's; with curators'
examples shown to an LLM judge, likewise."""

import json

import duckdb
from dagster import materialize

from rag_loop.evaluation.alignment import ALIGNMENT_COLUMNS, judge_version, load_alignment
from rag_loop.evaluation.gates import Gate
from rag_loop.evaluation.judges.examples import FEW_SHOT_HEADER, FewShot, GradeExample
from rag_loop.evaluation.judges.llm import LlmJudge
from rag_loop.evaluation.regression import run_regression
from rag_loop.evaluation.settings import EvalSettings, LlmJudgeSettings
from rag_loop.evaluation.trust import TrustSettings
from rag_loop_dagster.assets.evaluation import regression_eval
from tests.evaluation.test_blocked_run import evaluation  # noqa: F401
from tests.evaluation.test_trust import _agreement
from tests.helpers import DEMO_APP
from tests.helpers.standin_openai import StandIn

GATE = {"metric": "Faithfulness", "min_pass_rate": 0.8}  # the demo app's answers pass it at 0.75


def _adopt(con) -> str:
    """An adopted alignment: Faithfulness at 0.9, and 1.01 on English (what the goldens are)."""
    con.execute(f"CREATE TABLE judge_alignment ({ALIGNMENT_COLUMNS})")
    for language, fitted in (("all", 0.9), ("en", 1.01)):
        con.execute("INSERT INTO judge_alignment (alignment_id, metric, language, source_version, n, "
                    "fitted_threshold, adopted, computed_at) VALUES ('a1', 'Faithfulness', ?, 'v0', 40, ?, true, "
                    "now())", [language, fitted])
    return "a1"


def test_thresholds_per_language_come_from_the_alignment_and_monitoring_stays_monitoring(evaluation):  # noqa: F811
    _, tmp_path = evaluation
    with duckdb.connect(str(tmp_path / "eval.duckdb")) as con:
        alignment = load_alignment(con, _adopt(con))
    settings = EvalSettings(thresholds={"Faithfulness": 0.75, "Answer Relevancy": 0.7,
                                        "Contextual Relevancy": None}, gates=[], alignment=alignment)
    assert settings.thresholds_for("en") == {"Faithfulness": 1.01, "Answer Relevancy": 0.7,
                                             "Contextual Relevancy": None}
    assert settings.thresholds_for("vi")["Faithfulness"] == 0.9
    assert EvalSettings(gates=[]).thresholds_for("en")["Faithfulness"] == 0.75  # no alignment: as configured


def _run(resources, **config):
    return materialize([regression_eval], resources=resources, raise_on_error=False, run_config={
        "ops": {"regression_eval": {"config": {"gates": [GATE], "monitoring_only": [], **config}}}})


def test_an_aligned_eval_uses_the_fitted_threshold_and_the_trust_of_its_own_judge_version(evaluation):  # noqa: F811
    resources, tmp_path = evaluation
    judge = resources["judge"].judge(resources["embedder"])
    with duckdb.connect(str(tmp_path / "eval.duckdb")) as con:
        alignment = load_alignment(con, _adopt(con))
        plain, aligned = judge_version(judge)[1], judge_version(judge, alignment)[1]
        _agreement(con, aligned, [("Faithfulness", 40, 0.2)])  # curators disagree with the aligned judge ...
        con.execute("INSERT INTO judge_grade_agreement (metric, judge_version, language, n, kappa, ci_low, ci_high) "
                    "VALUES ('Faithfulness', ?, 'all', 45, 0.9, 0.8, 1.0)", [plain])  # ... not the plain one
    assert plain != aligned
    warned = _run(resources, alignment="latest")
    assert warned.success  # the gate fails on the fitted threshold, and its judge is not trusted
    checks = {c.check_name: c for c in warned.get_asset_check_evaluations()}
    assert checks["hard_gates"].passed
    assert checks["monitoring_gates"].description == (
        "monitoring gates: Faithfulness on the whole run (n=2): pass rate 0.00 < 0.80 (judge not trusted: kappa "
        "0.20 [0.10, 0.30], n=40, under the 0.6 floor): does not block")
    (materialization,) = warned.asset_materializations_for_node("regression_eval")[:1]
    assert materialization.metadata["judge_version"].value == aligned
    assert materialization.metadata["alignment"].value == "a1"
    with duckdb.connect(str(tmp_path / "eval.duckdb")) as con:
        (recorded,), = con.execute("SELECT judge FROM eval_runs").fetchall()
        thresholds = con.execute("SELECT DISTINCT threshold FROM eval_results WHERE metric = 'Faithfulness'").fetchall()
    recorded = json.loads(recorded)
    assert recorded["judge_version"] == aligned and recorded["alignment"]["by_language"] == {
        "Faithfulness": {"en": 1.01}}
    assert thresholds == [(1.01,)]
    blocked = _run(resources, alignment="a1", untrusted_judge="block")
    assert not blocked.success
    hard = next(c for c in blocked.get_asset_check_evaluations() if c.check_name == "hard_gates")
    assert hard.description.startswith("BLOCKED by its hard gates: Faithfulness") and "kappa 0.20" in hard.description


def test_an_alignment_or_examples_that_are_not_stored_fail_the_run_saying_which(evaluation):  # noqa: F811
    resources, _ = evaluation
    for setting, words in (({"alignment": "nope"}, "alignment 'nope'"), ({"few_shot": "f1"}, "few-shot 'f1'")):
        result = _run(resources, **setting)
        assert not result.success
        (failure,) = result.get_step_failure_events()
        assert failure.step_failure_data.user_failure_data.description.startswith(words)


def test_an_eval_with_examples_shows_them_and_records_that_judge_version(small_release):
    goldens_dir, con = small_release
    examples = FewShot("f1", "v0", {"Answer Relevancy": (GradeExample("t9", "refund?", "No.", ("Policy.",), False),)})
    with StandIn() as server:
        plain = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5),
                         geval=[])
        shown = plain.with_few_shot(examples)
        report = run_regression(con, goldens_dir, shown, EvalSettings(
            **DEMO_APP, thresholds={"Answer Relevancy": 0.7}, gates=[Gate("Answer Relevancy", min_pass_rate=0.5)],
            trust=TrustSettings()))
    prompts = [r["body"]["messages"][0]["content"] for r in server.requests]
    assert any(p.startswith(FEW_SHOT_HEADER) and "refund?" in p for p in prompts)  # the examples reached it
    assert report.judge_version == judge_version(shown)[1] != judge_version(plain)[1]
    assert report.few_shot_id == "f1" and report.trust["Answer Relevancy"].judge_version == report.judge_version
    recorded = json.loads(con.execute("SELECT judge FROM eval_runs").fetchall()[0][0])
    assert recorded["judge_version"] == report.judge_version and recorded["few_shot"]["few_shot_id"] == "f1"
