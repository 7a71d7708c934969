"""Signals and selection over N stored traces, beside a bare DuckDB scan as the reference.

    python bench/selection.py [--traces 1000000] [--workdir bench/out]

Builds a DuckDB file of N demo-shaped traces with SQL (sessions of 1-3 turns, rephrases,
5 chunks each, feedback, timeouts, two versions of each document), then times
`compute_signals` + `select_candidates` (target: under 5 s for 1,000,000 traces) and, for
information, `estimate_rates`. The reference is a bare `read_json` of the ingestion
benchmark's file of the same size, timed in the same process (written first if missing).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import duckdb
from ingest import write_traces

from rag_loop.selection.estimates import estimate_rates
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.ddl import utc_day
from rag_loop.store.tables import create_tables

QUERIES = ["how many leave days do I get", "how many days of leave do i get",
           "what is the password rotation period", "ERR-PAY-942 meaning",
           "Nhân viên được nghỉ phép bao nhiêu ngày?", "bản cho sg thì sao?",
           "report a security incident"]


def build_database(con: duckdb.DuckDBPyConnection, count: int) -> None:
    """N traces in sessions of up to three turns a few seconds apart, with chunks and feedback."""
    create_tables(con)
    quoted = ", ".join("'" + q.replace("'", "''") + "'" for q in QUERIES)
    con.execute(f"""
        INSERT INTO raw_traces BY NAME
        SELECT 'tr-' || i AS trace_id, 's-' || (i // 3) AS session_id, i % 3 + 1 AS turn_id,
               TIMESTAMPTZ '2026-11-01 00:00:00+00' + to_seconds((i // 3) * 3.6 + (i % 3) * 20)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    source = args.workdir / f"traces-{args.traces}" / f"bench-{args.traces}.jsonl"
    if not source.exists():
        source.parent.mkdir(parents=True, exist_ok=True)
        write_traces(source, args.traces)
    database = args.workdir / "selection.duckdb"
    database.unlink(missing_ok=True)

    with duckdb.connect(str(args.workdir / "bare.duckdb")) as con:
        start = time.perf_counter()
        con.execute(f"CREATE OR REPLACE TABLE bare AS SELECT * FROM read_json('{source}')")
        bare = time.perf_counter() - start

    with duckdb.connect(str(database)) as con:
        build_database(con, args.traces)
        con.execute("CHECKPOINT")
        start = time.perf_counter()
        compute_signals(con, SignalSettings())
        signals = time.perf_counter() - start
        start = time.perf_counter()
        selected = select_candidates(con, SamplingPolicy())  # the default policy and budget
        selection = time.perf_counter() - start
        start = time.perf_counter()
        estimates = estimate_rates(con)
        estimating = time.perf_counter() - start
        flagged = con.execute("SELECT count(*) FILTER (signal_count > 0) FROM trace_signals").fetchall()[0][0]

    print(f"traces: {args.traces:,}; with a signal: {flagged:,}; selected: {selected:,}")
    print(f"bare read_json of {source.name}: {bare:.2f} s (reference)")
    print(f"signals: {signals:.2f} s, selection: {selection:.2f} s, "
          f"signals + selection: {signals + selection:.2f} s (target < 5 s), "
          f"ratio to bare scan: {(signals + selection) / bare:.2f}")
    print(f"estimates ({len(estimates):,} rows): {estimating:.2f} s")


if __name__ == "__main__":
    main()
