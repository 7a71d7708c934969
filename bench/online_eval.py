"""Online evaluation: are the estimates honest, and is the judge fast enough?

    python bench/online_eval.py [--seeds 120] [--remote-traces 160]

1. Estimates. Every trace of the demo traffic (14 days) is judged once with the offline judge:
   that is the population truth per day and metric. Then, for each seed, the selection stage
   draws its streams anew (salt = seed) and the day's pass rate is estimated from the judged
   traces it selected: the random stream alone (Wilson) and Horvitz-Thompson over every
   stream. Prints bias and how often the 95 % interval holds the truth (goal 93-97 %), beside
   the naive selected-set rate (biased on purpose).
2. Offline throughput: traces/s for Faithfulness + Answer Relevancy + Contextual Relevancy
   (goal >= 500/s on 2 cores), against a bare word-overlap scorer of the same cases in the
   same process.
3. Remote throughput: the LLM judge (DeepEval's metrics, reasons included) against a local
   stand-in that answers in 200 ms, 16 traces in flight (goal >= 40 traces/s), Faithfulness
   alone and the three metrics, then with 15 % of calls refused (429, 500, 503, stalls): no
   case may be lost.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the stand-in judge server lives with the tests

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from sklearn.metrics import cohen_kappa_score  # noqa: E402

from rag_loop.evaluation.judges.llm import LlmJudge  # noqa: E402
from rag_loop.evaluation.judges.offline import OfflineJudge  # noqa: E402
from rag_loop.evaluation.settings import LlmJudgeSettings  # noqa: E402
from rag_loop.ingest import ingest_directory  # noqa: E402
from rag_loop.ingest.documents import load_knowledge_base  # noqa: E402
from rag_loop.online.judgments import (  # noqa: E402
    JudgingSettings,
    OnlineMetric,
    judge_traces,
    planned_work,
    trace_cases,
)
from rag_loop.online.quality import OnlineQualitySettings, quality_table  # noqa: E402
from rag_loop.selection.sampling import SamplingPolicy, select_candidates  # noqa: E402
from rag_loop.selection.signals import SLICE_COLUMNS, SignalSettings, compute_signals  # noqa: E402
from rag_loop.store.tables import create_tables  # noqa: E402
from tests.helpers.standin_openai import StandIn  # noqa: E402

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


def remote_throughput(con: duckdb.DuckDBPyConnection, traces: int, flaky: float, metrics: list[OnlineMetric],
                      in_flight: int = 16) -> tuple[float, int, int, int]:
    """(traces/s, judged, errored, refused calls) of the LLM judge on the stand-in (200 ms); a
    fresh model name each time, so that no reply comes from an earlier run's cache."""
    con.execute("CREATE OR REPLACE TABLE failure_candidates AS SELECT trace_id, day, ['random'] AS streams, "
                "true AS by_random, 1.0 AS inclusion_probability FROM trace_signals WHERE trace_id IN "
                "(SELECT trace_id FROM trace_chunks) ORDER BY hash(trace_id) LIMIT ?", [traces])
    con.execute("DELETE FROM trace_judgments")
    with StandIn() as server:
        server.delay, server.flaky, server.stall_seconds = 0.2, flaky, 3.0
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model=f"stand-in-{time.time_ns()}",
                                          timeout_seconds=2.0, max_retries=6, max_in_flight=4 * in_flight))
        start = time.perf_counter()
        report = judge_traces(con, judge, JudgingSettings(metrics, concurrency=in_flight))
        seconds = time.perf_counter() - start
        refused = len(server.refused)
    judged_traces = con.execute("SELECT count(DISTINCT trace_id) FROM trace_judgments "
                                "WHERE status = 'judged'").fetchall()[0][0]
    return judged_traces / seconds, report.judged, report.errored, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=120)
    parser.add_argument("--remote-traces", type=int, default=160)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        con = demo_database(Path(folder) / "bench.duckdb")
        verdicts, seconds, traces = judge_everything(con)
        bare = bare_overlap_seconds(con)
        print("judge against the demo's truth (outcome correct vs wrong / wrong_prompt / stale):")
        print(against_truth(verdicts).round(3).to_string())
        print(f"offline judge, 3 metrics: {traces} traces in {seconds:.2f} s = {traces / seconds:.0f} traces/s "
              f"(goal >= 500); bare word overlap {traces / bare:.0f} traces/s, ratio {seconds / bare:.0f}x")
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
        print("\nremote judge on a 200 ms stand-in, 16 traces in flight (goal >= 40 traces/s, no case lost):")
        for metrics in (METRICS[:1], METRICS):
            for flaky in (0.0, 0.15):
                rate, judged, errored, refused = remote_throughput(con, args.remote_traces, flaky, metrics)
                print(f"  {' + '.join(m.name for m in metrics)}, {flaky:.0%} of calls refused: "
                      f"{rate:.1f} traces/s; {judged} judgements, {errored} errored, {refused} refusals retried")
        con.close()


if __name__ == "__main__":
    main()
