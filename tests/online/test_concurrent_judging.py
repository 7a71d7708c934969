"""A remote judge's cases and metrics run at once: replies out of order, bursts of 429, a
timeout in the middle of a case leave the same stored verdicts as judging one call at a time.

The endpoint is an in-process mock of the OpenAI chat API whose verdicts depend on the prompt
(a hash), so a reply given to the wrong case, metric or round would change a stored score."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random

import httpx2
import pytest
from openai import AsyncOpenAI

from rag_loop.evaluation.judges.llm import LlmJudge
from rag_loop.evaluation.settings import LlmJudgeSettings
from rag_loop.online.judgments import JudgingSettings, judge_traces, open_cases
from tests.helpers.standin_openai import instance_of
from tests.online.test_judgments import REFERENCELESS
from tests.online.world import CHUNK, build_world

VERDICTS = ("yes", "no")


def _reply(body: dict) -> dict:
    """A reply fitting the schema asked for, its verdicts drawn from the prompt's hash."""
    prompt = body["messages"][0]["content"]
    schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
    value = instance_of(schema, schema.get("$defs", {}))
    for name in ("verdicts",):
        if isinstance(value.get(name), list):
            value[name] = [{**v, "verdict": VERDICTS[hashlib.sha256(f"{prompt}{i}".encode()).digest()[0] % 2]}
                           for i, v in enumerate(value[name] * 3)]
    return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": json.dumps(value)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class Endpoint:
    """Out-of-order replies (random delays), 429 bursts and timeouts, with calls in flight counted."""

    def __init__(self, seed: int, hostile: bool):
        self.random, self.hostile = random.Random(seed), hostile
        self.calls = self.in_flight = self.max_in_flight = 0
        self.refused: list[str] = []
        self.attempts: dict[str, int] = {}

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        body = json.loads(request.content)
        try:
            if self.hostile:  # faults drawn per prompt, so whatever the order every run meets them
                await asyncio.sleep(self.random.random() * 0.02)  # replies come back out of order
                prompt = body["messages"][0]["content"]
                draw = hashlib.sha256(prompt.encode()).digest()[1] % 4
                attempt = self.attempts[prompt] = self.attempts.get(prompt, 0) + 1
                if draw == 0 and attempt <= 3:  # a burst of 429 on this prompt
                    self.refused.append("429")
                    return httpx2.Response(429, headers={"retry-after-ms": "1"},
                                           json={"error": {"message": "slow down"}})
                if draw == 1 and attempt == 1:  # a timeout in the middle of a case
                    self.refused.append("timeout")
                    raise httpx2.ReadTimeout("stalled", request=request)
            return httpx2.Response(200, json=_reply(body))
        finally:
            self.in_flight -= 1


def _judge(endpoint: Endpoint, in_flight: int) -> LlmJudge:
    judge = LlmJudge(LlmJudgeSettings(base_url="http://judge.test/v1", model="mock", timeout_seconds=1.0,
                                      max_retries=4, max_in_flight=in_flight))
    # as the judge's own clients: no retry inside the client, the judge's `_post` retries
    judge.model.make_async_clients = lambda: [AsyncOpenAI(
        base_url="http://judge.test/v1", api_key="x", max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(endpoint)))]
    return judge


@pytest.fixture(autouse=True)
def _short_backoff(monkeypatch):
    """The wait before another attempt after a timeout, 0.5 s doubling, scaled down: what is
    proven here is the order of replies, not their pace (retry_wait: test_remote_pace)."""
    monkeypatch.setattr("rag_loop.evaluation.judges.llm.INITIAL_BACKOFF_SECONDS", 0.02)


def _traces() -> list[dict]:
    other = {**CHUNK, "chunk_id": "own#1", "text": "Part-time staff get leave pro rata."}
    return [{"trace_id": f"t{i:02d}", "original_query": f"How many leave days? ({i % 4})",
             "answer": f"You get {10 + i % 5} days.", "chunks": [CHUNK, other] if i % 2 else [CHUNK]}
            for i in range(10)]


def _verdicts(con) -> list[tuple]:
    return con.execute("SELECT trace_id, metric, status, round(score, 9), passed, reason FROM trace_judgments "
                       "ORDER BY trace_id, metric").fetchall()


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_judging_under_refusals_stores_what_one_call_at_a_time_stores(tmp_path, seed):
    (tmp_path / "one").mkdir()
    (tmp_path / "many").mkdir()
    one = build_world(tmp_path / "one", _traces())
    alone = Endpoint(seed, hostile=False)
    first = judge_traces(one, _judge(alone, 1), JudgingSettings(REFERENCELESS, concurrency=1))
    many = build_world(tmp_path / "many", _traces())
    hostile = Endpoint(seed, hostile=True)
    judge = _judge(hostile, 8)
    second = judge_traces(many, judge, JudgingSettings(REFERENCELESS, concurrency=1))
    assert open_cases(JudgingSettings(REFERENCELESS, concurrency=1), judge) == 8  # the call bound sets it
    assert alone.max_in_flight == 1 and 1 < hostile.max_in_flight <= 8  # concurrent, within the bound
    assert {"429", "timeout"} <= set(hostile.refused)
    assert (first.judged, first.errored, second.errored, second.unfinished) == (30, 0, 0, 0)
    assert _verdicts(one) == _verdicts(many)
    assert len({v[3] for v in _verdicts(one)}) > 2  # the verdicts differ by prompt: a mix-up would show


def test_replies_are_stored_in_batches_and_a_shared_prompt_is_asked_once(tmp_path):
    con = build_world(tmp_path, _traces())
    endpoint = Endpoint(0, hostile=False)
    judge = _judge(endpoint, 16)
    report = judge_traces(con, judge, JudgingSettings(REFERENCELESS))
    cached = con.execute("SELECT count(*) FROM judge_cache").fetchall()[0][0]
    assert report.judged == 30 and cached == judge.usage.calls == endpoint.calls
    assert judge.usage.cache_hits > 0  # e.g. CHUNK's truths, asked by every case at once, paid once
