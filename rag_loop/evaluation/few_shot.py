"""Few-shot examples for an LLM judge from curators' grades (issue 45, item 2; seed 004 §15).

What the offline judge learns from grades is a threshold (`alignment`); an LLM judge can be
shown the graded cases themselves. Per metric, a metric's graded traces are split (seeded, by
trace) into an *example pool* and *held-out* grades. Up to `per_metric` examples are drawn from
the pool, curators' fails and passes alike; the judge with those examples in its verdict prompt
and the judge without them both judge the held-out traces, and their verdicts are compared with
the curators' there (Cohen's kappa, the paired bootstrap's lower bound of the gain). A trace
whose grade is an example is never among the grades that measure it, and the examples
published are exactly the ones measured. They are adopted only where the gain's lower bound is
above 0.

Published examples form a `FewShot` (an id over what it shows); an LLM judge given one says so
in `describe()`, so it is a new judge version (`alignment.judge_version`): the judge change
protocol applies (overlap window, scale shift, never together with a RAG change), and its
replies are cached apart (the prompts differ).

What a stand-in judge can show is the mechanics (the examples reach the prompt; the figures
are on held-out grades only), not that a real model follows them: that is measured on its
own grades, by the same function, with the real endpoint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pandas as pd

from rag_loop.evaluation.agreement import binary_kappa, judge_grades
from rag_loop.evaluation.alignment import paired_gain_low
from rag_loop.evaluation.judges.examples import FewShot, GradeExample
from rag_loop.store.tables import has_table
from rag_loop.store.traces import retrieval_contexts

if TYPE_CHECKING:
    from rag_loop.evaluation.judges.base import Judge

@dataclass(frozen=True)
class FewShotSettings:
    per_metric: int = 4  # examples shown per metric, fails and passes alternating
    held_out_share: float = 0.5  # of a metric's graded traces, measured on and never shown
    min_held_out: int = 20  # held-out grades a measurement needs
    seed: int = 0



def few_shot_id(source_version: str, examples: Mapping[str, Sequence[GradeExample]]) -> str:
    text = json.dumps([source_version, sorted((m, [(e.trace_id, e.passed) for e in ex])
                                               for m, ex in examples.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def graded_cases(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The current labels' grades with a curator's verdict, with what the metric looks at:
    the query (rewritten where the app rewrote it), the answer and the context's texts."""
    grades = judge_grades(con).dropna(subset=["human_passed"])
    if grades.empty or not has_table(con, "raw_traces"):
        return grades.assign(query=pd.Series(dtype=str), answer=pd.Series(dtype=str), context=pd.Series(dtype=object))
    ids = list(dict.fromkeys(grades["trace_id"]))
    texts = {t: (q, a) for t, q, a in con.execute(
        "SELECT trace_id, any_value(coalesce(rewritten_query, original_query)), any_value(answer) FROM raw_traces "
        "WHERE trace_id IN (SELECT unnest(?)) GROUP BY 1", [ids]).fetchall()}
    contexts = retrieval_contexts(con, ids)
    grades["query"] = [texts.get(t, (None, None))[0] or "" for t in grades["trace_id"]]
    grades["answer"] = [texts.get(t, (None, None))[1] or "" for t in grades["trace_id"]]
    grades["context"] = [tuple(c["text"] for c in contexts.get(t, []) if c.get("text")) for t in grades["trace_id"]]
    return grades


def split_traces(trace_ids: Sequence[str], held_out_share: float, seed: int) -> tuple[set[str], set[str]]:
    """(example pool, held-out) by a seeded hash of each trace id: a trace is on one side only."""
    held = {t for t in trace_ids
            if int(hashlib.sha256(f"{seed}:{t}".encode()).hexdigest()[:8], 16) / 2 ** 32 < held_out_share}
    return set(trace_ids) - held, held


def choose_examples(pool: pd.DataFrame, per_metric: int, seed: int) -> tuple[GradeExample, ...]:
    """Up to `per_metric` graded traces of the pool, curators' fails and passes alternating
    (fails first: what the judge misses), each trace once, in a seeded order."""
    pool = pool.drop_duplicates("trace_id")
    order = np.random.default_rng(seed).permutation(len(pool))
    rows = [pool.iloc[i] for i in order]
    fails = [r for r in rows if not bool(r["human_passed"])]
    passes = [r for r in rows if bool(r["human_passed"])]
    chosen = []
    while len(chosen) < per_metric and (fails or passes):
        for side in (fails, passes):
            if side and len(chosen) < per_metric:
                chosen.append(side.pop(0))
    return tuple(GradeExample(str(r["trace_id"]), str(r["query"]), str(r["answer"]), tuple(r["context"]),
                              bool(r["human_passed"])) for r in chosen)


FEW_SHOT_COLUMNS = ("few_shot_id VARCHAR, metric VARCHAR, source_version VARCHAR, examples BIGINT, "
                    "example_traces VARCHAR[], held_out BIGINT, kappa_before DOUBLE, before_low DOUBLE, "
                    "before_high DOUBLE, kappa_after DOUBLE, after_low DOUBLE, after_high DOUBLE, gain DOUBLE, "
                    "gain_low DOUBLE, errored BIGINT, adopted BOOLEAN, why VARCHAR, computed_at TIMESTAMPTZ")


def measure_few_shot(grades: pd.DataFrame, make_judge: Callable[[FewShot | None], Judge],
                     thresholds: Mapping[str, float | None], settings: FewShotSettings = FewShotSettings(),
                     concurrency: int = 8) -> tuple[pd.DataFrame, FewShot]:
    """Per metric graded (and judged by `make_judge`'s metrics): the examples drawn from the pool,
    the held-out kappa of the judge without and with them, and whether they are adopted; and the
    `FewShot` of the adopted examples. Both judges score the held-out traces only."""
    from deepeval.test_case import LLMTestCase

    from rag_loop.evaluation.runner import Case

    rows, candidates, held_rows, versions = [], {}, {}, set()
    for metric, graded in grades.groupby("metric", sort=True):
        metric = str(metric)
        if metric not in thresholds or thresholds[metric] is None:
            continue  # a metric the judge gives no verdict for
        version = str(graded.groupby("judge_version").size().sort_values(kind="stable").index[-1])
        graded = graded[graded["judge_version"] == version].drop_duplicates("trace_id", keep="last")
        versions.add(version)
        pool_ids, held_ids = split_traces(list(graded["trace_id"]), settings.held_out_share, settings.seed)
        candidates[metric] = choose_examples(graded[graded["trace_id"].isin(pool_ids)], settings.per_metric,
                                             settings.seed)
        held_rows[metric] = graded[graded["trace_id"].isin(held_ids)]
    source = ",".join(sorted(versions))
    trial = FewShot(few_shot_id(source, candidates), source, candidates)
    adopted: dict[str, tuple[GradeExample, ...]] = {}
    for metric, held in held_rows.items():
        shown = candidates[metric]
        row = {"metric": metric, "source_version": source, "examples": len(shown),
               "example_traces": [e.trace_id for e in shown], "held_out": len(held), "errored": 0,
               "adopted": False, **dict.fromkeys(("kappa_before", "before_low", "before_high", "kappa_after",
                                                  "after_low", "after_high", "gain", "gain_low"))}
        human = held["human_passed"].astype(bool).to_numpy()
        if len(held) < settings.min_held_out:
            rows.append({**row, "why": f"{len(held)} held-out grades, fewer than the {settings.min_held_out} "
                                       "a measurement needs"})
            continue
        if not shown or len({e.passed for e in shown}) < 2:
            rows.append({**row, "why": "the example pool has no fail and pass to show"})
            continue
        cases = [Case({"name": t}, LLMTestCase(input=q or "", actual_output=a or "", retrieval_context=list(c) or None))
                 for t, q, a, c in held[["trace_id", "query", "answer", "context"]].itertuples(index=False)]
        without = _verdicts(make_judge(None), cases, metric, thresholds[metric], concurrency)
        with_them = _verdicts(make_judge(FewShot(trial.few_shot_id, source, {metric: shown})), cases, metric,
                              thresholds[metric], concurrency)
        errored = int((without["errored"].fillna(True) | with_them["errored"].fillna(True)).sum())
        ok = ~(without["errored"].fillna(True).to_numpy() | with_them["errored"].fillna(True).to_numpy())
        before = without["passed"].fillna(False).astype(bool).to_numpy()[ok]
        after = with_them["passed"].fillna(False).astype(bool).to_numpy()[ok]
        truth = human[ok]
        k_before, k_after = binary_kappa(before, truth, settings.seed), binary_kappa(after, truth, settings.seed)
        gain = None if k_before.kappa is None or k_after.kappa is None else k_after.kappa - k_before.kappa
        gain_low = paired_gain_low(before, after, truth, settings.seed) if len(truth) else None
        row.update(held_out=int(ok.sum()), errored=errored, kappa_before=k_before.kappa, before_low=k_before.ci_low,
                   before_high=k_before.ci_high, kappa_after=k_after.kappa, after_low=k_after.ci_low,
                   after_high=k_after.ci_high, gain=gain, gain_low=gain_low)
        if gain_low is not None and gain_low > 0 and gain is not None and gain > 0:
            adopted[metric] = shown
            rows.append({**row, "adopted": True, "why": f"held-out kappa {k_before.kappa or 0:.2f} -> "
                                                        f"{k_after.kappa:.2f} on {int(ok.sum())} grades"})
        else:
            rows.append({**row, "why": "no gain beyond chance on held-out grades: no examples shown"})
    published = FewShot(few_shot_id(source, adopted), source, adopted)
    columns = [c.split()[0] for c in FEW_SHOT_COLUMNS.split(", ")][1:-1]
    return pd.DataFrame(rows, columns=columns).assign(few_shot_id=published.few_shot_id), published


def _verdicts(judge: Judge, cases: Sequence[Any], metric: str, threshold: float | None,
              concurrency: int) -> pd.DataFrame:
    """The judge's result per case (by trace id, in the cases' order): passed, errored."""
    from rag_loop.evaluation.judges.base import cases_at_once
    from rag_loop.evaluation.runner import score_cases

    def make_metrics(case: Any) -> list[Any]:
        return [m for m in judge.metrics({metric: threshold}, []) if m.__name__ == metric]

    run = score_cases(cases, make_metrics, cases_at_once(concurrency, judge), end_calls=judge.end_calls)
    return run.results.set_index("golden").reindex([c.golden["name"] for c in cases])


def store_few_shot(con: duckdb.DuckDBPyConnection, table: pd.DataFrame, few_shot: FewShot) -> None:
    """Append a measurement to `judge_few_shot`, and the adopted examples to
    `judge_few_shot_examples` (what `load_few_shot` gives a judge back)."""
    con.execute(f"CREATE TABLE IF NOT EXISTS judge_few_shot ({FEW_SHOT_COLUMNS})")
    con.execute("""CREATE TABLE IF NOT EXISTS judge_few_shot_examples (few_shot_id VARCHAR, source_version VARCHAR,
                   metric VARCHAR, position INTEGER, trace_id VARCHAR, query VARCHAR, answer VARCHAR,
                   context VARCHAR[], passed BOOLEAN)""")
    con.execute("DELETE FROM judge_few_shot WHERE few_shot_id = ?", [few_shot.few_shot_id])
    con.execute("DELETE FROM judge_few_shot_examples WHERE few_shot_id = ?", [few_shot.few_shot_id])
    if len(table):
        con.register("_few_shot", table)
        try:
            con.execute("INSERT INTO judge_few_shot BY NAME SELECT *, now() AS computed_at FROM _few_shot")
        finally:
            con.unregister("_few_shot")
    con.executemany("INSERT INTO judge_few_shot_examples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
        (few_shot.few_shot_id, few_shot.source_version, metric, i, e.trace_id, e.query, e.answer,
         list(e.context), e.passed) for metric, ex in few_shot.examples.items() for i, e in enumerate(ex)])


def load_few_shot(con: duckdb.DuckDBPyConnection, wanted: str) -> FewShot | None:
    """Stored examples by id, or the newest adopted ("latest"); None for "" or nothing adopted."""
    if not wanted:
        return None
    if not has_table(con, "judge_few_shot_examples"):
        raise ValueError(f"few-shot {wanted!r}: no judge_few_shot_examples table yet")
    if wanted == "latest":
        found = con.execute("SELECT few_shot_id FROM judge_few_shot WHERE adopted "
                            "ORDER BY computed_at DESC LIMIT 1").fetchall()
        if not found:
            return None
        wanted = found[0][0]
    rows = con.execute("SELECT source_version, metric, trace_id, query, answer, context, passed "
                       "FROM judge_few_shot_examples WHERE few_shot_id = ? ORDER BY metric, position",
                       [wanted]).fetchall()
    if not rows:
        raise ValueError(f"few-shot {wanted!r} has no stored examples")
    examples: dict[str, list[GradeExample]] = {}
    for _, metric, trace_id, query, answer, context, passed in rows:
        examples.setdefault(metric, []).append(GradeExample(trace_id, query, answer, tuple(context or ()), passed))
    return FewShot(wanted, rows[0][0], {m: tuple(e) for m, e in examples.items()})
