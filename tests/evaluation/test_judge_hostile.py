"""Garbage judge replies: never cached, never passed; an untrusted run is never a baseline."""

import pytest
from deepeval.metrics.faithfulness.schema import Claims, Truths
from deepeval.metrics.g_eval.schema import ReasonScore, Steps
from pydantic import ValidationError

from rag_loop.evaluation.judges.llm import JudgeReplyError, LlmJudge, OpenAICompatibleModel, checked_reply
from rag_loop.evaluation.regression import EvalSettings, run_regression
from rag_loop.evaluation.runner import EvalError
from rag_loop.evaluation.settings import LlmJudgeSettings
from tests.helpers import DEMO_APP
from tests.helpers.standin_openai import StandIn


@pytest.mark.parametrize("reply, schema, message", [
    ('{"claims": []}', Claims, "no claims"), ('{"score": 1000, "reason": "x"}', ReasonScore, "outside"),
    ('{"score": -1, "reason": "x"}', ReasonScore, "outside")])
def test_empty_or_out_of_range_judgements_are_refused(reply, schema, message):
    with pytest.raises(JudgeReplyError, match=message):
        checked_reply(schema.model_validate_json(reply))
    assert checked_reply(Truths(truths=[])).truths == []  # no context: no truths is an answer
    assert checked_reply(ReasonScore(score=7, reason="ok")).score == 7


def test_only_validated_replies_are_cached():
    with StandIn() as server:
        judge = OpenAICompatibleModel(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0,
                                                       timeout_seconds=5))
        judge.load_model()
        for bad, error in (("I think the claims are fine.", ValidationError),
                           ('{"claims": []}', JudgeReplyError)):
            server.content = bad
            with pytest.raises(error):
                judge.generate("extract claims", schema=Claims)
        server.content = None  # the judge recovers: it is asked again, not served from cache
        claims, _ = judge.generate("extract claims", schema=Claims)
        again, _ = judge.generate("extract claims", schema=Claims)
    assert claims.claims and again.claims == claims.claims
    assert len(server.requests) == 3 and len(judge.cache) == 1 and judge.usage.cache_hits == 1


def test_a_run_that_cannot_be_trusted_is_blocked_and_never_a_baseline(small_release):  # noqa: F811
    goldens_dir, con = small_release
    with StandIn() as server:
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0,
                                          timeout_seconds=5))
        good = run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP))
        server.content = "no JSON today"
        uncached = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m2", max_retries=0,
                                             timeout_seconds=5))
        with pytest.raises(EvalError, match="cannot be trusted"):
            run_regression(con, goldens_dir, uncached, EvalSettings(**DEMO_APP))
        server.content = None
        after = run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP))
    untrusted = con.execute("SELECT run_id, blocked, gate_failures FROM eval_runs "
                            "WHERE run_id NOT IN (?, ?)", [good.run_id, after.run_id]).fetchall()
    assert len(untrusted) == 1 and untrusted[0][1] is True and "errored results" in untrusted[0][2]
    assert after.baseline_run_id == good.run_id


def test_empty_steps_are_refused_and_empty_truths_never_cached():
    with pytest.raises(JudgeReplyError, match="no steps"):
        checked_reply(Steps(steps=[]))
    with StandIn() as server:
        model = OpenAICompatibleModel(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0,
                                                       timeout_seconds=5))
        model.load_model()
        server.content = '{"truths": []}'
        truths, _ = model.generate("extract truths", schema=Truths)
        assert truths.truths == [] and model.cache == {}  # an answer, but never one to reuse
        server.content = '{"steps": []}'
        with pytest.raises(JudgeReplyError):
            model.generate("make steps", schema=Steps)
    assert model.cache == {} and len(server.requests) == 2


def test_a_run_cut_off_by_its_deadline_keeps_every_reply_it_paid_for(small_release):
    goldens_dir, con = small_release
    with StandIn() as server:
        server.mode = "slow"
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5))
        with pytest.raises(EvalError):  # mostly errored: it cannot be trusted
            run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP, concurrency=1, deadline_seconds=0.6))
        answered = len(server.requests)
    cached = con.execute("SELECT count(*) FROM judge_cache").fetchall()[0][0]
    assert 0 < cached <= answered  # persisted as they came, not at the end
    blocked, failures = con.execute("SELECT blocked, gate_failures FROM eval_runs").fetchall()[0]
    assert blocked and "run deadline" in failures
    cut = con.execute("SELECT count(*) FROM eval_results WHERE error LIKE 'deadline:%'").fetchall()[0][0]
    assert cut > 0
