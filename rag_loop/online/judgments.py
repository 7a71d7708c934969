"""Online evaluation (seed 004 §06-§07): the traces the selection stage chose, judged out of the
request path with referenceless metrics, one row per trace × metric × judge version.

- Each metric judges its own share of the selected traces (`OnlineMetric.rate`, a deterministic
  draw per trace and metric), so a trace's inclusion probability for a metric is its selection
  π times that rate, and a metric's random stream is still a uniform sample.
- Incremental: a trace × metric is judged once per judge version (a hash of what the judge
  says it is); a rerun judges only what is new or errored, a new judge version judges again
  and the old rows stay.
- The context is what the trace says reached the LLM (its chunk text, else the knowledge
  base's chunk of that id, else its document: `store.traces.RESOLVED_CHUNKS`). A metric whose
  input is missing (no context, no answer, no query) is `unjudgeable` with the reason, never
  scored; such a row is looked at again by every run and judged once its input appears (a
  knowledge base that resolves the trace's ids, a late span with the answer). A row still
  missing the same input is left as it is and counted apart (`still_unjudgeable`).
- Results are written as they arrive, in batches of `flush_every` rows or every
  `flush_seconds`, whichever comes first (a run killed half way keeps what it judged); a judge
  error is `errored`, never a pass, and retried by the next run.
- A run's cost follows what is due, not the history: the plan joins only the days that may
  hold something due (`planned_work`), and the traces' texts are read on their own days.
- Re-judging has a bound (`rejudge_days`): a new judge version judges new traffic and
  re-judges the last days of the selection (the overlap where the scale shift is measured, and
  the SLO's window); a trace × metric an earlier version judged on an older day keeps that
  verdict (`kept_verdicts`), which quality figures use marked as such. The window is fixed by
  the version's first run (`judge_windows`), so later runs neither widen nor move it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa

from rag_loop.evaluation.alignment import Alignment, judge_version
from rag_loop.evaluation.judges.base import Judge, cases_at_once, metered
from rag_loop.logs import Log, quiet
from rag_loop.store.ddl import ONLINE_DDL
from rag_loop.store.traces import retrieval_contexts

REFERENCELESS = ("Faithfulness", "Answer Relevancy", "Contextual Relevancy")
NEEDS = {"Faithfulness": ("answer", "context"), "Answer Relevancy": ("answer",),
         "Contextual Relevancy": ("context",)}
GEVAL_NEEDS = {"actual_output": "answer", "retrieval_context": "context", "context": "context",
               "expected_output": "expected_output", "input": "input"}
MISSING = {"answer": "unjudgeable: no answer", "context": "unjudgeable: no context",
           "expected_output": "unjudgeable: needs an expected output (production has none)",
           "input": "unjudgeable: no query"}
# what a later run may find: a KB resolving the trace's chunk ids, a late span with the answer
MAY_ARRIVE = (MISSING["answer"], MISSING["context"], MISSING["input"])


@dataclass(frozen=True)
class OnlineMetric:
    """A metric judged online: its pass threshold (None: monitoring, no verdict) and the share
    of the selected traces it judges (seed §07: not every metric on every trace)."""

    name: str
    threshold: float | None
    rate: float = 1.0
    geval: Mapping[str, Any] | None = None  # a GEval criterion (name "<criterion> [GEval]")

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"rate of {self.name} is {self.rate}: not within [0, 1]")
        if self.geval is None and self.name not in REFERENCELESS:
            raise ValueError(f"{self.name!r} is not a referenceless metric ({', '.join(REFERENCELESS)}) "
                             "or a GEval criterion")

    def needs(self) -> tuple[str, ...]:
        if self.geval is None:
            return NEEDS[self.name]
        params = self.geval.get("evaluation_params") or ["input", "actual_output"]
        return tuple(dict.fromkeys(GEVAL_NEEDS[p] for p in params if p in GEVAL_NEEDS))


@dataclass(frozen=True)
class JudgingSettings:
    metrics: Sequence[OnlineMetric]
    salt: str = "rag-loop-online"
    concurrency: int = 8
    deadline_seconds: float | None = None  # the run stops judging here; the rest waits for the next run
    max_error_rate: float = 0.05  # above this share of errored judgements the run is marked
    flush_every: int = 1000  # results written per batch at most (an INSERT costs ~15 ms however few its rows)
    flush_seconds: float = 2.0  # ... and at least this often: a slow judge's results are not held back
    prepare_every: int = 512  # cases the judge prepares at once (the offline judge embeds them in one batch)
    # thresholds fitted to curators' grades (rag_loop.evaluation.alignment): a new judge version
    alignment: Alignment | None = None
    # a new judge version re-judges what earlier versions judged on the selection's last this
    # many days only (None: all of it); new traffic is always judged
    rejudge_days: int | None = 7

    def __post_init__(self) -> None:
        if self.rejudge_days is not None and self.rejudge_days < 1:
            raise ValueError(f"rejudge_days is {self.rejudge_days}: at least 1, or None for every day")

    def threshold(self, metric: OnlineMetric, language: str | None) -> float | None:
        """A metric's pass threshold on a trace in `language`: the alignment's, else the metric's."""
        if self.alignment is None:
            return metric.threshold
        return self.alignment.threshold(metric.name, language, metric.threshold)


@dataclass
class JudgingReport:
    run_id: str
    judge_id: str
    judge_version: str
    planned: int
    judged: int = 0
    unjudgeable: int = 0
    errored: int = 0
    unfinished: int = 0  # left by the deadline for the next run
    seconds: float = 0.0
    cost_usd: float = 0.0
    per_metric: dict[str, dict[str, int]] = field(default_factory=dict)
    still_unjudgeable: int = 0  # unjudgeable before for want of an input still missing: not planned
    newly_judgeable: int = 0  # unjudgeable before, measured now that the input is there

    @property
    def error_rate(self) -> float:
        done = self.judged + self.errored
        return self.errored / done if done else 0.0

    def over_error_budget(self, budget: float) -> bool:
        return self.error_rate > budget


def _draw(salt: str, metric: str) -> str:
    """SQL: a uniform in [0, 1) per trace and metric, from md5."""
    prefix = f"{salt}:{metric}:".replace("'", "''")
    return f"(('0x' || substr(md5('{prefix}' || c.trace_id), 1, 8))::UBIGINT / 4294967296.0)"


def _drawn(salt: str, metric: OnlineMetric) -> str:
    """SQL: whether the metric's rate draws the trace. The draw is below 1 (at most
    (2^32 - 1) / 2^32) and not below 0, so a rate of 1 draws every trace and a rate of 0 none:
    no md5 is computed for those."""
    if metric.rate >= 1.0:
        return "true"
    if metric.rate <= 0.0:
        return "false"
    return f"{_draw(salt, metric.name)} < {float(metric.rate)}"


# a stored row this version must look at again: errored, or unjudgeable for want of an input
# that may have arrived since (`MAY_ARRIVE`, the parameter $may_arrive)
_OPEN_ROW = ("(status IS NULL OR status = 'errored' "
             "OR (status = 'unjudgeable' AND coalesce(list_contains($may_arrive, reason), false)))")
_PLANNED_COLUMNS = ["trace_id", "day", "streams", "by_random", "metric", "metric_rate",
                    "inclusion_probability", "previous_status", "previous_reason"]


def rejudge_window(con: duckdb.DuckDBPyConnection, settings: JudgingSettings, version: str) -> date | None:
    """The first day `version` re-judges what earlier versions judged (None: every day).

    Fixed by the version's first run and stored in `judge_windows`: the last `rejudge_days`
    days of the selection then (its newest day counts back). The first judge version has
    nothing to re-judge: None."""
    con.execute(ONLINE_DDL)
    return _rejudge_window(con, settings, version)


def _rejudge_window(con: duckdb.DuckDBPyConnection, settings: JudgingSettings, version: str) -> date | None:
    """`rejudge_window` on a database whose online tables exist (`planned_work` has just made
    them: the DDL once per call, not twice)."""
    stored = con.execute("SELECT rejudge_from FROM judge_windows WHERE judge_version = ?", [version]).fetchall()
    if stored:
        return stored[0][0]
    earlier = con.execute("SELECT count(*) FROM trace_judgments WHERE judge_version <> ? AND status = 'judged'",
                          [version]).fetchall()[0][0]
    newest = con.execute("SELECT max(day) FROM failure_candidates").fetchall()[0][0]
    if earlier and newest is None:  # nothing selected yet: the window is fixed by a run with traffic
        return None
    start = None if settings.rejudge_days is None or not earlier or newest is None \
        else newest - timedelta(days=settings.rejudge_days - 1)
    con.execute("INSERT OR IGNORE INTO judge_windows VALUES (?, ?, ?, now())",
                [version, start, settings.rejudge_days if start is not None else None])
    return start


# an earlier version's judged (trace, metric) on a day before the window: kept, not re-judged
_KEPT = """SELECT DISTINCT trace_id, metric FROM trace_judgments
           WHERE judge_version <> $version AND status = 'judged' AND day < $rejudge_from"""


def planned_work(con: duckdb.DuckDBPyConnection, settings: JudgingSettings, version: str) -> pd.DataFrame:
    """Selected trace × metric pairs the metric's rate draws and this judge version has not
    judged yet: errored ones are judged again, unjudgeable ones for want of an input that may
    have arrived since are looked at again (`previous_status`, `previous_reason`).

    Only the days that may hold such pairs are joined. A day × metric whose drawn candidates
    are exactly the trace ids this version has settled rows for on that day (same count, same
    xor of their hashes: one grouped scan of each table's keys, no join) has nothing due, so a
    judged history costs two grouped scans, not a join of every candidate with every
    judgement. The other days (new traffic, a recomputed selection, errored or unjudgeable
    rows, a new judge version) are planned row by row.

    A trace × metric an earlier version judged on a day before this version's re-judging
    window (`rejudge_window`) is not wanted: it keeps that verdict."""
    con.execute(ONLINE_DDL)
    if not settings.metrics:
        return pd.DataFrame(columns=_PLANNED_COLUMNS)
    start = _rejudge_window(con, settings, version)
    kept = "" if start is None else " AND (c.trace_id, {name}) NOT IN (SELECT trace_id, metric FROM kept)"
    drawn = [(_quoted(m.name), float(m.rate), _drawn(settings.salt, m)) for m in settings.metrics]
    keys = " UNION ALL ".join(f"SELECT c.day, {name} AS metric, c.trace_id FROM failure_candidates c "
                              f"WHERE {draw}{kept.format(name=name)}" for name, _, draw in drawn)
    rows = " UNION ALL ".join(
        f"""SELECT c.trace_id, c.day, c.streams, c.by_random, {name} AS metric, {rate} AS metric_rate,
                   c.inclusion_probability * {rate} AS inclusion_probability
            FROM failure_candidates c
            WHERE {draw}{kept.format(name=name)} AND EXISTS (SELECT 1 FROM open_days o
                                     WHERE o.day IS NOT DISTINCT FROM c.day AND o.metric = {name})"""
        for name, rate, draw in drawn)
    parameters = {"version": version, "may_arrive": list(MAY_ARRIVE),
                  **({} if start is None else {"rejudge_from": start})}
    return con.execute(f"""
        WITH {"" if start is None else f"kept AS ({_KEPT}),"}
        wanted AS (SELECT day, metric, count(*) AS n, bit_xor(hash(trace_id)) AS keys
                        FROM ({keys}) GROUP BY ALL),
        settled AS (SELECT day, metric, count(*) AS n, bit_xor(hash(trace_id)) AS keys FROM trace_judgments
                    WHERE judge_version = $version AND NOT {_OPEN_ROW} GROUP BY ALL),
        open_days AS (SELECT w.day, w.metric FROM wanted w
                      LEFT JOIN settled s ON s.day IS NOT DISTINCT FROM w.day AND s.metric = w.metric
                      WHERE s.n IS DISTINCT FROM w.n OR s.keys IS DISTINCT FROM w.keys),
        p AS ({rows})
        SELECT p.*, done.status AS previous_status, done.reason AS previous_reason
        FROM p LEFT JOIN (SELECT trace_id, metric, status, reason FROM trace_judgments
                          WHERE judge_version = $version AND trace_id IN (SELECT trace_id FROM p)) done
            USING (trace_id, metric)
        WHERE done.status IS NULL OR done.status = 'errored'
              OR (done.status = 'unjudgeable' AND list_contains($may_arrive, done.reason))
        ORDER BY p.day, p.trace_id, p.metric""", parameters).df()


def rejudging(con: duckdb.DuckDBPyConnection, version: str) -> dict[str, Any]:
    """What `version` re-judged of earlier versions' verdicts and what it kept, per metric
    (rows, first and last day): the bound on a judge change's bill, said."""
    con.execute(ONLINE_DDL)
    window = con.execute("SELECT rejudge_from, rejudge_days FROM judge_windows WHERE judge_version = ?",
                         [version]).fetchall()
    start, days = window[0] if window else (None, None)
    earlier = """(SELECT DISTINCT trace_id, metric FROM trace_judgments
                  WHERE judge_version <> $version AND status = 'judged')"""
    summary = """SELECT metric, count(*) AS rows, CAST(min(day) AS VARCHAR) AS first_day,
                        CAST(max(day) AS VARCHAR) AS last_day FROM ({}) GROUP BY 1 ORDER BY 1"""
    rejudged = con.execute(summary.format(f"""SELECT metric, day FROM trace_judgments
        WHERE judge_version = $version AND (trace_id, metric) IN {earlier}"""), {"version": version}).df()
    kept = kept_verdicts(con, version, start)
    kept = kept.groupby("metric").agg(rows=("trace_id", "size"), first_day=("day", "min"), last_day=("day", "max"),
                                      earlier_versions=("judge_version", lambda v: ", ".join(sorted(set(v))))
                                      ).reset_index().astype({"first_day": str, "last_day": str}) if len(kept) \
        else pd.DataFrame(columns=["metric", "rows", "first_day", "last_day", "earlier_versions"])
    return {"rejudge_from": None if start is None else str(start), "rejudge_days": days,
            "rejudged": rejudged, "kept": kept}


def kept_verdicts(con: duckdb.DuckDBPyConnection, version: str, start: date | None = None,
                  first: date | None = None, last: date | None = None) -> pd.DataFrame:
    """The earlier versions' judged rows `version` keeps (days before its re-judging window,
    no row of its own), the newest earlier version's per trace × metric; days first..last."""
    con.execute(ONLINE_DDL)
    if start is None:
        row = con.execute("SELECT rejudge_from FROM judge_windows WHERE judge_version = ?", [version]).fetchall()
        start = row[0][0] if row else None
    if start is None:
        return con.execute("SELECT * FROM trace_judgments WHERE false").df()
    return con.execute("""
        SELECT * FROM trace_judgments j
        WHERE judge_version <> $version AND status = 'judged' AND day < $start
          AND day BETWEEN coalesce($first, day) AND coalesce($last, day)
          AND NOT EXISTS (SELECT 1 FROM trace_judgments o WHERE o.judge_version = $version
                          AND o.trace_id = j.trace_id AND o.metric = j.metric)
        QUALIFY row_number() OVER (PARTITION BY trace_id, metric ORDER BY judged_at DESC) = 1""",
                       {"version": version, "start": start, "first": first, "last": last}).df()


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class TraceCase:
    trace_id: str
    query: str | None
    answer: str | None
    context: list[str]
    plan: list[dict[str, Any]]  # the planned rows of this trace
    language: str | None = None  # an aligned judge's thresholds may differ per language

    def missing(self, metric: OnlineMetric) -> str | None:
        have = {"answer": bool(self.answer and self.answer.strip()), "context": bool(self.context),
                "expected_output": False, "input": bool(self.query)}
        for need in metric.needs():
            if not have[need]:
                return MISSING[need]
        return None


def day_ranges(days: Collection[date]) -> list[tuple[datetime, datetime]]:
    """Runs of consecutive UTC days as [start, end) instants: what a day-pruned read scans."""
    ranges: list[tuple[datetime, datetime]] = []
    for day in sorted(set(days)):
        start = datetime.combine(day, clock(), tzinfo=UTC)
        if ranges and ranges[-1][1] == start:
            ranges[-1] = (ranges[-1][0], start + timedelta(days=1))
        else:
            ranges.append((start, start + timedelta(days=1)))
    return ranges


def _trace_texts(con: duckdb.DuckDBPyConnection, days: Mapping[str, date | None]) -> dict[str, tuple]:
    """trace id -> (query, answer), each trace read on its day (`days`: trace id -> its
    candidate's UTC day), one query per run of consecutive days whose range on the timestamp
    skips the other days' row groups; a trace not found there (no day, or its timestamp moved
    since it was selected) is looked for on every day."""
    select = ("SELECT trace_id, coalesce(rewritten_query, original_query), answer, language FROM raw_traces "
              "WHERE trace_id IN (SELECT unnest(?))")
    found: dict[str, tuple] = {}
    for start, end in day_ranges({d for d in days.values() if d is not None}):
        ids = [t for t, d in days.items() if d is not None and start.date() <= d < end.date()]
        found.update((row[0], row[1:]) for row in con.execute(
            select + ' AND "timestamp" >= ? AND "timestamp" < ?', [ids, start, end]).fetchall())
    missing = [t for t in days if t not in found]
    if missing:
        found.update((row[0], row[1:]) for row in con.execute(select, [missing]).fetchall())
    return found


def _day(value: Any) -> date | None:
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.date() if isinstance(value, datetime) else value


def trace_cases(con: duckdb.DuckDBPyConnection, work: pd.DataFrame) -> list[TraceCase]:
    """The judge's view of each planned trace: the query (rewritten where the app rewrote a
    follow-up), the answer and the context text that reached the LLM."""
    ids = list(dict.fromkeys(work["trace_id"]))
    traces = _trace_texts(con, {t: _day(d) for t, d in zip(work["trace_id"], work["day"], strict=True)})
    contexts = retrieval_contexts(con, ids)
    plans: dict[str, list[dict]] = {}
    for row in work.to_dict("records"):
        plans.setdefault(row["trace_id"], []).append(row)
    return [TraceCase(t, *traces.get(t, (None, None, None))[:2],
                      [c["text"] for c in contexts.get(t, []) if c.get("text")], plans[t],
                      traces.get(t, (None, None, None))[2]) for t in ids]


def still_missing(case: TraceCase, metric: OnlineMetric, item: Mapping[str, Any]) -> bool:
    """Whether a planned row was unjudgeable before and misses the same input still."""
    return item.get("previous_status") == "unjudgeable" and case.missing(metric) == item.get("previous_reason")


def without_unchanged(cases: Sequence[TraceCase], metrics: Mapping[str, OnlineMetric]) -> tuple[list[TraceCase], int]:
    """The cases with the rows that are still unjudgeable for the same reason taken out (they
    are neither rewritten nor counted as this run's work), and how many rows that was."""
    kept, unchanged = [], 0
    for case in cases:
        plan = [item for item in case.plan if not still_missing(case, metrics[item["metric"]], item)]
        unchanged += len(case.plan) - len(plan)
        if plan:
            kept.append(TraceCase(case.trace_id, case.query, case.answer, case.context, plan, case.language))
    return kept, unchanged


def judge_traces(con: duckdb.DuckDBPyConnection, judge: Judge, settings: JudgingSettings,
                 log: Log = quiet, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> JudgingReport:
    """Judge what is planned, writing `trace_judgments` rows as they arrive."""
    judge_id, version = judge_version(judge, settings.alignment)
    work = planned_work(con, settings, version)
    metrics = {m.name: m for m in settings.metrics}
    cases, unchanged = without_unchanged(trace_cases(con, work), metrics) if len(work) else ([], 0)
    run = JudgingReport(f"judge-{now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}", judge_id, version,
                        len(work) - unchanged, still_unjudgeable=unchanged)
    if not cases:
        return run
    pending: list[dict[str, Any]] = []
    flushed = [time.perf_counter()]

    def write(rows: list[dict[str, Any]], force: bool = False) -> None:
        pending.extend(rows)
        for row in rows:
            run.cost_usd += row["cost_usd"] or 0.0
            counts = run.per_metric.setdefault(row["metric"], {"judged": 0, "unjudgeable": 0, "errored": 0})
            counts[row["status"]] += 1
            setattr(run, row["status"], getattr(run, row["status"]) + 1)
            run.newly_judgeable += row.get("previous_status") == "unjudgeable" and row["status"] != "unjudgeable"
        if pending and (force or len(pending) >= settings.flush_every
                        or time.perf_counter() - flushed[0] >= settings.flush_seconds):
            store_judgments(con, pending)
            pending.clear()
            flushed[0] = time.perf_counter()

    base = {"judge_id": judge_id, "judge_version": version, "run_id": run.run_id}
    start = time.perf_counter()
    judge.open(con)
    try:
        finished = _judge_all(cases, judge, metrics, settings, base, write, now, log)
    finally:
        write([], force=True)
        judge.close(con)
    run.unfinished = run.planned - finished
    run.seconds = time.perf_counter() - start
    store_run(con, run, settings, now())
    return run


def _judge_all(cases: Sequence[TraceCase], judge: Judge, metrics: Mapping[str, OnlineMetric],
               settings: JudgingSettings, base: dict[str, Any], write: Callable[[list[dict]], None],
               now: Callable[[], datetime], log: Log) -> int:
    """Every case until the deadline, `open_cases` at once (a case's metrics and their calls
    concurrently); returns the rows finished."""
    from deepeval.test_case import LLMTestCase
    done = {"rows": 0, "cases": 0}

    async def one(case: TraceCase, gate: asyncio.Semaphore) -> None:
        async with gate:
            rows, to_measure = [], []
            for item in case.plan:
                metric = metrics[item["metric"]]
                row = {**item, **base, "threshold": settings.threshold(metric, case.language), "score": None,
                       "passed": None,
                       "reason": None, "error": None, "cost_usd": 0.0, "latency_ms": None}
                reason = case.missing(metric)
                if reason:
                    rows.append({**row, "status": "unjudgeable", "reason": reason, "judged_at": now()})
                else:
                    to_measure.append((metric, row))
            if to_measure:
                built = _metrics_for(judge, [m for m, _ in to_measure],
                                     {m.name: row["threshold"] for m, row in to_measure})
                rows += await asyncio.gather(*(_measure(built.get(m.name), test_cases[case.trace_id], row, now)
                                               for m, row in to_measure))
        write(rows)
        done["rows"] += len(rows)
        done["cases"] += 1
        if done["cases"] % 100 == 0:
            log(f"judged {done['cases']}/{len(cases)} traces")

    test_cases = {c.trace_id: LLMTestCase(input=c.query or "", actual_output=c.answer or "",
                                          retrieval_context=c.context or None) for c in cases}

    async def run_all() -> None:
        try:
            await judge_all()
        finally:
            await judge.end_calls()

    async def judge_all() -> None:
        gate, start, left = asyncio.Semaphore(open_cases(settings, judge)), time.perf_counter(), 0
        for first in range(0, len(cases), settings.prepare_every):
            chunk = cases[first:first + settings.prepare_every]
            judge.prepare([test_cases[c.trace_id] for c in chunk])  # e.g. one embedding batch
            remaining = None if settings.deadline_seconds is None else \
                settings.deadline_seconds - (time.perf_counter() - start)
            tasks = [asyncio.create_task(one(c, gate)) for c in chunk]
            _, unfinished = await asyncio.wait(tasks, timeout=max(remaining, 0.0) if remaining is not None
                                               else None)
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)
            if unfinished:
                left = len(unfinished) + len(cases) - first - len(chunk)
                break
        if left:
            log(f"deadline ({settings.deadline_seconds:g} s): {left} traces left for the next run")

    asyncio.run(run_all())
    return done["rows"]


def open_cases(settings: JudgingSettings, judge: Judge) -> int:
    """Cases judged at once: the rule the regression eval follows too (`cases_at_once`)."""
    return cases_at_once(settings.concurrency, judge)


def _metrics_for(judge: Judge, wanted: Sequence[OnlineMetric],
                 thresholds: Mapping[str, float | None]) -> dict[str, Any]:
    """Fresh DeepEval metrics of the judge, by name (GEval ones from the online criteria), with
    the thresholds the case's verdicts are given with (`thresholds`: an aligned judge's may be
    its language's), so that a metric's own pass / fail (which asks the judge for a reason only
    when failing) is the row's."""
    geval = [{**m.geval, "threshold": thresholds[m.name] if thresholds[m.name] is not None else 0.5}
             for m in wanted if m.geval is not None]
    thresholds = {m.name: thresholds[m.name] for m in wanted if m.geval is None}
    return {metric.__name__: metric for metric in judge.metrics(thresholds, geval=geval)
            if metric.__name__ in {m.name for m in wanted}}


async def _measure(metric: Any, case: Any, row: dict[str, Any], now: Callable[[], datetime]) -> dict[str, Any]:
    if metric is None:
        return {**row, "status": "unjudgeable", "reason": "unjudgeable: this judge has no such metric",
                "judged_at": now()}
    start = time.perf_counter()
    with metered() as cost:
        try:
            score = await metric.a_measure(case, _show_indicator=False)
            error = str(metric.error)[:500] if metric.error else None
        except Exception as exc:  # a judge outage, a bad reply: errored, never passed
            score, error = None, f"{type(exc).__name__}: {exc}"[:500]
    latency = (time.perf_counter() - start) * 1000
    if error is None and score is not None and not (isinstance(score, (int, float))
                                                    and math.isfinite(score) and 0.0 <= score <= 1.0):
        error = f"score {score!r} is not a number within [0, 1]"
    if error is not None or score is None:
        return {**row, "status": "errored", "error": error or "no score", "cost_usd": cost.usd,
                "latency_ms": latency, "judged_at": now()}
    threshold = row["threshold"]
    return {**row, "status": "judged", "score": float(score), "reason": str(metric.reason or "")[:2000],
            "passed": None if threshold is None else bool(score >= threshold),
            "cost_usd": cost.usd, "latency_ms": latency, "judged_at": now()}


JUDGMENT_COLUMNS = ("trace_id", "day", "metric", "judge_id", "judge_version", "status", "score",
                    "threshold", "passed", "reason", "error", "streams", "by_random",
                    "inclusion_probability", "metric_rate", "cost_usd", "latency_ms", "run_id",
                    "judged_at")


# the columns' types, so that the rows go to DuckDB as Arrow columns (a pandas frame of Python
# objects is converted value by value: a third of the insert's CPU); the rest are strings but
# judged_at, whose type Arrow infers (None)
_JUDGMENT_TYPES = {"day": pa.date32(), "score": pa.float64(), "threshold": pa.float64(), "passed": pa.bool_(),
                   "streams": pa.list_(pa.string()), "by_random": pa.bool_(),
                   "inclusion_probability": pa.float64(), "metric_rate": pa.float64(),
                   "cost_usd": pa.float64(), "latency_ms": pa.float64(), "judged_at": None}


def store_judgments(con: duckdb.DuckDBPyConnection, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert rows; a row replaces the same trace × metric × judge version (an errored retry)."""
    values = {c: [r.get(c) for r in rows] for c in JUDGMENT_COLUMNS}
    values["day"] = [_day(d) for d in values["day"]]
    values["streams"] = [list(s) if s is not None else [] for s in values["streams"]]
    # from_pandas: a NaN is NULL, as it was from a pandas frame
    frame = pa.table({c: pa.array(v, _JUDGMENT_TYPES.get(c, pa.string()), from_pandas=True)
                      for c, v in values.items()})
    con.register("_judgments", frame)
    try:
        con.execute("INSERT OR REPLACE INTO trace_judgments BY NAME SELECT * FROM _judgments")
    finally:
        con.unregister("_judgments")


def store_run(con: duckdb.DuckDBPyConnection, run: JudgingReport, settings: JudgingSettings,
              finished_at: datetime) -> None:
    con.execute("""INSERT INTO judgment_runs (run_id, finished_at, judge_id, judge_version, planned, judged,
                       unjudgeable, errored, unfinished, seconds, cost_usd, over_error_budget, per_metric,
                       still_unjudgeable, newly_judgeable)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""", [
        run.run_id, finished_at, run.judge_id, run.judge_version, run.planned, run.judged,
        run.unjudgeable, run.errored, run.unfinished, run.seconds, run.cost_usd,
        run.over_error_budget(settings.max_error_rate), json.dumps(run.per_metric),
        run.still_unjudgeable, run.newly_judgeable])


def judgment_summary(con: duckdb.DuckDBPyConnection, version: str) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Per metric of one judge version: judged, unjudgeable, errored, mean score and the pass
    rate of the selected set (biased on purpose: the streams over-draw failures); the reasons
    cases were unjudgeable; and the rows of every version."""
    summary = con.execute("""
        SELECT metric, count(*) FILTER (status = 'judged') AS judged,
               count(*) FILTER (status = 'unjudgeable') AS unjudgeable,
               count(*) FILTER (status = 'errored') AS errored,
               round(avg(score), 3) AS mean_score, round(avg(passed::INT), 3) AS pass_rate_selected_biased
        FROM trace_judgments WHERE judge_version = ? GROUP BY 1 ORDER BY 1""", [version]).df()
    reasons = con.execute("""SELECT reason, count(*) AS n FROM trace_judgments
                             WHERE judge_version = ? AND status = 'unjudgeable' GROUP BY 1 ORDER BY 2 DESC""",
                          [version]).df()
    return summary, reasons, con.execute("SELECT count(*) FROM trace_judgments").fetchall()[0][0]
