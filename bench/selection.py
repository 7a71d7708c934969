"""Signals and selection over N stored traces, beside a bare DuckDB scan as the reference; what
the daily budget does to each stream and to the random stream's quality estimate.

    python bench/selection.py [--traces 1000000] [--days 14] [--workdir bench/out]
                              [--no-reference] [--estimator-check] [--database HOME_DB]

Builds a DuckDB file of N demo-shaped traces with SQL (sessions of 1-3 turns, rephrases,
5 chunks each, feedback, timeouts, two versions of each document) spread over `--days` UTC
days, then times `compute_signals` + `select_candidates` (target: under 5 s for 1,000,000
traces) and, for information, `estimate_rates`. The reference is a bare `read_json` of the
ingestion benchmark's file of the same size, timed in the same process (written first if
missing; `--no-reference` skips it).

The selection runs twice, with the rule before issue 42 (`random_budget_share=None`: the
random stream never thinned) and with the default policy; for each, per day: candidates per
stream, the recorded random rate, days over the capacity, and the Wilson interval width of
the random stream's any-signal rate (one day, and a 7-day window as online_quality pools it).

`--estimator-check`: the realized design against the recorded probabilities, on synthetic
days of 1,000 / 2,000 / 6,000 traces (under, at and over the random stream's cap at the
default policy), each day an independent replicate: the mean error of the random stream's
Horvitz–Thompson estimate (Σ failed / p_random over the day's traces) with its standard
error, the same with p = k/N on the days the cap cut (the other rule considered), and how
often the random stream's Wilson interval covers the day's rate.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import duckdb
import numpy as np
from ingest import write_traces

from rag_loop.selection.estimates import estimate_rates, wilson_interval
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SIGNALS, SignalSettings, compute_signals
from rag_loop.store.ddl import utc_day
from rag_loop.store.tables import create_tables

QUERIES = ["how many leave days do I get", "how many days of leave do i get",
           "what is the password rotation period", "ERR-PAY-942 meaning",
           "Nhân viên được nghỉ phép bao nhiêu ngày?", "bản cho sg thì sao?",
           "report a security incident"]


def build_database(con: duckdb.DuckDBPyConnection, count: int, days: int = 14) -> None:
    """N traces over `days` days in sessions of up to three turns a few seconds apart, with
    chunks and feedback."""
    session_every = 3 * (86400 * days - 60) / count  # seconds between sessions of three turns, 20 s apart
    create_tables(con)
    quoted = ", ".join("'" + q.replace("'", "''") + "'" for q in QUERIES)
    con.execute(f"""
        INSERT INTO raw_traces BY NAME
        SELECT 'tr-' || i AS trace_id, 's-' || (i // 3) AS session_id, i % 3 + 1 AS turn_id,
               TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_seconds((i // 3) * {session_every!r} + (i % 3) * 20)
                   AS "timestamp",
               [{quoted}][CAST(hash(i, 'q') % {len(QUERIES)} AS BIGINT) + 1] AS original_query,
               CASE WHEN hash(i, 'f') % 100 < 5 THEN 'Sorry, I do not know.'
                    ELSE 'Fifteen days. [doc-' || (i % 40) || '@v2#c0]' END AS answer,
               CASE WHEN hash(i, 'c') % 100 < 3 THEN [] ELSE ['doc-' || (i % 40) || '@v2#c0'] END
                   AS citations,
               CASE WHEN hash(i, 't') % 100 < 1 THEN 'timeout' ELSE 'ok' END AS status,
               hash(i, 'f') % 100 < 5 AS is_fallback, 200 + hash(i, 'l') % 9000 AS latency_ms,
               ['en', 'vi'][i % 2 + 1] AS language, ['acme', 'globex', 'initech'][i % 3 + 1] AS tenant,
               ['faq', 'policy', 'security', 'payment'][CAST(hash(i, 'k') % 4 AS BIGINT) + 1] AS query_type,
               ['low', 'medium', 'high'][CAST(hash(i, 'r') % 3 AS BIGINT) + 1] AS risk_level,
               'rag-v12' AS rag_version, ['qa-v3', 'qa-v4'][i % 2 + 1] AS prompt_version,
               'kb-1' AS index_version
        FROM range({count}) r(i)""")
    con.execute(f"""
        INSERT INTO trace_chunks BY NAME
        SELECT t.trace_id, 'doc-' || ((n + k) % 40) AS doc_id,
               'doc-' || ((n + k) % 40) || '@v' || (1 + (hash(n, k) % 50 > 0)::INT) || '#c' || k
                   AS chunk_id,
               'v' || (1 + (hash(n, k) % 50 > 0)::INT) AS doc_version,
               1 - k * 0.1 AS score, k + 1 AS rank, (hash(n, k, 'r') % 1000) / 1000 AS rerank_score,
               k + 1 AS rerank_rank, k < 2 AS selected, day
        FROM (SELECT trace_id, CAST(substr(trace_id, 4) AS BIGINT) AS n, {utc_day()} AS day FROM raw_traces
              WHERE NOT is_fallback) t, range(5) c(k)""")
    con.execute(f"""
        INSERT INTO trace_feedback BY NAME
        SELECT trace_id, CASE WHEN hash(trace_id, 'p') % 3 = 0 THEN 'positive' ELSE 'negative' END AS rating,
               'incorrect' AS category, {utc_day()} AS day
        FROM raw_traces WHERE hash(trace_id, 'fb') % 100 < 6""")
    con.execute("""
        INSERT INTO documents (doc_id, version, title, language, source_updated_at, indexed_at)
        SELECT 'doc-' || d, 'v' || v, 'Document ' || d, 'en',
               TIMESTAMPTZ '2026-10-01 00:00:00+00' + to_days(CAST((v - 1) * (30 + d % 10) AS INTEGER)),
               NULL
        FROM range(40) a(d), range(1, 3) b(v)""")


BEFORE = SamplingPolicy(random_budget_share=None)  # the rule before issue 42
AFTER = SamplingPolicy()  # the default: the random stream at most half the capacity


def per_day_streams(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy) -> dict[str, object]:
    """Per day, candidates per stream (min / mean / max over the days), the recorded random
    rate, and the days over the capacity."""
    rows = con.sql("""
        SELECT count(*) AS selected, count(*) FILTER (by_random) AS random,
               count(*) FILTER (by_bad_signal) AS bad_signal, count(*) FILTER (by_risk) AS risk,
               count(*) FILTER (by_novelty) AS novelty,
               count(*) FILTER (NOT by_random) AS diagnostic_only, max(p_random) AS p_random
        FROM failure_candidates GROUP BY day""").df()
    capacity = policy.daily_capacity()
    figures: dict[str, object] = {
        column: f"{rows[column].min():,} / {rows[column].mean():,.1f} / {rows[column].max():,}"
        for column in ("selected", "random", "bad_signal", "risk", "novelty", "diagnostic_only")}
    figures["p_random"] = f"{rows.p_random.min():.5f} .. {rows.p_random.max():.5f}"
    figures["days over capacity"] = f"{int((rows.selected > capacity).sum())} of {len(rows)} (capacity {capacity})"
    figures["judging $/day (mean)"] = f"{rows.selected.mean() * policy.judge_cost_usd:.2f}"
    return figures


def random_interval_widths(con: duckdb.DuckDBPyConnection) -> dict[str, object]:
    """The random stream's any-signal rate: Wilson interval width per day (mean), over the last
    7 days pooled, and the Horvitz–Thompson rate's mean absolute error per day."""
    estimates = estimate_rates(con, slices=[()], outcomes=["any_signal"]).sort_values("day")
    width = estimates.random_ci_high - estimates.random_ci_low
    last = estimates.tail(7)
    low, high = wilson_interval(np.array([last.random_failures.sum()]), np.array([last.random_n.sum()]))
    return {"population any_signal rate": f"{estimates.population_rate.mean():.4f}",
            "random n per day (mean)": f"{estimates.random_n.mean():,.1f}",
            "Wilson width, one day (mean)": f"{width.mean():.4f}",
            "Wilson width, 7 days pooled": f"{float(high[0] - low[0]):.4f} (n {int(last.random_n.sum()):,})",
            "|random rate − population|, per day (mean)":
                f"{(estimates.random_rate - estimates.population_rate).abs().mean():.4f}",
            "|HT rate − population|, per day (mean)":
                f"{(estimates.ht_rate - estimates.population_rate).abs().mean():.4f}"}


def replicate_days(con: duckdb.DuckDBPyConnection, regimes: list[tuple[int, int]]) -> None:
    """`trace_signals` of independent synthetic days: per regime (traces a day, days), a third
    of the traces thumbs-down, a failure outcome 0.6 on those and 0.1 on the others."""
    con.execute("DROP TABLE IF EXISTS trace_signals")
    parts, first = [], 0
    for size, count in regimes:
        parts.append(f"""SELECT 'r{size}-' || i AS trace_id, DATE '2000-01-01' + CAST({first} + i // {size} AS INTEGER)
                                AS day, {size} AS size, hash(i, {size}, 'down') % 3 = 0 AS thumbs_down,
                                hash(i, {size}, 'y') % 10 < CASE WHEN hash(i, {size}, 'down') % 3 = 0 THEN 6
                                                              ELSE 1 END AS failed
                         FROM range({size * count}) r(i)""")
        first += count
    flags = ", ".join(f"false AS {s}" for s in SIGNALS if s != "thumbs_down")
    con.execute(f"""CREATE TABLE trace_signals AS
        SELECT *, {flags}, CASE WHEN thumbs_down THEN ['thumbs_down'] ELSE [] END AS signals,
               thumbs_down::INT AS signal_count, 'faq' AS query_type, 'low' AS risk_level
        FROM ({" UNION ALL ".join(parts)})""")


def estimator_check(regimes: list[tuple[int, int]]) -> None:
    policy = SamplingPolicy(signal_rates={"thumbs_down": 1.0}, query_type_rates={}, risk_level_rates={})
    cap = policy.random_capacity()
    with duckdb.connect() as con:
        replicate_days(con, regimes)
        start = time.perf_counter()
        select_candidates(con, policy)
        took = time.perf_counter() - start
        days = con.sql("""
            SELECT s.day, any_value(s.size) AS n, avg(s.failed::INT) AS truth,
                   count(c.trace_id) FILTER (c.by_random) AS random_n,
                   count(c.trace_id) FILTER (c.by_random AND s.failed) AS random_failures,
                   coalesce(sum(1 / c.p_random) FILTER (c.by_random AND s.failed), 0) / count(*) AS ht,
                   coalesce(max(c.p_random), 0.05) AS p_random, count(c.trace_id) AS selected
            FROM trace_signals s LEFT JOIN failure_candidates c USING (trace_id)
            GROUP BY s.day""").df()
    # the rule considered first: p = k/N on a day the cap cut, the policy's rate otherwise
    cut = days.p_random < policy.random_rate
    days["ht_k_over_n"] = days.random_failures / np.where(cut, days.random_n / days.n, policy.random_rate) / days.n
    low, high = wilson_interval(days.random_failures, days.random_n)
    days["covered"] = (low <= days.truth) & (days.truth <= high)
    print(f"\nestimator check ({len(days):,} independent days, {int(days.n.sum()):,} traces, selection "
          f"{took:.1f} s; capacity {policy.daily_capacity()}, random cap {cap}, rate {policy.random_rate}):")
    print("| traces a day | days | random n (mean) | days cut | over capacity | mean error, p = lowered rate "
          "(± s.e.) | mean error, p = k/N when cut (± s.e.) | Wilson coverage |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for size, group in days.groupby("n"):
        errors = {name: group[name] - group.truth for name in ("ht", "ht_k_over_n")}
        shown = [f"{e.mean():+.5f} ± {e.std() / np.sqrt(len(e)):.5f}" for e in errors.values()]
        print(f"| {size:,} | {len(group):,} | {group.random_n.mean():.1f} | {(group.p_random < 0.05).mean():.0%} | "
              f"{int((group.selected > policy.daily_capacity()).sum())} | {shown[0]} | {shown[1]} | "
              f"{group.covered.mean():.1%} |")


def both_rules(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, object]]:
    """The selection with either rule, and what it gives per day."""
    results = {}
    for name, policy in (("before (random_budget_share=None)", BEFORE), ("after (default policy)", AFTER)):
        start = time.perf_counter()
        selected = select_candidates(con, policy)
        selection = time.perf_counter() - start
        results[name] = {"selected": f"{selected:,}", "selection s": f"{selection:.2f}",
                         **per_day_streams(con, policy), **random_interval_widths(con)}
    return results


def show(results: dict[str, dict[str, object]]) -> None:
    names = list(results)
    print("\nper day, min / mean / max over the days:")
    print(f"| | {' | '.join(names)} |\n|:--|{'--:|' * len(names)}")
    for key in results[names[0]]:
        print(f"| {key} | {' | '.join(str(results[n][key]) for n in names)} |")


def compare_rules(source: Path, workdir: Path) -> None:
    """Both rules on a copy of a home's database (the home itself is never opened)."""
    database = workdir / "selection-home.duckdb"
    shutil.copyfile(source, database)
    with duckdb.connect(str(database)) as con:
        traces, days = con.execute("SELECT count(*), count(DISTINCT day) FROM trace_signals").fetchall()[0]
        novel = con.execute("SELECT count(*) FILTER (rate > 0) FROM trace_novelty").fetchall()[0][0]
        print(f"{source}: {traces:,} traces over {days} days; {novel} with a novelty rate")
        show(both_rules(con))
    database.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=14, help="UTC days the traces are spread over")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out"))
    parser.add_argument("--no-reference", action="store_true", help="skip the bare read_json reference")
    parser.add_argument("--estimator-check", action="store_true")
    parser.add_argument("--database", type=Path,
                        help="compare the two rules on a copy of this home's database (its trace_signals and "
                             "trace_novelty, e.g. bench/loop.py's) instead of generated traces")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.database:
        compare_rules(args.database, args.workdir)
        return
    bare = None
    if not args.no_reference:
        source = args.workdir / f"traces-{args.traces}" / f"bench-{args.traces}.jsonl"
        if not source.exists():
            source.parent.mkdir(parents=True, exist_ok=True)
            write_traces(source, args.traces)
        with duckdb.connect(str(args.workdir / "bare.duckdb")) as con:
            start = time.perf_counter()
            con.execute(f"CREATE OR REPLACE TABLE bare AS SELECT * FROM read_json('{source}')")
            bare = time.perf_counter() - start
    database = args.workdir / "selection.duckdb"
    database.unlink(missing_ok=True)

    with duckdb.connect(str(database)) as con:
        build_database(con, args.traces, args.days)
        con.execute("CHECKPOINT")
        start = time.perf_counter()
        compute_signals(con, SignalSettings())
        signals = time.perf_counter() - start
        flagged = con.execute("SELECT count(*) FILTER (signal_count > 0) FROM trace_signals").fetchall()[0][0]
        results = both_rules(con)

    print(f"traces: {args.traces:,} over {args.days} days; with a signal: {flagged:,}")
    if bare is not None:
        print(f"bare read_json of {source.name}: {bare:.2f} s (reference)")
    selection = float(results["after (default policy)"]["selection s"])
    print(f"signals: {signals:.2f} s, selection (default policy): {selection:.2f} s, "
          f"signals + selection: {signals + selection:.2f} s (target < 5 s)"
          + (f", ratio to bare scan: {(signals + selection) / bare:.2f}" if bare else ""))
    show(results)
    if args.estimator_check:
        estimator_check([(1000, 600), (2000, 1000), (6000, 300)])


if __name__ == "__main__":
    main()
