"""A small database with every table the dashboard reads: 14 days of traffic with feedback,
versions and costs, judged quality for the last 10 (trace_judgments, online_quality,
online_cost), one golden release and two evals, and production strings that are hostile."""

from datetime import date, datetime, timedelta

import duckdb
import numpy as np
import pandas as pd

from rag_loop.store.ddl import DRIFT_DAY_COLUMNS, EVAL_DDL, GOLDEN_RELEASES_COLUMNS, ONLINE_DDL
from rag_loop.store.tables import create_tables

FIRST = date(2026, 11, 1)
DAYS = 14
HOSTILE = '<script>alert("x")</script><img src="http://192.0.2.1/x.png">\u202e'
METRICS = ("Faithfulness", "Answer Relevancy")


def build(con: duckdb.DuckDBPyConnection, judged_days: int = 10) -> None:
    create_tables(con)
    con.execute(ONLINE_DDL)
    con.execute(EVAL_DDL)
    for table in ("online_quality", "online_cost"):
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} (day DATE, {DRIFT_DAY_COLUMNS[table]})")
    con.execute(f"CREATE TABLE IF NOT EXISTS golden_releases ({GOLDEN_RELEASES_COLUMNS})")
    con.execute("CREATE TABLE IF NOT EXISTS failure_candidates (trace_id VARCHAR, streams VARCHAR[])")
    con.execute("CREATE TABLE IF NOT EXISTS trace_signals (trace_id VARCHAR, day DATE, language VARCHAR, "
                "tenant VARCHAR, query_type VARCHAR, prompt_version VARCHAR, rag_version VARCHAR, "
                "index_version VARCHAR, risk_level VARCHAR)")
    rng = np.random.default_rng(7)
    traces, feedback, judgments, signals = [], [], [], []
    for d in range(DAYS):
        day = FIRST + timedelta(days=d)
        prompt = "p1" if d < 7 else HOSTILE
        for i in range(40 + 3 * d):
            trace_id = f"t{d:02d}-{i:03d}"
            at = datetime(day.year, day.month, day.day, 8) + timedelta(minutes=7 * i)
            traces.append((trace_id, f"{at.isoformat()}+00:00", "how many leave days?", "rag-1", prompt, "idx-1",
                           float(rng.gamma(4, 300)), 0.002, i % 13 == 0, "timeout" if i % 17 == 0 else "ok"))
            signals.append((trace_id, day, "en" if i % 3 else "vi", "acme", "factual", prompt, "rag-1", "idx-1",
                            "low"))
            if i % 9 == 0:
                feedback.append((trace_id, "negative" if i % 2 else "positive", day))
            if d >= DAYS - judged_days and i % 2 == 0:
                for metric in METRICS:
                    passed = bool(rng.random() < (0.93 if metric == "Faithfulness" and d < 10 else 0.8))
                    judgments.append((trace_id, day, metric, "j1", "v1", "judged", 0.9 if passed else 0.2, 0.5,
                                      passed, True, 1.0, 0.0004, f"{at.isoformat()}+00:00"))
    # inserted from data frames: executemany binds row by row (two CPU-seconds for these rows)
    _insert(con, "raw_traces", traces, ["trace_id", "timestamp", "original_query", "rag_version", "prompt_version",
                                        "index_version", "latency_ms", "cost_usd", "is_fallback", "status"])
    _insert(con, "trace_feedback", feedback, ["trace_id", "rating", "day"])
    _insert(con, "trace_signals", signals, ["trace_id", "day", "language", "tenant", "query_type", "prompt_version",
                                            "rag_version", "index_version", "risk_level"])
    _insert(con, "trace_judgments", judgments, ["trace_id", "day", "metric", "judge_id", "judge_version", "status",
                                                "score", "threshold", "passed", "by_random", "inclusion_probability",
                                                "cost_usd", "judged_at"])
    con.execute("UPDATE trace_judgments SET streams = ['random']")
    con.execute("INSERT INTO failure_candidates SELECT DISTINCT trace_id, ['random'] FROM trace_judgments")
    con.execute("INSERT INTO judgment_runs (run_id, finished_at, judge_id, judge_version, planned, judged) "
                "VALUES ('r1', '2026-11-15 02:00:00+00', 'j1', 'v1', 10, 10)")
    con.execute("""
        INSERT INTO online_quality (day, slice, slice_value, metric, estimator, kind, n, passes, pass_rate, ci_low,
                                    ci_high, population_n, judge_version)
        SELECT day, slice, slice_value, metric, 'random', 'estimate', count(*), sum(passed::INT),
               avg(passed::INT), greatest(avg(passed::INT) - 0.08, 0), least(avg(passed::INT) + 0.06, 1), 0, 'v1'
        FROM (SELECT j.*, 'all' AS slice, 'all' AS slice_value FROM trace_judgments j
              UNION ALL SELECT j.*, 'language', s.language FROM trace_judgments j JOIN trace_signals s USING (trace_id)
              UNION ALL SELECT j.*, 'prompt_version', s.prompt_version FROM trace_judgments j
                        JOIN trace_signals s USING (trace_id))
        GROUP BY ALL""")
    con.execute("""
        INSERT INTO online_cost (day, requests, app_cost_usd, judged_requests, eval_cost_usd, eval_cost_per_request)
        SELECT j.day, any_value(r.n), any_value(r.cost), count(DISTINCT trace_id), sum(cost_usd),
               sum(cost_usd) / any_value(r.n)
        FROM trace_judgments j JOIN (SELECT CAST(timezone('UTC', "timestamp") AS DATE) AS day, count(*) AS n,
                                            sum(cost_usd) AS cost FROM raw_traces GROUP BY 1) r USING (day)
        GROUP BY j.day""")
    con.execute("INSERT INTO golden_releases (version, created_at, goldens) "
                "VALUES ('v0001', '2026-11-09 10:00:00+00', 12)")
    con.execute("INSERT INTO eval_runs (run_id, started_at, release_version, blocked, cases, cost_usd) VALUES "
                "('eval-a', '2026-11-09 11:00:00+00', 'v0001', false, 12, 0.01), "
                "('eval-b', '2026-11-12 11:00:00+00', 'v0001', true, 12, 0.01)")


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[tuple], columns: list[str]) -> None:
    """`rows` into `table`'s `columns`, cast to the table's types by DuckDB's insert."""
    frame = pd.DataFrame(rows, columns=columns)  # noqa: F841 - read by name in the statement
    names = ", ".join(f'"{c}"' for c in columns)
    con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM frame")
