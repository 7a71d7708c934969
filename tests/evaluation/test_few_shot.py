"""Few-shot examples for an LLM judge from curators' grades: shown from one side of a split by
trace, measured on the other side only, adopted as a new judge version.

The stand-in judge follows the examples mechanically (a question like a failed example's
fails); that shows the examples reach the verdict prompts and how the gain is measured, not
that a real model follows them."""

import json

import duckdb
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.curation.labels import store_label_files
from rag_loop.evaluation.alignment import judge_version
from rag_loop.evaluation.few_shot import (
    FewShotSettings,
    choose_examples,
    graded_cases,
    load_few_shot,
    measure_few_shot,
    split_traces,
    store_few_shot,
)
from rag_loop.evaluation.judges.examples import FEW_SHOT_HEADER, FewShot
from rag_loop.evaluation.judges.llm import LlmJudge
from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.evaluation.settings import LlmJudgeSettings
from tests.helpers import GOOD, write_labels
from tests.helpers.standin_openai import StandIn, instance_of
from tests.online.world import CHUNK, TEXT, build_world

METRIC = "Answer Relevancy"


def _grades(n: int = 40) -> pd.DataFrame:
    """Curators fail the answers to refund questions (the stand-in passes everything)."""
    rows = []
    for i in range(n):
        refund = i % 3 == 0
        rows.append({"trace_id": f"t{i:02d}", "metric": METRIC, "judge_version": "v1", "language": "en",
                     "human_passed": not refund, "query": f"{'refund' if refund else 'leave'} question q{i:02d}",
                     "answer": "Please see the policy.", "context": ("The policy.",)})
    return pd.DataFrame(rows)


def _follower(body: dict) -> str | None:
    """Verdicts "no" on a refund question when an example shows a refund question failed."""
    prompt = body["messages"][0]["content"]
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    value = instance_of(schema, schema.get("$defs", {}))
    if not prompt.startswith(FEW_SHOT_HEADER) or not isinstance(value.get("verdicts"), list):
        return None
    block, _, asked = prompt.partition("\n\n")  # the examples, then DeepEval's prompt
    if "refund" in asked and any("refund" in e and e.rstrip().endswith("verdict: fail")
                                 for e in block.split("Example ")[1:]):
        value["verdicts"] = [{**v, "verdict": "no"} for v in value["verdicts"]]
    return json.dumps(value)


def _make(server):
    return lambda few_shot: LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0,
                                                      timeout_seconds=5, max_in_flight=16), few_shot=few_shot)


def test_examples_come_from_the_pool_and_are_measured_on_held_out_grades_only(tmp_path):
    grades = _grades()
    settings = FewShotSettings(per_metric=4, held_out_share=0.5, min_held_out=10)
    with StandIn() as server:
        server.reply = _follower
        table, few_shot = measure_few_shot(grades, _make(server), {METRIC: 0.7}, settings)
    (row,) = table.to_dict("records")
    shown = set(row["example_traces"])
    asked = [p.partition("\n\n")[2] for r in server.requests
             if (p := r["body"]["messages"][0]["content"]).startswith(FEW_SHOT_HEADER)]
    assert 10 <= row["held_out"] <= len(grades) - len(shown) and len(shown) == 4 and row["errored"] == 0
    # what is measured never includes an example's trace (every example is from the pool)
    assert asked and not any(f"q{t[1:]}" in a for a in asked for t in shown)
    assert row["kappa_before"] == 0.0 and row["kappa_after"] == 1.0  # the stand-in follows them
    assert row["adopted"] and row["gain_low"] > 0 and few_shot.examples[METRIC]
    assert {e.trace_id for e in few_shot.examples[METRIC]} == shown
    assert {e.passed for e in few_shot.examples[METRIC]} == {True, False}

    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    store_few_shot(con, table, few_shot)
    assert load_few_shot(con, "latest") == load_few_shot(con, few_shot.few_shot_id) == few_shot
    plain = _make(server)(None)
    assert judge_version(plain) != judge_version(plain.with_few_shot(few_shot))  # a new version: the protocol applies
    assert judge_version(plain) == judge_version(_make(server)(FewShot("none", "v1", {})))
    with pytest.raises(ValueError, match="needs an LLM judge"):  # the offline judge learns thresholds instead
        OfflineJudge().with_few_shot(few_shot)


def test_examples_that_do_not_help_are_not_adopted():
    grades = _grades()
    with StandIn() as server:  # a judge that ignores its examples: no gain
        table, few_shot = measure_few_shot(grades, _make(server), {METRIC: 0.7},
                                           FewShotSettings(held_out_share=0.5, min_held_out=10))
    (row,) = table.to_dict("records")
    assert not row["adopted"] and row["gain"] == 0.0 and few_shot.examples == {}
    assert "no gain" in row["why"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.booleans()), min_size=1, max_size=60,
                unique_by=lambda t: t[0]),
       st.floats(0.0, 1.0), st.integers(0, 5), st.integers(0, 3))
def test_examples_are_drawn_from_the_pool_and_never_from_held_out_traces(graded, share, per_metric, seed):
    grades = pd.DataFrame([{"trace_id": t, "human_passed": p, "query": "q", "answer": "a", "context": ()}
                           for t, p in graded])
    pool, held = split_traces(list(grades["trace_id"]), share, seed)
    assert pool.isdisjoint(held) and pool | held == set(grades["trace_id"])
    shown = choose_examples(grades[grades["trace_id"].isin(pool)], per_metric, seed)
    assert {e.trace_id for e in shown} <= pool and len(shown) == min(per_metric, len(pool))
    # fails and passes alternate (fails first) while both remain: as balanced as the pool allows
    in_pool = grades[grades["trace_id"].isin(pool)]["human_passed"].astype(bool)
    fails, passes, k = int((~in_pool).sum()), int(in_pool.sum()), len(shown)
    assert [e.passed for e in shown].count(False) == min(fails, max(-(-k // 2), k - passes))


def test_graded_cases_carry_what_the_metric_looks_at(tmp_path):
    con = build_world(tmp_path, [{"trace_id": "t1", "original_query": "How many leave days?",
                                  "answer": "You get 15 days.", "chunks": [CHUNK]}])
    grade = {"metric": METRIC, "judge_version": "v1", "judge_passed": True, "judge_score": 0.9,
             "grade": "disagree"}
    write_labels(tmp_path / "labels", "a.jsonl", [{**GOOD, "trace_id": "t1", "judge_grades": [grade]}])
    assert store_label_files(con, tmp_path / "labels").stored == 1
    (case,) = graded_cases(con).to_dict("records")
    assert (case["trace_id"], case["metric"], case["human_passed"]) == ("t1", METRIC, False)
    assert (case["query"], case["answer"]) == ("How many leave days?", "You get 15 days.")
    assert case["context"] == (TEXT,)  # the knowledge base's text of the chunk the trace names
