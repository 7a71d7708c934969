"""The remote judge's calls a trace and its pace under refusals (issue 45, item 4).

A passing verdict's reason is not asked of the judge (one call less per metric), a failing
one's is; a stalled attempt is given up at a deadline learnt from the run's answered attempts,
and the wait before another attempt frees its slot of the bound. Speed itself is measured in
`bench/online_eval.py --only remote`, never here."""

import asyncio
import json
import threading
import time

import httpx2
import pytest
from deepeval.test_case import LLMTestCase
from openai import APIConnectionError, APIStatusError, APITimeoutError

from rag_loop.evaluation.judges.llm import AttemptDeadline, LlmJudge, OpenAICompatibleModel, retry_wait
from rag_loop.evaluation.settings import LlmJudgeSettings
from tests.helpers.standin_openai import StandIn, instance_of

THRESHOLDS = {"Faithfulness": 0.75, "Answer Relevancy": 0.7, "Contextual Relevancy": 0.5}
REASON_SCHEMAS = {"FaithfulnessScoreReason", "AnswerRelevancyScoreReason", "ContextualRelevancyScoreReason"}


def _fails_marked(body: dict) -> str | None:
    """To a prompt that holds FAILME: verdicts "no" and texts "FAILME" (the claims extracted
    from such an answer carry it into their verdicts' prompt); as usual otherwise (all "yes")."""
    if "FAILME" not in body["messages"][0]["content"]:
        return None
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    reply = json.dumps(instance_of(schema, schema.get("$defs", {})))
    return reply.replace('"yes"', '"no"').replace('"stand-in"', '"FAILME"')


def _measure(judge: LlmJudge, case: LLMTestCase) -> dict[str, tuple[float, str]]:
    async def run() -> dict[str, tuple[float, str]]:
        metrics = judge.metrics(THRESHOLDS, geval=[])
        scores = await asyncio.gather(*(m.a_measure(case, _show_indicator=False) for m in metrics))
        await judge.end_calls()
        return {m.__name__: (score, m.reason) for m, score in zip(metrics, scores, strict=True)}
    return asyncio.run(run())


def _reasons_asked(server: StandIn) -> list[str]:
    return [r["body"]["response_format"]["json_schema"]["name"] for r in server.requests
            if r["body"].get("response_format", {}).get("json_schema", {}).get("name") in REASON_SCHEMAS]


def test_the_judge_gives_its_reason_for_failing_verdicts_only():
    with StandIn() as server:
        server.reply = _fails_marked
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5))
        passing = _measure(judge, LLMTestCase(input="How many leave days?", actual_output="15 days.",
                                              retrieval_context=["Employees get 15 days of leave."]))
        assert _reasons_asked(server) == []  # no call for a passing verdict's reason
        assert passing["Faithfulness"] == (1.0, "passed: 1.00 >= 0.75; 1 of 1 claims of the answer supported "
                                                "by the context (the judge gives its reason for failing verdicts only)")
        assert passing["Answer Relevancy"][1].startswith("passed: 1.00 >= 0.7; 1 of 1 statements of the answer")
        assert passing["Contextual Relevancy"][1].startswith("passed: 1.00 >= 0.5; 1 of 1 statements of the context")
        failing = _measure(judge, LLMTestCase(input="FAILME leave days?", actual_output="FAILME 15 days.",
                                              retrieval_context=["FAILME Employees get 15 days of leave."]))
    assert sorted(_reasons_asked(server)) == sorted(REASON_SCHEMAS)  # one reason call per failing metric
    assert {name: score for name, (score, _) in failing.items()} == {name: 0.0 for name in THRESHOLDS}
    assert all(reason == "FAILME" for _, reason in failing.values())  # the judge's own words


def test_a_metric_without_a_threshold_still_asks_for_its_reason():
    with StandIn() as server:
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5))

        async def run() -> str:
            metric = judge.metrics({"Answer Relevancy": None}, geval=[])[0]
            metric.threshold = None  # monitoring: no verdict to skip the reason on
            await metric.a_measure(LLMTestCase(input="q", actual_output="a"), _show_indicator=False)
            await judge.end_calls()
            return metric.reason
        assert asyncio.run(run()) == "stand-in"
    assert _reasons_asked(server) == ["AnswerRelevancyScoreReason"]


def _stalls_once(prompts: set[str], seconds: float):
    """A reply hook that holds the first request of each prompt in `prompts` for `seconds`."""
    seen: set[str] = set()
    lock = threading.Lock()

    def reply(body: dict) -> None:
        prompt = body["messages"][0]["content"]
        with lock:
            first = prompt in prompts and prompt not in seen
            seen.add(prompt)
        if first:
            time.sleep(seconds)
        return None
    return reply


def _model(server: StandIn, **overrides) -> OpenAICompatibleModel:
    values = {"base_url": server.base_url, "model": "m", "timeout_seconds": 5.0, "max_retries": 2,
              "max_in_flight": 1, "min_attempt_seconds": 0.3, **overrides}
    return OpenAICompatibleModel(LlmJudgeSettings(**values))


async def _warm(model: OpenAICompatibleModel, calls: int = 40) -> None:
    """Answered attempts, so that the deadline is learnt (it is the full timeout before)."""
    for i in range(calls):
        await model.a_generate(f"warm {i}")


def test_a_stalled_attempt_is_given_up_at_the_learnt_deadline_and_tried_again():
    with StandIn() as server:
        server.reply = _stalls_once({"stalls"}, seconds=6.0)
        model = _model(server)

        async def run() -> tuple[float, float, str]:
            await _warm(model)
            deadline = model.deadline.seconds()
            start = time.perf_counter()
            text, _ = await model.a_generate("stalls")
            seconds = time.perf_counter() - start
            await model.end_calls()
            return deadline, seconds, text
        deadline, seconds, text = asyncio.run(run())
    assert deadline == pytest.approx(0.3)  # 3 x p95 of fast answers is under the floor
    assert text == "{}" and model.usage.retries == 1  # the stand-in's reply without a schema
    assert [r["body"]["messages"][0]["content"] for r in server.requests].count("stalls") == 2
    assert seconds < 2.5  # ~0.3 s given up + backoff + the answer, not the 5 s timeout


def test_the_wait_before_another_attempt_frees_the_slot():
    """One slot: while the stalled call waits to try again, another call goes through."""
    with StandIn() as server:
        server.reply = _stalls_once({"stalls"}, seconds=6.0)
        model = _model(server)

        async def run() -> None:
            await _warm(model)
            stalled = asyncio.create_task(model.a_generate("stalls"))
            await asyncio.sleep(0.05)  # the stalled call holds the one slot first
            await model.a_generate("other")
            await stalled
            await model.end_calls()
        asyncio.run(run())
    asked = {r["body"]["messages"][0]["content"]: r for r in server.requests if r["body"]["messages"][0]["content"]
             in ("stalls", "other")}  # the last request of each prompt
    assert asked["other"]["answered"] < asked["stalls"]["arrived"]  # answered before the retry was sent
    assert server.max_in_flight <= 2  # the bound, and the stalled request the stand-in still sleeps on


def test_a_judge_slow_as_a_whole_is_soon_waited_for_in_full():
    deadline = AttemptDeadline(timeout=60.0, factor=3.0, floor=1.0)
    for _ in range(64):
        deadline.observe(0.2)
    assert deadline.seconds() == pytest.approx(1.0)
    for _ in range(64):  # every attempt now given up at its deadline
        deadline.observe(deadline.seconds())
    assert deadline.seconds() == 60.0
    assert AttemptDeadline(timeout=60.0, factor=None, floor=1.0).seconds() == 60.0


def _status(code: int, headers: dict[str, str] | None = None) -> APIStatusError:
    request = httpx2.Request("POST", "http://judge/v1/chat/completions")
    response = httpx2.Response(code, headers=headers or {}, request=request)
    return APIStatusError("refused", response=response, body=None)


@pytest.mark.parametrize(("exc", "wait"), [
    (_status(429, {"retry-after-ms": "20"}), 0.02), (_status(503, {"retry-after": "2"}), 2.0),
    (_status(429, {"retry-after": "120"}), None), (_status(500, {"x-should-retry": "false"}), None),
    (_status(400, {"x-should-retry": "true"}), "backoff"), (_status(400), None), (_status(404), None),
    (_status(409), "backoff"), (_status(502), "backoff"),
    (APITimeoutError(httpx2.Request("POST", "http://judge")), "backoff"),
    (APIConnectionError(request=httpx2.Request("POST", "http://judge")), "backoff"),
    (ValueError("a bug"), None)])
def test_which_refusals_are_tried_again_and_after_how_long(exc, wait):
    got = retry_wait(exc, attempt=2)
    if wait == "backoff":
        assert 1.5 <= got <= 2.0  # 0.5 s doubled twice, less up to a quarter
    else:
        assert got == (pytest.approx(wait) if wait is not None else None)


def test_online_an_aligned_threshold_decides_whether_the_reason_is_asked(tmp_path):
    """Online, a metric is built with the threshold its row is judged with (here an alignment's
    for English, above the stand-in's score of 1.0): the failing verdict gets the judge's reason."""
    from rag_loop.evaluation.alignment import load_alignment
    from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
    from tests.evaluation.test_aligned_eval import _adopt
    from tests.online.test_judgments import _traces
    from tests.online.world import build_world
    con = build_world(tmp_path, _traces(2, language="en"))
    alignment = load_alignment(con, _adopt(con))  # Faithfulness: 1.01 on English
    with StandIn() as server:
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5))
        report = judge_traces(con, judge, JudgingSettings([OnlineMetric("Faithfulness", 0.75)], alignment=alignment))
    assert report.judged == 2
    rows = con.execute("SELECT threshold, score, passed, reason FROM trace_judgments").fetchall()
    assert rows == [(1.01, 1.0, False, "stand-in")] * 2  # failing at its threshold: the judge's reason
    assert _reasons_asked(server) == ["FaithfulnessScoreReason"]  # the same prompt for both: paid once


def test_online_with_a_learnt_deadline_refusals_and_stalls_lose_nothing(tmp_path, monkeypatch):
    """Stalls given up at the learnt deadline, 429 / 5xx waited out with the slot freed: every
    judgement stored, none errored, the bound held. (The first wait after a stall, 0.5 s
    doubling, scaled down: its length is retry_wait's, tested above.)"""
    monkeypatch.setattr("rag_loop.evaluation.judges.llm.INITIAL_BACKOFF_SECONDS", 0.05)
    from rag_loop.online.judgments import REFERENCELESS, JudgingSettings, OnlineMetric, judge_traces
    from tests.online.test_judgments import _traces
    from tests.online.world import build_world
    con = build_world(tmp_path, _traces(12))
    with StandIn() as server:
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=6, timeout_seconds=3.0,
                                          max_in_flight=4, min_attempt_seconds=0.2))
        async def warm() -> None:  # the deadline learnt: stalls are given up at 0.2 s
            await _warm(judge.model)
            await judge.end_calls()
        asyncio.run(warm())
        server.flaky, server.stall_seconds = 0.3, 1.0
        report = judge_traces(con, judge, JudgingSettings([OnlineMetric(m, 0.5) for m in REFERENCELESS]))
    assert {0, 429, 500, 503} <= set(server.refused) and judge.model.deadline.seconds() < 3.0
    assert report.errored == 0 and report.judged == 36 and report.unfinished == 0
    assert judge.usage.retries >= len(server.refused)  # every refusal tried again
    assert server.max_in_flight <= 4 + server.refused.count(0)  # the bound (+ stalls the stand-in still sleeps on)


def test_the_resource_passes_its_attempt_deadline_settings_to_the_judge():
    from rag_loop_dagster.assets.resources import OpenAICompatibleJudgeResource
    judge = OpenAICompatibleJudgeResource(base_url="http://127.0.0.1:9/v1", attempt_deadline_factor=None,
                                          min_attempt_seconds=2.5).judge(None)
    assert (judge.settings.attempt_deadline_factor, judge.settings.min_attempt_seconds) == (None, 2.5)
