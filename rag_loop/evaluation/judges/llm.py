"""The LLM judge: DeepEval's own metrics on an OpenAI-compatible endpoint.

Its model is a `DeepEvalBaseLLM` over any OpenAI-compatible chat endpoint (OpenAI,
Azure, Ollama, vLLM, llama.cpp server). Every call is cached by (model, schema, prompt) in
`judge_cache`, so a rerun costs nothing; tokens and cost are counted per run. A call that
fails or times out raises, so DeepEval marks the metric errored, never passed.

Paid replies are written to `judge_cache` in batches (every `CACHE_FLUSH_EVERY` replies or
`CACHE_FLUSH_SECONDS`, and when the run closes): one INSERT per reply on the event loop
(~8 ms each) held every call in flight back, and cost more than half of a 200 ms judge's
run. A run killed between two batches pays again for at most those seconds of replies.

A call's CPU is mostly the HTTP client's (~1.6 ms of a 2.2 ms call on this kind of machine,
measured with `bench/online_eval.py` against an out-of-process stand-in). Two parts of it
grow with the bound on calls in flight or do work the judge does not need, and are avoided:
- httpcore's pool probes every pooled connection's socket each time a request enters or
  leaves it, so one pool of 64 connections costs ~0.4 ms a call. Calls go through one client
  per `CONNECTIONS_PER_CLIENT` slots of the bound instead: a call holds a slot, and its client
  never has more calls than connections.
- The reply is read as bytes and the two fields used are taken from its JSON, instead of
  building a typed `ChatCompletion` (~0.15 ms). Status errors are still the OpenAI client's,
  and retries follow its rules (below).

Under refusals the pace is that of the calls, not of their waits. The judge retries a call
itself, with the OpenAI client's rules (429, 408, 409, 5xx, timeouts, dropped connections;
Retry-After honoured, else exponential backoff with jitter), so that a slot is held only while
a request is on the wire: the wait between two attempts frees it. An attempt is given up after
`AttemptDeadline` (three times the 95th percentile of the run's answered attempts, at least 1 s)
rather than the client's full timeout, and the last attempt waits the full timeout: a stalled
call costs ~1 s of a slot, not the timeout plus the backoff.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import random
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import duckdb
import pandas as pd
from deepeval.metrics import (
    AnswerRelevancyMetric,
    BaseMetric,
    ContextualPrecisionMetric,
    ContextualRecallMetric,
    ContextualRelevancyMetric,
    FaithfulnessMetric,
    GEval,
)
from deepeval.models.base_model import DeepEvalBaseLLM
from deepeval.models.utils import EvaluationCost
from deepeval.test_case import SingleTurnParams
from pydantic import BaseModel

from rag_loop.evaluation.judges.base import Judge, JudgeUsage, charge
from rag_loop.evaluation.judges.examples import VERDICT_PROMPTS, FewShot
from rag_loop.evaluation.settings import DEFAULT_GEVAL, METRIC_NAMES, OFFLINE_THRESHOLDS, LlmJudgeSettings
from rag_loop.store.ddl import JUDGE_CACHE_DDL


class OpenAICompatibleModel(DeepEvalBaseLLM):
    """DeepEval model over an OpenAI-compatible endpoint, with a response cache."""

    def __init__(self, settings: LlmJudgeSettings, cache: Mapping[str, tuple[str, int, int]] | None = None):
        self.settings = settings
        self.cache: dict[str, tuple[str, int, int]] = dict(cache or {})
        self.new_entries: dict[str, tuple[str, int, int]] = {}
        # where paid replies are stored, a batch at a time (set by `LlmJudge.open`)
        self.on_store: Callable[[dict[str, tuple[str, int, int]]], None] | None = None
        self._stored_at = time.perf_counter()
        # prompts being asked now: a case asking the same (the same context's truths, a shared
        # reason) waits for that reply, a cache hit, instead of paying for it twice
        self._asking: dict[str, asyncio.Event] = {}
        self.usage = JudgeUsage()
        # per event loop (each run has its own, and a pooled connection belongs to one): the
        # free slots of the bound on calls in flight and the asynchronous clients
        self._calls: tuple[asyncio.AbstractEventLoop, asyncio.Queue[int], list[Any]] | None = None
        self.deadline = AttemptDeadline(settings.timeout_seconds, settings.attempt_deadline_factor,
                                        settings.min_attempt_seconds)
        super().__init__(settings.model)

    def _options(self) -> dict[str, Any]:
        key = os.environ.get(self.settings.api_key_env) or "not-needed"
        return {"base_url": self.settings.base_url, "api_key": key,
                "timeout": self.settings.timeout_seconds, "max_retries": self.settings.max_retries}

    def load_model(self):
        """The client of DeepEval's synchronous calls, made once per judge."""
        from openai import OpenAI
        self.client = OpenAI(**self._options())
        return self.client

    def make_async_clients(self) -> list[Any]:
        """One asynchronous client per `CONNECTIONS_PER_CLIENT` slots of the bound on calls in
        flight, each pool no larger than its share of the slots (made once per run's loop)."""
        import httpx2
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient
        bound = max(1, self.settings.max_in_flight)
        clients = -(-bound // CONNECTIONS_PER_CLIENT)
        per_client = -(-bound // clients)
        options = {**self._options(), "max_retries": 0}  # retried by `_post`, which frees the slot between attempts
        return [AsyncOpenAI(**options, http_client=DefaultAsyncHttpxClient(
            verify=_ssl_context(), limits=httpx2.Limits(max_connections=per_client,
                                                        max_keepalive_connections=per_client)))
            for _ in range(clients)]

    def get_model_name(self) -> str:
        return self.settings.model

    def _key(self, prompt: str, schema: type[BaseModel] | None) -> str:
        text = f"{self.settings.model}\n{schema.__name__ if schema else ''}\n{prompt}"
        return hashlib.sha256(text.encode()).hexdigest()

    def _request(self, prompt: str, schema: type[BaseModel] | None) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.settings.model, "temperature": 0,
                                   "messages": [{"role": "user", "content": prompt}]}
        if schema is not None:
            request["response_format"] = _response_format(schema)
        return request

    def _finish(self, key: str, text: str, input_tokens: int, output_tokens: int,
                schema: type[BaseModel] | None, cached: bool):
        result = checked_reply(schema.model_validate_json(_json_part(text))) if schema else text
        if cached:
            self.usage.cache_hits += 1
            cost = EvaluationCost(0.0, 0, 0)
        else:
            self.usage.calls += 1
            self.usage.input_tokens += input_tokens
            self.usage.output_tokens += output_tokens
            value = (input_tokens * self.settings.input_cost_per_million
                     + output_tokens * self.settings.output_cost_per_million) / 1e6
            self.usage.cost_usd += value
            charge(value)
            if not any(getattr(result, name, None) == [] for name in _NEVER_CACHED_EMPTY):
                self.cache[key] = self.new_entries[key] = (text, input_tokens, output_tokens)
                self.flush_replies()  # persisted in batches: a killed run keeps what it paid but seconds
            cost = EvaluationCost(value, input_tokens, output_tokens)
        return result, cost

    def generate(self, prompt: str, schema: type[BaseModel] | None = None):
        key = self._key(prompt, schema)
        if key in self.cache:
            return self._finish(key, *self.cache[key], schema, cached=True)
        response = self.client.chat.completions.create(**self._request(prompt, schema))
        usage = response.usage
        return self._finish(key, response.choices[0].message.content or "",
                            getattr(usage, "prompt_tokens", 0) or 0,
                            getattr(usage, "completion_tokens", 0) or 0, schema, cached=False)

    async def a_generate(self, prompt: str, schema: type[BaseModel] | None = None):
        key = self._key(prompt, schema)
        asked = self._asking.get(key)
        if asked is not None:  # the same prompt asked by another case right now: its reply, once
            await asked.wait()
        if key in self.cache:
            return self._finish(key, *self.cache[key], schema, cached=True)
        asked = self._asking[key] = asyncio.Event()
        try:
            return await self._ask(key, prompt, schema)
        finally:  # answered, failed (the waiters ask themselves) or cancelled
            asked.set()
            if self._asking.get(key) is asked:
                del self._asking[key]

    async def _ask(self, key: str, prompt: str, schema: type[BaseModel] | None):
        retries = self.settings.max_retries
        body = await asyncio.wait_for(  # a bound on the whole call, whatever its attempts do
            self._post(self._request(prompt, schema)),
            timeout=self.settings.timeout_seconds * (1 + retries) + MAX_RETRY_AFTER_SECONDS * retries + 1)
        text, input_tokens, output_tokens = completion_parts(body)
        return self._finish(key, text, input_tokens, output_tokens, schema, cached=False)

    async def _post(self, request: dict[str, Any]) -> bytes:
        """The reply's body, after up to `max_retries` more attempts: each holds a slot of the
        bound while on the wire and is given up at `deadline` (the last at the full timeout);
        the wait before the next attempt frees the slot. The client's own POST: the body goes
        as it is, plain JSON already (`chat.completions.create` first walks it against its
        typed parameters, ~1 ms of the event loop a call)."""
        retries = self.settings.max_retries
        slots, clients = self._in_flight()
        for attempt in range(retries + 1):
            last = attempt == retries
            seconds = self.settings.timeout_seconds if last else self.deadline.seconds()
            slot = await slots.get()
            start = time.perf_counter()
            try:
                body = await clients[slot % len(clients)].post(
                    "/chat/completions", body=request, cast_to=bytes, options={"timeout": seconds})
            except Exception as exc:  # noqa: BLE001 - `retry_wait` tells which are worth another attempt
                wait = retry_wait(exc, attempt)
                if is_timeout(exc):
                    self.deadline.observe(seconds)
                if wait is None or last:
                    raise
                self.usage.retries += 1
            else:
                self.deadline.observe(time.perf_counter() - start)
                return body
            finally:
                slots.put_nowait(slot)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def flush_replies(self, force: bool = False) -> None:
        """Hand the paid replies not yet stored to `on_store`, in one batch, when there are
        `CACHE_FLUSH_EVERY` of them, `CACHE_FLUSH_SECONDS` have passed, or `force`."""
        if self.on_store is None or not self.new_entries:
            return
        if force or len(self.new_entries) >= CACHE_FLUSH_EVERY \
                or time.perf_counter() - self._stored_at >= CACHE_FLUSH_SECONDS:
            entries, self.new_entries = self.new_entries, {}
            self.on_store(entries)
            self._stored_at = time.perf_counter()

    def _in_flight(self) -> tuple[asyncio.Queue[int], list[Any]]:
        """The bound on calls at once as free slots, and the clients a slot picks from, made
        anew for each event loop (each run has its own loop; an earlier loop's pooled
        connections cannot be used, nor closed, from another)."""
        loop = asyncio.get_running_loop()
        if self._calls is None or self._calls[0] is not loop:
            slots: asyncio.Queue[int] = asyncio.Queue()
            for slot in range(max(1, self.settings.max_in_flight)):
                slots.put_nowait(slot)
            self._calls = (loop, slots, self.make_async_clients())
        return self._calls[1], self._calls[2]

    async def end_calls(self) -> None:
        """Close this loop's clients (and their connections) before the loop ends."""
        calls, self._calls = self._calls, None
        if calls is not None and calls[0] is asyncio.get_running_loop():
            for client in calls[2]:
                await client.close()


def completion_parts(body: bytes) -> tuple[str, int, int]:
    """(content, prompt tokens, completion tokens) of a chat completion's JSON body; a body
    that is not one raises `JudgeReplyError` (the metric errors, nothing is cached)."""
    try:
        reply = json.loads(body)
        content = reply["choices"][0]["message"].get("content") or ""
        usage = reply.get("usage") or {}
        tokens = (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise JudgeReplyError(f"the reply is not a chat completion: {body[:200]!r}") from exc
    if not isinstance(content, str):
        raise JudgeReplyError(f"the reply's content is not text: {content!r}"[:300])
    return content, *tokens


MAX_BACKOFF_SECONDS = 8.0  # the OpenAI client's longest wait between retries
INITIAL_BACKOFF_SECONDS = 0.5  # ... and its first
MAX_RETRY_AFTER_SECONDS = 60.0  # a longer Retry-After is not waited for (the OpenAI client's rule)


def is_timeout(exc: BaseException) -> bool:
    from openai import APITimeoutError
    return isinstance(exc, APITimeoutError)


def retry_wait(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before another attempt after `exc` (the `attempt`-th, from 0), or None if
    none is worth it: the OpenAI client's rules, applied here so that the wait frees the slot.
    A refusal that says whether to retry (x-should-retry) or when (retry-after-ms, Retry-After
    up to 60 s) is obeyed; 408, 409, 429 and 5xx, timeouts and dropped connections wait 0.5 s
    doubling per attempt (at most 8 s), less up to a quarter at random."""
    from openai import APIConnectionError, APIStatusError
    if isinstance(exc, APIStatusError):
        headers = exc.response.headers
        after = _retry_after(headers)
        if after is not None and after > MAX_RETRY_AFTER_SECONDS:
            return None
        said = headers.get("x-should-retry")
        if said == "false" or (said != "true" and exc.status_code not in (408, 409, 429)
                               and exc.status_code < 500):
            return None
        if after is not None and after > 0:
            return after
    elif not isinstance(exc, APIConnectionError):  # a bad request, a bug: not retried
        return None
    return min(INITIAL_BACKOFF_SECONDS * 2.0 ** attempt, MAX_BACKOFF_SECONDS) * (1 - 0.25 * random.random())


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The server's Retry-After in seconds (retry-after-ms, then Retry-After as seconds or a date)."""
    from email.utils import mktime_tz, parsedate_tz
    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(header)
        if value is not None:
            try:
                delay = float(value) / divisor
            except ValueError:
                continue
            return delay if math.isfinite(delay) else None
    date = parsedate_tz(headers.get("retry-after") or "")
    return None if date is None else float(mktime_tz(date) - time.time())


class AttemptDeadline:
    """How long one attempt of a call may take before it is given up and tried again: `factor`
    times the 95th percentile of the recent answered attempts, at least `floor`, at most the
    client's timeout (which it is until `warmup` attempts were answered, or with no factor).

    An attempt given up counts as one that took its deadline: when more than 1 in 20 are, the
    percentile reaches the deadline and the next is `factor` times longer, so an endpoint that
    slows down as a whole is soon waited for in full again, not retried into the ground."""

    def __init__(self, timeout: float, factor: float | None, floor: float, window: int = 256,
                 warmup: int = 32, every: int = 16):
        self.timeout, self.factor, self.floor, self.warmup, self.every = timeout, factor, floor, warmup, every
        self.latencies: deque[float] = deque(maxlen=window)
        self._seconds, self._since = timeout, 0

    def seconds(self) -> float:
        return self._seconds

    def observe(self, seconds: float) -> None:
        """An attempt answered after `seconds`, or given up at its deadline of `seconds`."""
        self.latencies.append(seconds)
        self._since += 1
        if self.factor is None or len(self.latencies) < self.warmup or self._since < self.every:
            return
        self._since = 0
        ordered = sorted(self.latencies)
        p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
        self._seconds = min(self.timeout, max(self.floor, self.factor * p95))


CONNECTIONS_PER_CLIENT = 8  # a client's pool: each call probes every pooled connection
CACHE_FLUSH_EVERY = 256  # paid replies stored per batch at most ...
CACHE_FLUSH_SECONDS = 2.0  # ... and at least this often


@cache
def _ssl_context() -> ssl.SSLContext:
    """The TLS settings every client shares: each client would build its own (~50-200 ms, more
    than a run's first calls), and a run makes its clients anew."""
    import httpx2
    return httpx2.create_ssl_context()


@cache
def _response_format(schema: type[BaseModel]) -> dict[str, Any]:
    """The JSON-schema response format of a reply schema, built once per schema (pydantic's
    `model_json_schema` cost ~1.5 ms a call)."""
    return {"type": "json_schema", "json_schema": {"name": schema.__name__,
                                                   "schema": schema.model_json_schema()}}


class JudgeReplyError(ValueError):
    """A reply that parses but judges nothing, or out of range: the result is errored."""


_JUDGEMENT_LISTS = ("claims", "statements", "verdicts", "steps")
# a context may hold no truths: an empty list is an answer, but not one to reuse (a degraded
# judge says it too), so it is never cached
_NEVER_CACHED_EMPTY = ("truths",)
GEVAL_SCORE_RANGE = (0, 10)  # DeepEval's GEval asks for an integer score in 0..10


def checked_reply(reply: BaseModel) -> BaseModel:
    """Refuse empty judgements (no claims or verdicts: DeepEval would score 1.0) and scores
    outside the range the prompt asked for (a GEval 1000 would be stored as 100)."""
    for name in _JUDGEMENT_LISTS:
        if getattr(reply, name, None) == []:
            raise JudgeReplyError(f"the judge returned no {name}")
    score = getattr(reply, "score", None)
    low, high = GEVAL_SCORE_RANGE
    if isinstance(score, (int, float)) and not low <= score <= high:
        raise JudgeReplyError(f"score {score} is outside {low}..{high}")
    return reply


def _json_part(text: str) -> str:
    """The JSON object in a reply, tolerating code fences and prose around it."""
    start, end = text.find("{"), text.rfind("}")
    return text[start:end + 1] if start >= 0 and end > start else text


def load_judge_cache(con: duckdb.DuckDBPyConnection, model: str) -> dict[str, tuple[str, int, int]]:
    con.execute(JUDGE_CACHE_DDL)
    rows = con.execute("SELECT key, response, input_tokens, output_tokens FROM judge_cache "
                       "WHERE model = ?", [model]).fetchall()
    return {k: (r, i, o) for k, r, i, o in rows}


def store_judge_replies(con: duckdb.DuckDBPyConnection, model: str,
                        entries: Mapping[str, tuple[str, int, int]]) -> None:
    """Validated replies into `judge_cache`, in one statement."""
    con.execute(JUDGE_CACHE_DDL)
    if not entries:
        return
    frame = pd.DataFrame([(k, model, *v) for k, v in entries.items()],
                         columns=["key", "model", "response", "input_tokens", "output_tokens"])
    con.register("_judge_replies", frame)
    try:
        con.execute("INSERT OR IGNORE INTO judge_cache BY NAME SELECT * FROM _judge_replies")
    finally:
        con.unregister("_judge_replies")


def save_judge_cache(con: duckdb.DuckDBPyConnection, judge: OpenAICompatibleModel) -> None:
    store_judge_replies(con, judge.settings.model, judge.new_entries)
    judge.new_entries.clear()


NATIVE_METRICS = {"Faithfulness": FaithfulnessMetric, "Answer Relevancy": AnswerRelevancyMetric,
                  "Contextual Recall": ContextualRecallMetric,
                  "Contextual Precision": ContextualPrecisionMetric,
                  "Contextual Relevancy": ContextualRelevancyMetric}


# what a passing verdict's reason says instead of a call: its verdicts counted (the judge is
# asked why only when a verdict fails, the one a curator reads; a pass's reason rarely is)
_PASSING_VERDICTS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "Faithfulness": ("verdicts", ("yes", "borderline"), "claims of the answer supported by the context"),
    "Answer Relevancy": ("verdicts", ("yes", "borderline"), "statements of the answer relevant to the question"),
    "Contextual Relevancy": ("verdicts_list", ("yes",), "statements of the context relevant to the question"),
    "Contextual Recall": ("verdicts", ("yes",), "sentences of the expected output found in the context"),
    "Contextual Precision": ("verdicts", ("yes",), "retrieved contexts useful for the expected output")}


def passing_reason(metric: BaseMetric) -> str:
    """A passing verdict's reason without a call: the score against the threshold and the
    verdicts that passed, counted as DeepEval scores them (e.g. "passed: 1.00 >= 0.75; 4 of 4
    claims of the answer supported by the context")."""
    attribute, passing, what = _PASSING_VERDICTS.get(metric.__name__, ("verdicts", ("yes",), "verdicts"))
    if getattr(metric, "penalize_ambiguous_claims", False):
        passing = ("yes",)
    verdicts = list(getattr(metric, attribute, None) or [])
    if attribute == "verdicts_list":  # one list of verdicts per context (Contextual Relevancy)
        verdicts = [v for group in verdicts for v in group.verdicts]
    counted = sum(str(getattr(v.verdict, "value", v.verdict)).lower() in passing for v in verdicts)
    return (f"passed: {metric.score:.2f} >= {metric.threshold:g}; {counted} of {len(verdicts)} {what} "
            "(the judge gives its reason for failing verdicts only)")


def _passes(metric: BaseMetric) -> bool:
    threshold, score = getattr(metric, "threshold", None), getattr(metric, "score", None)
    return threshold is not None and score is not None and score >= threshold


@cache
def judged(metric_class: type[BaseMetric]) -> type[BaseMetric]:
    """`metric_class` as this judge runs it: its verdict prompts start with the curators'
    examples (`few_shot_block`, if any), and its reason is asked of the judge only for a
    failing verdict (a passing one gets `passing_reason`, no call: one call less per metric
    and trace). The same name, so DeepEval finds its templates."""
    def _get_prompt(self, method, **kwargs):
        prompt = super(subclass, self)._get_prompt(method, **kwargs)
        block = getattr(self, "few_shot_block", "")
        return block + prompt if block and method in VERDICT_PROMPTS and isinstance(prompt, str) else prompt

    async def _a_generate_reason(self, *args, **kwargs):
        if self.include_reason and _passes(self):
            return passing_reason(self)
        return await super(subclass, self)._a_generate_reason(*args, **kwargs)

    def _generate_reason(self, *args, **kwargs):
        if self.include_reason and _passes(self):
            return passing_reason(self)
        return super(subclass, self)._generate_reason(*args, **kwargs)

    subclass = type(metric_class.__name__, (metric_class,), {
        "_get_prompt": _get_prompt, "_a_generate_reason": _a_generate_reason,
        "_generate_reason": _generate_reason, "__module__": metric_class.__module__})
    return subclass


class LlmJudge(Judge):
    """DeepEval's RAG metrics and GEval criteria, asked of an OpenAI-compatible model whose
    replies are cached in `judge_cache` (a rerun costs nothing). With `few_shot`, curators'
    graded examples open each verdict prompt of their metric: a new judge version."""

    def __init__(self, settings: LlmJudgeSettings, geval: Sequence[Mapping[str, Any]] = DEFAULT_GEVAL,
                 few_shot: FewShot | None = None):
        self.settings, self.geval, self.few_shot = settings, [dict(g) for g in geval], few_shot
        self.model = OpenAICompatibleModel(settings)

    @property
    def usage(self) -> JudgeUsage:
        return self.model.usage

    async def end_calls(self) -> None:
        await self.model.end_calls()

    def with_few_shot(self, few_shot: FewShot | None) -> Judge:
        """The same endpoint and criteria with these examples: a new judge version."""
        if few_shot is None:
            return self
        return LlmJudge(self.settings, self.geval, few_shot)

    def open(self, con: duckdb.DuckDBPyConnection) -> None:
        self.model.usage = JudgeUsage()
        self.model.cache.update(load_judge_cache(con, self.settings.model))
        self.model.on_store = lambda entries: store_judge_replies(con, self.settings.model, entries)

    def close(self, con: duckdb.DuckDBPyConnection) -> None:
        self.model.flush_replies(force=True)
        save_judge_cache(con, self.model)
        self.model.on_store = None

    @property
    def calls_in_flight(self) -> int:
        return max(1, self.settings.max_in_flight)

    def metrics(self, thresholds: Mapping[str, float | None],
                geval: Sequence[Mapping[str, Any]] | None = None) -> list[BaseMetric]:
        metrics: list[BaseMetric] = []
        for name in METRIC_NAMES:
            if name not in thresholds:
                continue
            block = self.few_shot.block(name) if self.few_shot is not None else ""
            metric = judged(NATIVE_METRICS[name])(
                model=self.model, threshold=thresholds.get(name, OFFLINE_THRESHOLDS[name]), async_mode=True,
                include_reason=True)
            metric.few_shot_block = block
            metrics.append(metric)
        for spec in self.geval if geval is None else geval:
            metrics.append(GEval(
                name=spec["name"], model=self.model, threshold=spec.get("threshold", 0.5),
                criteria=spec.get("criteria"), evaluation_steps=spec.get("evaluation_steps"),
                rubric=spec.get("rubric"),
                evaluation_params=[SingleTurnParams(p) for p in spec.get(
                    "evaluation_params", ["input", "actual_output", "expected_output"])]))
        return metrics

    def describe(self) -> dict[str, Any]:
        description = {"kind": "openai-compatible", "model": self.settings.model,
                       "base_url": self.settings.base_url,
                       "geval": json.loads(json.dumps(self.geval, default=str))}
        if self.few_shot is not None and self.few_shot.examples:  # without examples: the version it was
            description["few_shot"] = self.few_shot.describe()
        return description
