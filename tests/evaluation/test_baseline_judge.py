"""A regression eval whose baseline was scored by another judge version compares two
instruments (issue 45): the drop gates are not evaluated against it and the report and the
verdict say so; a baseline the user names is compared, and said to be another instrument."""

import json

from rag_loop.evaluation.gates import Gate, verdict
from rag_loop.evaluation.judges.examples import FewShot, GradeExample
from rag_loop.evaluation.judges.llm import LlmJudge
from rag_loop.evaluation.regression import run_regression
from rag_loop.evaluation.settings import EvalSettings, LlmJudgeSettings
from tests.helpers import DEMO_APP
from tests.helpers.standin_openai import StandIn

DROP = Gate("Answer Relevancy", max_drop=0.1)
EXAMPLES = FewShot("f1", "v0", {"Answer Relevancy": (GradeExample("t9", "refund?", "No.", ("Policy.",), False),)})


def _settings(**overrides) -> EvalSettings:
    return EvalSettings(**DEMO_APP, **{"thresholds": {"Answer Relevancy": 0.7}, "gates": [DROP], **overrides})


def _judge(server: StandIn) -> LlmJudge:
    return LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5), geval=[])


def test_a_baseline_of_another_judge_version_is_not_compared_and_the_verdict_says_so(small_release):
    goldens_dir, con = small_release
    with StandIn() as server:
        plain = _judge(server)
        first = run_regression(con, goldens_dir, plain, _settings())
        same = run_regression(con, goldens_dir, plain, _settings())
        shown = run_regression(con, goldens_dir, plain.with_few_shot(EXAMPLES), _settings())
        named = run_regression(con, goldens_dir, plain.with_few_shot(EXAMPLES), _settings(baseline_run=first.run_id))
    # the same judge version: compared as always
    assert same.baseline_run_id == first.run_id and same.baseline_note is None
    assert same.gates[0].not_evaluated == []
    # another judge version (curators' examples shown): not compared, and said
    words = (f"baseline {same.run_id} judged by {first.judge_version}, not {shown.judge_version}, not comparable: "
             "re-run the baseline or pass baseline_run")
    assert shown.judge_version != first.judge_version
    assert shown.baseline_run_id is None and shown.baseline_note == words
    assert [u["problems"] for u in shown.gates[0].not_evaluated] == [words]
    assert verdict(shown.failures, shown.baseline_note) == f"passes its hard gates ({words})"
    stored = con.execute("SELECT baseline_run_id, judge, gates_not_evaluated FROM eval_runs WHERE run_id = ?",
                         [shown.run_id]).fetchall()[0]
    assert stored[0] is None
    assert json.loads(stored[1])["baseline"] == {"run_id": same.run_id, "compared": False, "note": words}
    assert json.loads(stored[2])[0]["problems"] == words
    # a baseline the user names is compared, and said to be another instrument
    assert named.baseline_run_id == first.run_id and named.gates[0].not_evaluated == []
    assert named.baseline_note == (f"baseline {first.run_id} judged by {first.judge_version}, not "
                                   f"{named.judge_version}: compared as baseline_run asks, two instruments")


def test_a_drop_gate_that_blocks_without_a_baseline_blocks_on_another_judge_version(small_release):
    goldens_dir, con = small_release
    gate = Gate("Answer Relevancy", max_drop=0.1, without_baseline="block")
    with StandIn() as server:
        plain = _judge(server)
        run_regression(con, goldens_dir, plain, _settings())  # not blocked: a baseline
        shown = run_regression(con, goldens_dir, plain.with_few_shot(EXAMPLES), _settings(gates=[gate]))
    assert shown.blocked
    assert verdict(shown.failures, shown.baseline_note).startswith(
        "BLOCKED by its hard gates: Answer Relevancy on the whole run: baseline ")
    assert verdict(shown.failures, shown.baseline_note).endswith(
        "not comparable: re-run the baseline or pass baseline_run (blocks)")  # said once


def test_a_run_from_before_judge_versions_were_recorded_is_not_a_comparable_baseline(small_release):
    goldens_dir, con = small_release
    with StandIn() as server:
        plain = _judge(server)
        old = run_regression(con, goldens_dir, plain, _settings())
        con.execute("UPDATE eval_runs SET judge = json_object('kind', 'openai-compatible') WHERE run_id = ?",
                    [old.run_id])
        now = run_regression(con, goldens_dir, plain, _settings())
    assert now.baseline_run_id is None
    assert now.baseline_note.startswith(f"baseline {old.run_id} judged by an unrecorded judge version, not ")
