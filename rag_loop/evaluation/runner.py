"""Run a golden release through a RAG app and score every case × metric with DeepEval metrics.

`live` mode asks the system under test (an import path `package.module:function` called as
`function(query, attributes=..., **app_config)`, returning `{"answer", "retrieval_context":
[{"chunk_id", "text"} | str]}`); `replay` mode scores what production answered (the traces
behind the goldens). Metrics run concurrently through DeepEval's async `a_measure`; a metric
that raises or times out is *errored*: kept with its error, never counted as passed.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import deepeval
import duckdb
import pandas as pd
from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase

from rag_loop.evaluation.settings import EvalError, load_app  # noqa: F401 (re-exported)
from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import EVAL_DDL
from rag_loop.store.releases import read_goldens, read_manifest, release_versions
from rag_loop.store.traces import retrieval_contexts


@dataclass
class Case:
    golden: dict[str, Any]
    test_case: LLMTestCase
    app_error: str | None = None


def build_cases(goldens: Sequence[dict], mode: str, app: Callable[..., Mapping[str, Any]] | None,
                app_config: Mapping[str, Any], con: duckdb.DuckDBPyConnection | None) -> list[Case]:
    """One DeepEval test case per golden, with the output of the system under test."""
    if mode == "replay":
        return _replay_cases(goldens, con)
    cases = []
    for golden in goldens:
        meta = golden.get("additional_metadata") or {}
        attributes = {k: meta.get(k) for k in ("language", "query_type", "tenant")}
        try:
            output = app(golden["input"], attributes=attributes, **app_config)
            answer, context, error = output["answer"], _texts(output.get("retrieval_context")), None
        except Exception as exc:  # the app failing is a result, not a crash of the run
            answer, context, error = "", [], f"rag_app: {exc!r}"[:500]
        cases.append(Case(golden, _test_case(golden, answer, context), error))
    return cases


def _texts(context: Sequence[Any] | None) -> list[str]:
    return [c["text"] if isinstance(c, Mapping) else str(c) for c in context or []
            if (c.get("text") if isinstance(c, Mapping) else c)]


def _test_case(golden: dict, answer: str, context: list[str]) -> LLMTestCase:
    return LLMTestCase(input=golden["input"], actual_output=answer or "",
                       expected_output=golden.get("expected_output"),
                       context=golden.get("context"), retrieval_context=context,
                       name=golden.get("name"))


def _replay_cases(goldens: Sequence[dict], con: duckdb.DuckDBPyConnection) -> list[Case]:
    trace_ids = [(g.get("additional_metadata") or {}).get("trace_id") for g in goldens]
    answers = dict(con.execute("SELECT trace_id, answer FROM raw_traces WHERE trace_id IN "
                               "(SELECT unnest(?))", [trace_ids]).fetchall())
    contexts = retrieval_contexts(con, [t for t in trace_ids if t])
    cases = []
    for golden, trace_id in zip(goldens, trace_ids):
        error = None if trace_id in answers else f"replay: trace {trace_id!r} not found"
        cases.append(Case(golden, _test_case(golden, answers.get(trace_id) or "",
                                             _texts(contexts.get(trace_id))), error))
    return cases


@dataclass
class RunResult:
    results: pd.DataFrame  # one row per case × metric
    seconds: float
    errored: int
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    unfinished: int = 0  # cases the run's deadline cut off (their metrics are errored)


def score_cases(cases: Sequence[Case], make_metrics: Callable[[Case], list[BaseMetric]],
                concurrency: int = 8, log: Log = quiet, deadline_seconds: float | None = None,
                end_calls: Callable[[], Awaitable[None]] | None = None) -> RunResult:
    """Every case × metric, `concurrency` cases at once and a case's metrics concurrently
    (`make_metrics(case)`: fresh metrics for that case, with its thresholds); errors are caught
    per metric and kept. At the deadline the cases still running are
    cancelled and their metrics stored as errored, so the run ends with what it has (and what
    the judge was paid for is already cached). `end_calls` runs before the event loop ends
    (the judge closes its connections)."""
    started, start = datetime.now(UTC), time.perf_counter()
    rows: list[dict[str, Any]] = []
    finished: set[int] = set()

    async def one_case(index: int, case: Case, gate: asyncio.Semaphore) -> None:
        async with gate:
            metrics = make_metrics(case)
            outcomes = await asyncio.gather(*(_measure(m, case) for m in metrics))
        rows.extend(outcomes)
        finished.add(index)
        if len(finished) % 10 == 0 or len(finished) == len(cases):
            log(f"scored {len(finished)}/{len(cases)} cases")

    async def run_all() -> None:
        gate = asyncio.Semaphore(concurrency)
        tasks = [asyncio.create_task(one_case(i, c, gate)) for i, c in enumerate(cases)]
        try:
            if not tasks:
                return
            _, pending = await asyncio.wait(tasks, timeout=deadline_seconds)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            if end_calls is not None:
                await end_calls()

    asyncio.run(run_all())
    unfinished = [c for i, c in enumerate(cases) if i not in finished]
    if unfinished:
        log(f"run deadline ({deadline_seconds:g} s) reached: {len(unfinished)} cases not scored")
        error = f"deadline: the run's limit of {deadline_seconds:g} s was reached first"
        rows += [{**_row(m, c), "errored": True, "error": error} for c in unfinished for m in make_metrics(c)]
    frame = pd.DataFrame(rows)
    errored = int(frame["errored"].sum()) if len(frame) else 0
    return RunResult(frame, time.perf_counter() - start, errored, started, len(unfinished))


def _row(metric: BaseMetric, case: Case) -> dict[str, Any]:
    """A result row of one case × metric, not scored yet."""
    return {"golden": case.golden.get("name"), "metric": metric.__name__, "threshold": metric.threshold,
            "score": None, "passed": None, "errored": False, "error": None, "reason": None,
            "actual_output": case.test_case.actual_output}


async def _measure(metric: BaseMetric, case: Case) -> dict[str, Any]:
    row = _row(metric, case)
    if case.app_error:
        return {**row, "errored": True, "error": case.app_error}
    try:
        score = await metric.a_measure(case.test_case, _show_indicator=False)
    except Exception as exc:  # a judge outage or timeout: errored, never passed
        return {**row, "errored": True, "error": f"{type(exc).__name__}: {exc}"[:500]}
    if metric.error:
        return {**row, "errored": True, "error": str(metric.error)[:500]}
    passed = None if metric.threshold is None else bool(score >= metric.threshold)
    return {**row, "score": float(score), "passed": passed, "reason": metric.reason}




def store_run(con: duckdb.DuckDBPyConnection, run: RunResult, cases: Sequence[Case],
              record: Mapping[str, Any]) -> str:
    """Store the run and its results; returns the run id."""
    con.execute(EVAL_DDL)
    run_id = record.get("run_id") or f"eval-{run.started_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    meta = {c.golden.get("name"): c.golden for c in cases}
    results = run.results.copy()
    for column, key in (("language", "language"), ("query_type", "query_type"),
                        ("origin", "origin"), ("failure_type", "failure_type"), ("tags", "tags")):
        results[column] = [(meta[g].get("additional_metadata") or {}).get(key) for g in results["golden"]]
    results["input"] = [meta[g]["input"] for g in results["golden"]]
    results.insert(0, "run_id", run_id)
    con.execute("BEGIN")
    con.register("_results", results)
    try:
        con.execute("INSERT INTO eval_results BY NAME SELECT * FROM _results")
    finally:
        con.unregister("_results")
    values = {"run_id": run_id, "started_at": run.started_at, "seconds": run.seconds,
              "cases": len(cases), "results": len(results), "errored": run.errored,
              "deepeval_version": deepeval.__version__, **record}
    for key in ("rag_config", "judge", "metrics", "gates"):
        values[key] = json.dumps(values.get(key), default=str)
    columns = [c for c in values if c != "run_id"] + ["run_id"]
    con.execute(f"INSERT INTO eval_runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                [values[c] for c in columns])
    con.execute("COMMIT")
    return run_id


def release_of(goldens_dir: Path, version: str) -> tuple[str, list[dict], str]:
    """(version, goldens, sha256) of a release; `latest` is the newest one."""
    versions = release_versions(goldens_dir)
    if not versions:
        raise EvalError(f"no golden release in {goldens_dir}: run release_goldens first")
    chosen = versions[-1] if version in ("", "latest") else version
    if chosen not in versions:
        raise EvalError(f"release {chosen} not found; have {', '.join(versions)}")
    goldens = read_goldens(goldens_dir, chosen)  # raises when the file is not the manifest's
    return chosen, goldens, read_manifest(goldens_dir, chosen)["sha256"]
