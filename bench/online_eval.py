"""Online evaluation: are the estimates honest, and is the judge fast enough?

    python bench/online_eval.py [--seeds 120] [--remote-traces 320] [--in-flight 16,64,128] [--only remote|...]
                                [--scores FILE] [--history 1000000] [--due 2000]
                                [--omp-wait-policy default|passive]

1. Estimates. Every trace of the demo traffic (14 days) is judged once with the offline judge:
   that is the population truth per day and metric. Then, for each seed, the selection stage
   draws its streams anew (salt = seed) and the day's pass rate is estimated from the judged
   traces it selected: the random stream alone (Wilson) and Horvitz-Thompson over every
   stream. Prints bias and how often the 95 % interval holds the truth (goal 93-97 %), beside
   the naive selected-set rate (biased on purpose).
2. Offline throughput: traces/s for Faithfulness + Answer Relevancy + Contextual Relevancy
   (goal >= 500/s on 2 cores), against a bare word-overlap scorer of the same cases in the
   same process, with the load average. `--scores FILE`: every verdict (trace, metric, status,
   score, passed, reason) written to a Parquet file, to compare two versions of the judge.
3. Remote throughput: the LLM judge (DeepEval's metrics) against the stand-in judge answering
   in 200 ms, served by a process of its own with connections kept alive
   (`tests.helpers.standin_openai`), 16 cases open and `--in-flight` calls at most (one or more
   bounds, e.g. 16,64,128; the goal >= 40 traces/s), Faithfulness alone and the three metrics,
   then with 15 % of calls refused (429, 500, 503, stalls past the 2 s timeout): no case may be
   lost. In turn in this process: the path before issue 45 (23d8a6b, re-enacted), the path of
   8fdf2f6 (one client, typed replies), the path of d287b4b (`previous`: every verdict's reason
   asked, the OpenAI client's own retries holding the slot through their waits and the full
   timeout a stalled attempt), and now (`--paths` picks); beside each, the calls a trace cost
   as the stand-in counted them (`GET /stats`: requests, and those refused), the bound the
   calls allow (calls in flight / 0.2 s / the calls a trace needed), the judge process's CPU
   per call, the connections the stand-in saw, and the same number of bare calls through the
   judge's own clients and bound (`--only remote` runs this part alone; `--remote-repeats`
   rounds). The stand-in passes every verdict (its enums answer "yes"), so no failing verdict's
   reason is asked: on real traffic each failing verdict adds one call.
4. History (`--only history`, not run by default): `--due` demo traces due for judging, alone
   in a database and then beside `--history` traces of older days (a tenth of them selected and
   judged by the same judge version, as after months of daily runs): the run's seconds,
   `planned_work` and `trace_cases`, each on a freshly opened database. Judging cost should
   follow what is due, not the history.

The judge's model runs with torch's own thread count, as in a Dagster run. `--omp-wait-policy
passive` sets OMP_WAIT_POLICY=PASSIVE before torch loads (unless set): libgomp's threads then
sleep between parallel regions instead of spinning, which on a shared 2-core machine starves
the other processes and the model's own next region; the vectors are the same bit for bit.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the stand-in judge server lives with the tests (imported in part 3 only)

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
from sklearn.metrics import cohen_kappa_score  # noqa: E402

from rag_loop.evaluation.judges import evidence, llm, offline, support  # noqa: E402
from rag_loop.evaluation.judges.llm import LlmJudge  # noqa: E402
from rag_loop.evaluation.judges.offline import OfflineJudge  # noqa: E402
from rag_loop.evaluation.settings import LlmJudgeSettings  # noqa: E402
from rag_loop.ingest import ingest_directory  # noqa: E402
from rag_loop.ingest.documents import load_knowledge_base  # noqa: E402
from rag_loop.online import judgments  # noqa: E402
from rag_loop.online.judgments import (  # noqa: E402
    ONLINE_DDL,
    JudgingSettings,
    OnlineMetric,
    judge_traces,
    judge_version,
    planned_work,
    trace_cases,
)
from rag_loop.online.quality import OnlineQualitySettings, quality_table  # noqa: E402
from rag_loop.selection.sampling import SamplingPolicy, select_candidates  # noqa: E402
from rag_loop.selection.signals import SLICE_COLUMNS, SignalSettings, compute_signals  # noqa: E402
from rag_loop.store.tables import create_tables  # noqa: E402

DEMO = ROOT / "data" / "demo"
METRICS = [OnlineMetric("Faithfulness", 0.75), OnlineMetric("Answer Relevancy", 0.7),
           OnlineMetric("Contextual Relevancy", 0.5)]
_WORD = re.compile(r"\w+")


def demo_database(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    create_tables(con)
    ingest_directory(con, DEMO / "traces")
    load_knowledge_base(con, DEMO / "kb")
    compute_signals(con, SignalSettings())
    return con


def judge_everything(con: duckdb.DuckDBPyConnection) -> tuple[pd.DataFrame, float, int]:
    """Every trace judged (random rate 1, no budget): (verdicts, seconds, traces)."""
    select_candidates(con, SamplingPolicy(random_rate=1.0, daily_budget_usd=None, salt="everything"))
    judge = OfflineJudge()
    judge.evidence.vectors(["warm up the model"])  # model loading is not judging
    start = time.perf_counter()
    report = judge_traces(con, judge, JudgingSettings(METRICS))
    seconds = time.perf_counter() - start
    verdicts = con.execute(f"""
        SELECT j.trace_id, j.day, j.metric, j.score, j.passed, {", ".join(f"s.{c}" for c in SLICE_COLUMNS)}
        FROM trace_judgments j JOIN trace_signals s USING (trace_id) WHERE j.status = 'judged'""").df()
    return verdicts, seconds, report.planned // len(METRICS)


def against_truth(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The judge's pass / fail against the generator's truth: `correct` answers against `wrong`,
    `wrong_prompt` and `stale` ones (timeouts and fallbacks left out): confusion and kappa."""
    truth = pd.read_parquet(DEMO / "truth.parquet", columns=["trace_id", "outcome"])
    rows = []
    judged = verdicts.merge(truth, on="trace_id")
    judged = judged[judged["outcome"].isin(["correct", "wrong", "wrong_prompt", "stale"])]
    for metric, group in judged.groupby("metric"):
        correct, passed = group["outcome"] == "correct", group["passed"].astype(bool)
        rows.append({"metric": metric, "n": len(group),
                     "pass|correct": int((passed & correct).sum()), "fail|correct": int((~passed & correct).sum()),
                     "pass|wrong": int((passed & ~correct).sum()), "fail|wrong": int((~passed & ~correct).sum()),
                     "kappa": cohen_kappa_score(correct, passed),
                     **{f"fail_rate|{o}": float((~passed[group["outcome"] == o]).mean())
                        for o in ("correct", "wrong", "wrong_prompt", "stale")}})
    return pd.DataFrame(rows).set_index("metric")


def bare_overlap_seconds(con: duckdb.DuckDBPyConnection) -> float:
    """The same cases scored by bare word overlap (answer words in the context): the baseline."""
    work = planned_work(con, JudgingSettings(METRICS, salt="bare"), "bare")
    cases = trace_cases(con, work)
    start = time.perf_counter()
    for case in cases:
        context = set(_WORD.findall(" ".join(case.context).lower()))
        words = _WORD.findall((case.answer or "").lower())
        for _ in METRICS:
            _ = sum(w in context for w in words) / len(words) if words else 0.0
    return time.perf_counter() - start


def estimator_check(con: duckdb.DuckDBPyConnection, verdicts: pd.DataFrame, seeds: int) -> pd.DataFrame:
    """Per seed, day and metric: the estimates from that seed's selection against the truth."""
    truth = verdicts.groupby(["day", "metric"])["passed"].mean().rename("truth")
    settings = OnlineQualitySettings(slices=((),))
    rows = []
    for seed in range(seeds):
        select_candidates(con, SamplingPolicy(salt=f"seed-{seed}"))
        selected = con.execute("SELECT trace_id, by_random, streams, inclusion_probability "
                               "FROM failure_candidates").df()
        sample = verdicts.merge(selected, on="trace_id")
        for (day, metric), group in sample.groupby(["day", "metric"]):
            table = quality_table(group, None, settings).set_index("estimator")
            naive = float(group["passed"].mean())
            for estimator in ("random", "horvitz_thompson"):
                row = table.loc[estimator]
                rows.append({"seed": seed, "day": day, "metric": metric, "estimator": estimator,
                             "n": row["n"], "estimate": row["pass_rate"], "low": row["ci_low"],
                             "high": row["ci_high"], "truth": truth[(day, metric)], "naive": naive})
    return pd.DataFrame(rows)


async def _a_generate_before(self: llm.OpenAICompatibleModel, prompt: str, schema=None):
    """The LLM judge's call as it was before issue 45 (23d8a6b): `chat.completions.create`
    with the schema's JSON schema built per call, no sharing of a prompt asked twice at once,
    and each paid reply stored at once (one INSERT per reply, on the event loop)."""
    key = self._key(prompt, schema)
    if key in self.cache:
        return self._finish(key, *self.cache[key], schema, cached=True)
    request = {"model": self.settings.model, "temperature": 0, "messages": [{"role": "user", "content": prompt}]}
    if schema is not None:
        request["response_format"] = {"type": "json_schema", "json_schema": {
            "name": schema.__name__, "schema": schema.model_json_schema()}}
    retries = self.settings.max_retries
    async with _semaphore(self):
        response = await asyncio.wait_for(
            _one_client(self).chat.completions.create(**request),
            timeout=self.settings.timeout_seconds * (1 + retries) + llm.MAX_BACKOFF_SECONDS * retries + 1)
    usage = response.usage
    result = self._finish(key, response.choices[0].message.content or "", getattr(usage, "prompt_tokens", 0) or 0,
                          getattr(usage, "completion_tokens", 0) or 0, schema, cached=False)
    self.flush_replies(force=True)
    return result


def _store_each(con: duckdb.DuckDBPyConnection, model: str, entries: dict) -> None:
    """Replies stored as before: one INSERT per reply."""
    for key, entry in entries.items():
        con.execute("INSERT OR IGNORE INTO judge_cache (key, model, response, input_tokens, output_tokens) "
                    "VALUES (?, ?, ?, ?, ?)", [key, model, *entry])


def _one_client(model: llm.OpenAICompatibleModel):
    """One AsyncOpenAI client with the default pool (up to 1000 connections), as before this
    session's change: every call probes every pooled connection."""
    loop = asyncio.get_running_loop()
    client = getattr(model, "_one_client", None)
    if client is None or client[0] is not loop:
        from openai import AsyncOpenAI
        client = model._one_client = (loop, AsyncOpenAI(
            base_url=model.settings.base_url, api_key="x", timeout=model.settings.timeout_seconds,
            max_retries=model.settings.max_retries))
    return client[1]


def _semaphore(model: llm.OpenAICompatibleModel) -> asyncio.Semaphore:
    """The call bound as it was (a semaphore of the run's loop)."""
    loop = asyncio.get_running_loop()
    gate = getattr(model, "_gate", None)
    if gate is None or gate[0] is not loop:
        gate = model._gate = (loop, asyncio.Semaphore(max(1, model.settings.max_in_flight)))
    return gate[1]


async def _ask_typed(self: llm.OpenAICompatibleModel, key: str, prompt: str, schema=None):
    """The call of 8fdf2f6: one client, the reply built into a typed `ChatCompletion`."""
    from openai.types.chat import ChatCompletion
    retries = self.settings.max_retries
    async with _semaphore(self):
        response = await asyncio.wait_for(
            _one_client(self).post("/chat/completions", body=self._request(prompt, schema), cast_to=ChatCompletion),
            timeout=self.settings.timeout_seconds * (1 + retries) + llm.MAX_BACKOFF_SECONDS * retries + 1)
    usage = response.usage
    return self._finish(key, response.choices[0].message.content or "", getattr(usage, "prompt_tokens", 0) or 0,
                        getattr(usage, "completion_tokens", 0) or 0, schema, cached=False)


async def _end_one_client(self: llm.OpenAICompatibleModel) -> None:
    """The one client closed as its loop ends (as the judge now closes its own)."""
    client, self._one_client = getattr(self, "_one_client", None), None
    if client is not None and client[0] is asyncio.get_running_loop():
        await client[1].close()


@contextmanager
def as_typed() -> Iterator[None]:
    """The remote path of 8fdf2f6 (before the call slots and byte replies), in this process."""
    saved = llm.OpenAICompatibleModel._ask, llm.OpenAICompatibleModel.end_calls
    llm.OpenAICompatibleModel._ask, llm.OpenAICompatibleModel.end_calls = _ask_typed, _end_one_client
    try:
        with reasons_always():
            yield
    finally:
        llm.OpenAICompatibleModel._ask, llm.OpenAICompatibleModel.end_calls = saved


@contextmanager
def reasons_always() -> Iterator[None]:
    """Every verdict's reason asked of the judge, as before d287b4b's successor."""
    saved = llm._passes
    llm._passes = lambda metric: False
    try:
        yield
    finally:
        llm._passes = saved


async def _post_previous(self: llm.OpenAICompatibleModel, request: dict) -> bytes:
    """The call of d287b4b: the OpenAI client's own retries, each attempt waiting the full
    timeout, the slot held through every attempt and wait."""
    slots, clients = self._in_flight()
    slot = await slots.get()
    try:
        return await clients[slot % len(clients)].post(
            "/chat/completions", body=request, cast_to=bytes,
            options={"max_retries": self.settings.max_retries, "timeout": self.settings.timeout_seconds})
    finally:
        slots.put_nowait(slot)


@contextmanager
def as_previous() -> Iterator[None]:
    """The remote path of d287b4b (call slots, byte replies, every reason asked, the client's
    retries), in this process."""
    saved = llm.OpenAICompatibleModel._post
    llm.OpenAICompatibleModel._post = _post_previous
    try:
        with reasons_always():
            yield
    finally:
        llm.OpenAICompatibleModel._post = saved


@contextmanager
def as_before() -> Iterator[None]:
    """The remote judging path of before issue 45, in this process: `concurrency` cases open
    (not the judge's call bound) and the call above. The offline judge is not concerned."""
    saved = (judgments.open_cases, llm.OpenAICompatibleModel.a_generate, llm.store_judge_replies,
             llm.OpenAICompatibleModel.end_calls)
    judgments.open_cases = lambda settings, judge: settings.concurrency
    llm.OpenAICompatibleModel.a_generate = _a_generate_before
    llm.store_judge_replies = _store_each
    llm.OpenAICompatibleModel.end_calls = _end_one_client
    try:
        with reasons_always():
            yield
    finally:
        (judgments.open_cases, llm.OpenAICompatibleModel.a_generate, llm.store_judge_replies,
         llm.OpenAICompatibleModel.end_calls) = saved


@dataclass
class RemoteFigures:
    traces_per_s: float
    judged: int
    errored: int
    refused: int
    calls: int
    traces: int
    cpu_ms_per_call: float
    connections: int
    bare_traces_per_s: float
    bare_cpu_ms_per_call: float
    max_in_flight: int
    requests: int  # as the stand-in counted them (GET /stats), refused ones included


def remote_throughput(con: duckdb.DuckDBPyConnection, traces: int, flaky: float, metrics: list[OnlineMetric],
                      in_flight: int = 64, path: str = "now") -> RemoteFigures:
    """The LLM judge on a 200 ms stand-in in its own process; a fresh model name each time, so
    that no reply comes from an earlier run's cache. Then as many bare calls through the
    judge's own clients and bound (distinct prompts, no DeepEval): the pace the calls allow."""
    # imported here: `tests` sets OMP_NUM_THREADS=1 for its workers, and imported before the
    # offline judge's model loads it made parts 1-2 measure a one-thread model (since 56a580d)
    from tests.helpers.standin_openai import StandInProcess
    con.execute("CREATE OR REPLACE TABLE failure_candidates AS SELECT trace_id, day, ['random'] AS streams, "
                "true AS by_random, 1.0 AS inclusion_probability FROM trace_signals WHERE trace_id IN "
                "(SELECT trace_id FROM trace_chunks) ORDER BY hash(trace_id) LIMIT ?", [traces])
    con.execute(ONLINE_DDL)
    con.execute("DELETE FROM trace_judgments")
    with StandInProcess(delay=0.2, flaky=flaky, stall_seconds=3.0) as server:
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model=f"stand-in-{time.time_ns()}",
                                          timeout_seconds=2.0, max_retries=6, max_in_flight=in_flight))
        with {"before": as_before, "typed": as_typed, "previous": as_previous, "now": _nothing}[path]():
            cpu, start = time.process_time(), time.perf_counter()
            report = judge_traces(con, judge, JudgingSettings(metrics, concurrency=16))
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            stats = server.stats()
            calls = judge.usage.calls
            bare_cpu = time.process_time()
            bare = asyncio.run(bare_calls(judge.model, calls, path in ("before", "typed"))) if calls else 0.0
            bare_cpu = time.process_time() - bare_cpu
    judged_traces = con.execute("SELECT count(DISTINCT trace_id) FROM trace_judgments "
                                "WHERE status = 'judged'").fetchall()[0][0]
    for metric, error, n in con.execute("SELECT metric, error, count(*) FROM trace_judgments "
                                        "WHERE status = 'errored' GROUP BY ALL").fetchall():
        print(f"    errored ({path}): {n} x {metric}: {error}", flush=True)
    return RemoteFigures(judged_traces / seconds, report.judged, report.errored, len(stats["refused"]), calls,
                         judged_traces, 1000 * cpu / max(calls, 1), stats["connections"],
                         judged_traces / bare if bare else 0.0, 1000 * bare_cpu / max(calls, 1),
                         stats["max_in_flight"], stats["requests"])


async def bare_calls(model: llm.OpenAICompatibleModel, calls: int, one_client: bool = False) -> float:
    """Seconds for `calls` bare chat calls through the judge's clients, bound and retries (or,
    for the paths of before, its one client), distinct prompts, no DeepEval and no cache."""
    async def one(i: int) -> None:
        body = {"model": "bare", "messages": [{"role": "user", "content": f"bare call {i}"}]}
        if one_client:
            async with _semaphore(model):
                await _one_client(model).post("/chat/completions", cast_to=bytes, body=body)
            return
        await model._post(body)  # the judge's slots, clients and retries (the path's own)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    seconds = time.perf_counter() - start
    await model.end_calls()
    return seconds


HISTORY_TABLES = ("raw_traces", "trace_chunks", "documents", "document_chunks", "failure_candidates")


def history_database(path: Path, source: dict[str, pa.Table], due: list[str], history: int,
                     version: str) -> dict[str, int]:
    """The demo's traces in a new database, `due` of them selected and not judged yet, after
    `history` traces of older days (copies of the demo's, 14 days back per copy, written first
    as daily ingestion appends them), a tenth of them selected and judged by `version`."""
    con = duckdb.connect(str(path))
    create_tables(con)
    con.execute(ONLINE_DDL)
    for name, table in source.items():
        con.register(f"source_{name}", table)
    con.register("due", pa.table({"trace_id": pa.array(due, pa.string())}))
    copies = -(-history // source["raw_traces"].num_rows) if history else 0
    if copies:
        renamed = "'h' || k || '-' || s.trace_id"
        con.execute(f"""INSERT INTO raw_traces SELECT s.* REPLACE ({renamed} AS trace_id,
                            "timestamp" - to_days(14 * ({copies} - k)) AS "timestamp")
                        FROM range({copies}) r(k), source_raw_traces s ORDER BY k LIMIT {history}""")
        older = f"s.day - (14 * ({copies} - k))::INTEGER"
        con.execute(f"""INSERT INTO trace_chunks SELECT s.* REPLACE ({renamed} AS trace_id, {older} AS day)
                        FROM range({copies}) r(k), source_trace_chunks s
                        WHERE {renamed} IN (SELECT trace_id FROM raw_traces) ORDER BY k""")
        con.execute(f"""CREATE TABLE failure_candidates AS
                        SELECT s.* REPLACE ({renamed} AS trace_id, {older} AS day)
                        FROM range({copies}) r(k), source_failure_candidates s
                        WHERE hash(k, s.trace_id) % 10 = 0 AND {renamed} IN (SELECT trace_id FROM raw_traces)
                        ORDER BY k""")
        con.execute("""INSERT INTO trace_judgments BY NAME
                        SELECT trace_id, day, metric, 'offline' AS judge_id, ? AS judge_version,
                               'judged' AS status, 0.8 AS score, 0.5 AS threshold, true AS passed,
                               '3/3 claims supported (mean 0.80)' AS reason, streams, by_random,
                               inclusion_probability, 1.0 AS metric_rate, 'history' AS run_id, now() AS judged_at
                        FROM failure_candidates, (SELECT unnest(?) AS metric)""",
                    [version, [m.name for m in METRICS]])
    due_candidates = "SELECT * FROM source_failure_candidates SEMI JOIN due USING (trace_id)"
    con.execute(f"INSERT INTO failure_candidates {due_candidates}" if copies
                else f"CREATE TABLE failure_candidates AS {due_candidates}")
    con.execute('INSERT INTO raw_traces SELECT * FROM source_raw_traces ORDER BY "timestamp"')
    con.execute("INSERT INTO trace_chunks SELECT * FROM source_trace_chunks ORDER BY day")
    con.execute("INSERT INTO documents SELECT * FROM source_documents")
    con.execute("INSERT INTO document_chunks SELECT * FROM source_document_chunks")
    sizes = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
             for t in ("raw_traces", "trace_chunks", "failure_candidates", "trace_judgments")}
    con.close()
    return sizes


def clear_text_caches() -> None:
    """The judge's per-text caches (statements, words, terms) emptied: each run starts cold."""
    for module in (evidence, offline, support):
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def history_check(con: duckdb.DuckDBPyConnection, folder: Path, history: int, due: int, repeats: int = 2) -> None:
    """`due` traces judged alone in a database and beside `history` judged traces of older days."""
    source = {t: con.sql(f"SELECT * FROM {t}").to_arrow_table() for t in HISTORY_TABLES}
    due_ids = [r[0] for r in con.execute(
        "SELECT trace_id FROM failure_candidates WHERE trace_id IN (SELECT trace_id FROM trace_chunks) "
        "ORDER BY day DESC, trace_id LIMIT ?", [due]).fetchall()]
    version = judge_version(OfflineJudge())[1]
    settings = JudgingSettings(METRICS)
    paths = {}
    for size in (0, history):
        start = time.perf_counter()
        paths[size] = Path(folder) / f"history-{size}.duckdb"
        sizes = history_database(paths[size], source, due_ids, size, version)
        print(f"  database with {size:,} older traces built in {time.perf_counter() - start:.0f} s: {sizes}")
    rows = []
    for repeat in range(repeats):
        for size, path in paths.items():
            work_copy = path.with_suffix(f".run{repeat}.duckdb")
            work_copy.write_bytes(path.read_bytes())  # every run on the same unjudged state
            with duckdb.connect(str(work_copy)) as db:  # freshly opened: nothing of it in memory
                start = time.perf_counter()
                work = planned_work(db, settings, version)
                planning = time.perf_counter() - start
                start = time.perf_counter()
                cases = trace_cases(db, work)
                reading = time.perf_counter() - start
            clear_text_caches()
            judge = OfflineJudge()
            judge.evidence.vectors(["warm up the model"])
            with duckdb.connect(str(work_copy)) as db:
                start = time.perf_counter()
                report = judge_traces(db, judge, settings)
                seconds = time.perf_counter() - start
            work_copy.unlink()
            rows.append({"older traces": f"{size:,}", "run": repeat + 1, "due traces": len(cases),
                         "planned rows": report.planned, "judge_traces s": round(seconds, 2),
                         "traces/s": round(len(cases) / seconds), "planned_work ms": round(planning * 1000),
                         "trace_cases ms": round(reading * 1000),
                         "load": round(os.getloadavg()[0], 2)})
    print(pd.DataFrame(rows).to_string(index=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=120)
    parser.add_argument("--remote-traces", type=int, default=320)
    parser.add_argument("--remote-repeats", type=int, default=1, help="part 3's rounds of every path")
    parser.add_argument("--in-flight", default="64", help="part 3's bounds on judge calls at once (e.g. 16,64,128)")
    parser.add_argument("--paths", default="previous,now", help="part 3's paths: before, typed, previous, now")
    parser.add_argument("--remote-metrics", choices=["both", "three"], default="both",
                        help="part 3: Faithfulness alone and the three metrics, or the three alone")
    parser.add_argument("--only", choices=["throughput", "history", "remote"], default=None,
                        help="throughput: part 2 alone (every demo trace judged offline, the bare scorer); "
                             "history: part 4 (not run otherwise); remote: part 3 alone")
    parser.add_argument("--scores", type=Path, help="write part 2's verdicts to this Parquet file")
    parser.add_argument("--history", type=int, default=1_000_000, help="older traces of part 4")
    parser.add_argument("--due", type=int, default=2_000, help="traces due in part 4")
    parser.add_argument("--omp-wait-policy", choices=["default", "passive"], default="default",
                        help="passive: OMP_WAIT_POLICY=PASSIVE (unless set) before torch loads")
    args = parser.parse_args()
    assert "torch" not in sys.modules, "torch loaded before the OpenMP settings"
    if args.omp_wait_policy == "passive":
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # libgomp reads it once, as torch loads
    with tempfile.TemporaryDirectory() as folder:
        con = demo_database(Path(folder) / "bench.duckdb")
        if args.only == "history":
            print(f"part 4: {args.due} traces due, alone and beside {args.history:,} judged older traces "
                  f"(OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}):")
            select_candidates(con, SamplingPolicy(random_rate=1.0, daily_budget_usd=None, salt="everything"))
            history_check(con, Path(folder), args.history, args.due)
            con.close()
            return
        if args.only == "remote":
            remote_part(con, args.remote_traces, args.remote_repeats, tuple(int(n) for n in args.in_flight.split(",")),
                        tuple(args.paths.split(",")), args.remote_metrics == "three")
            con.close()
            return
        verdicts, seconds, traces = judge_everything(con)
        if args.scores:
            con.execute(f"COPY (SELECT trace_id, metric, status, score, passed, reason FROM trace_judgments "
                        f"ORDER BY ALL) TO '{args.scores}' (FORMAT parquet)")
        bare = bare_overlap_seconds(con)
        if args.only is None:
            print("judge against the demo's truth (outcome correct vs wrong / wrong_prompt / stale):")
            print(against_truth(verdicts).round(3).to_string())
        import torch  # loaded by the judge's model by now
        print(f"offline judge, 3 metrics: {traces} traces in {seconds:.2f} s = {traces / seconds:.0f} traces/s "
              f"(goal >= 500); bare word overlap {traces / bare:.0f} traces/s, ratio {seconds / bare:.0f}x; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {torch.get_num_threads()} torch "
              f"threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
        if args.only == "throughput":
            con.close()
            return
        checks = estimator_check(con, verdicts, args.seeds)
        checks = checks.dropna(subset=["estimate"])
        checks["covered"] = (checks["low"] <= checks["truth"]) & (checks["truth"] <= checks["high"])
        checks["error"] = checks["estimate"] - checks["truth"]
        summary = checks.groupby(["metric", "estimator"]).agg(
            intervals=("covered", "size"), mean_n=("n", "mean"), bias=("error", "mean"),
            rmse=("error", lambda e: float(np.sqrt((e ** 2).mean()))), coverage=("covered", "mean"))
        naive = checks[checks["estimator"] == "random"].assign(error=lambda f: f["naive"] - f["truth"])
        summary["naive_bias"] = naive.groupby("metric")["error"].mean().reindex(summary.index, level=0)
        print(f"\nestimates over {args.seeds} seeds x {checks['day'].nunique()} days "
              "(95 % intervals; goal coverage 0.93-0.97):")
        print(summary.round(4).to_string())
        remote_part(con, args.remote_traces, args.remote_repeats, tuple(int(n) for n in args.in_flight.split(",")),
                        tuple(args.paths.split(",")), args.remote_metrics == "three")
        con.close()


def remote_part(con: duckdb.DuckDBPyConnection, traces: int, repeats: int = 1, bounds: tuple[int, ...] = (64,),
                paths: tuple[str, ...] = ("previous", "now"), three_only: bool = False) -> None:
    """Part 3: the remote judge, Faithfulness alone and three metrics, with and without
    refusals, at each bound on calls in flight, along each path in turn in this process (same load)."""
    print(f"\nremote judge on a 200 ms stand-in (own process, keep-alive), 16 cases open, {traces} traces "
          "(goal >= 40 traces/s, no case lost); before = 23d8a6b's path, typed = 8fdf2f6's, previous = "
          "d287b4b's, all re-enacted; calls a trace = the stand-in's requests (answered + refused) / traces "
          "judged; bound = calls in flight / 0.2 s / answered calls a trace:")
    for in_flight in bounds:
        for metrics in ((METRICS,) if three_only else (METRICS[:1], METRICS)):
            for flaky in (0.0, 0.15):
                for repeat in range(repeats):
                    for path in paths:
                        f = remote_throughput(con, traces, flaky, metrics, in_flight, path)
                        answered = (f.requests - f.refused) / max(f.traces, 1)
                        bound = in_flight / 0.2 / answered if answered else float("nan")
                        print(f"  {in_flight:3} in flight, {path:8} {' + '.join(m.name for m in metrics)}, "
                              f"{flaky:.0%} refused (#{repeat + 1}): {f.traces_per_s:.1f} traces/s; bound {bound:.1f}; "
                              f"calls a trace {answered:.2f} answered + {f.refused / max(f.traces, 1):.2f} refused "
                              f"({f.calls} paid by the judge); bare calls {f.bare_traces_per_s:.1f}; CPU "
                              f"{f.cpu_ms_per_call:.2f} ms a call (bare {f.bare_cpu_ms_per_call:.2f}); {f.connections} "
                              f"connections, {f.max_in_flight} in flight at most; {f.judged} judgements, {f.errored} "
                              f"errored; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


if __name__ == "__main__":
    main()
