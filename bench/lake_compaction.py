"""The trace lake after 30 daily ingestion runs, without compaction and with the maintenance
(`optimize` then `vacuum`, as lake_maintenance_job runs them) daily or weekly: the files of the
current version, the files and bytes stored, and a full scan through DuckDB (the version's file
list, `files_query`), in one process, on the same rows.

Each run adds several small files to its day and a few to the day before (late data) and commits
them with `Lake.commit_files`, as Spark's driver does (the files written first, one
commit per run). The rows are demo-shaped raw_traces (ids, timestamps, query and answer text, the
configuration and slice fields, latency, tokens, cost). Vacuum runs with retention 0: the state
once the retention (a week by default) has passed for every file the compaction replaced.

    python bench/lake_compaction.py [--traces 1000000] [--runs 30] [--files-per-run 6] \
        [--workdir bench/out/lake_compaction]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rag_loop.store.lake import DAY, Lake, files_query

START = date(2026, 10, 1)
QUERIES = ["How many leave days do I get?", "Can I carry over unused leave?", "What is the parental leave policy?",
           "Số ngày nghỉ phép năm là bao nhiêu?", "How do I claim travel expenses?", "Who approves overtime?",
           "What is the remote work policy?", "Chính sách làm việc từ xa là gì?", "How do I reset my password?"]
ANSWERS = ["You get 15 days of annual leave.", "Up to 5 days carry over to March.", "16 weeks, paid.",
           "Bạn có 12 ngày nghỉ phép năm.", "Submit the form within 30 days.", "Your line manager.",
           "Two days a week at home.", "Hai ngày mỗi tuần.", "Use the self-service portal."]
SCENARIOS = {"none": None, "daily": 1, "weekly": 7}


def traces(rng: np.random.Generator, day: date, count: int, first: int) -> pa.Table:
    """`count` demo-shaped traces of `day` (without the `day` column: the folder gives it)."""
    at = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
    seconds = np.sort(rng.uniform(0, 86_400, count))
    pick = rng.integers(0, len(QUERIES), count)
    return pa.table({
        "trace_id": pa.array([f"tr-{first + i:09d}" for i in range(count)]),
        "timestamp": pa.array(((at + seconds) * 1e6).astype("int64"), pa.timestamp("us", tz="UTC")),
        "session_id": pa.array([f"s-{n:07d}" for n in rng.integers(0, 200_000, count)]),
        "original_query": pa.array(np.array(QUERIES)[pick]),
        "answer": pa.array(np.array(ANSWERS)[pick]),
        "rag_version": pa.array(rng.choice(["v1.4.0", "v1.5.0"], count)),
        "model_name": pa.array(rng.choice(["gpt-4o-mini", "llama-3.1-8b"], count)),
        "language": pa.array(rng.choice(["en", "vi"], count, p=[0.7, 0.3])),
        "tenant": pa.array(rng.choice(["acme", "globex", "initech", "umbrella"], count)),
        "latency_ms": pa.array(rng.lognormal(6.5, 0.5, count)),
        "prompt_tokens": pa.array(rng.integers(300, 3000, count)),
        "completion_tokens": pa.array(rng.integers(20, 400, count)),
        "cost_usd": pa.array(rng.uniform(0.0001, 0.01, count)),
        "rating": pa.array(rng.choice(["positive", "negative", None], count, p=[0.05, 0.03, 0.92])),
    })


def stored(lake: Lake, table: str) -> tuple[int, int]:
    files = lake.stored_files(table)
    return len(files), sum(files.values())


def scan_seconds(lake: Lake, table: str, repeat: int) -> tuple[float, float]:
    """The median times of making the version's query (`files_query`: its file list, each file's
    columns) and of a full scan with it (every column read) through DuckDB."""
    plans, times = [], []
    with duckdb.connect() as con:
        for _ in range(repeat):
            started = time.perf_counter()
            sql = files_query(lake.files(table), lake.schema(table))
            plans.append(time.perf_counter() - started)
            started = time.perf_counter()
            con.execute(f"SELECT count(*), sum(length(trace_id)), sum(length(session_id)), sum(latency_ms), "
                        f"sum(length(original_query)), sum(length(answer)), count(rating), max(\"timestamp\"), "
                        f"count(DISTINCT {DAY}), count(DISTINCT language || tenant || rag_version || model_name), "
                        f"sum(prompt_tokens + completion_tokens), sum(cost_usd) FROM ({sql})").fetchall()
            times.append(time.perf_counter() - started)
    return statistics.median(plans), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--files-per-run", type=int, default=6, help="files of the run's day; half as many "
                                                                     "(late data) go to the day before")
    parser.add_argument("--late-share", type=float, default=0.1, help="of a run's traces, the day before's")
    parser.add_argument("--repeat", type=int, default=5, help="scans timed per scenario (median)")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/lake_compaction"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    lakes = {name: Lake.of(args.workdir / name) for name in SCENARIOS}
    table, per_run = "raw_traces", args.traces // args.runs
    rng = np.random.default_rng(46)
    maintenance = {name: 0.0 for name in SCENARIOS}
    written = 0
    started = time.perf_counter()
    for run in range(args.runs):
        day = START + timedelta(days=run)
        late = int(per_run * args.late_share) if run else 0
        parts = [(day, per_run - late, args.files_per_run)]
        if late:
            parts.append((day - timedelta(days=1), late, max(1, args.files_per_run // 2)))
        chunks = []
        for part_day, count, files in parts:
            rows = traces(rng, part_day, count, written)
            written += count
            step = -(-count // files)
            chunks += [(part_day, rows.slice(i, step)) for i in range(0, count, step)]
        schema = chunks[0][1].schema.append(pa.field(DAY, pa.date32()))
        for name, lake in lakes.items():  # the same files, committed to each lake in one commit
            added = []
            for n, (part_day, rows) in enumerate(chunks):
                path = lake.path(table) / f"{DAY}={part_day.isoformat()}" / f"part-run{run:02d}-{n:02d}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(rows, path)
                added.append(path)
            lake.commit_files(table, added, [], schema)
            every = SCENARIOS[name]
            if every and (run + 1) % every == 0:
                began = time.perf_counter()
                lake.optimize(table)
                lake.vacuum(table, retention_hours=0)
                maintenance[name] += time.perf_counter() - began
    print(f"{written:,} traces in {args.runs} runs ({per_run:,} a run, {args.late_share:.0%} of them late, "
          f"{args.files_per_run}+{max(1, args.files_per_run // 2)} files a run); built in "
          f"{time.perf_counter() - started:.0f} s")

    results = {}
    for name, lake in lakes.items():
        count = duckdb.sql(f"SELECT count(*) FROM ({files_query(lake.files(table), lake.schema(table))})"
                           ).fetchall()[0][0]
        assert count == written, (name, count)
        files, size = stored(lake, table)
        results[name] = {"version files": len(lake.files(table)), "stored files": files, "stored MB": size / 1e6,
                         "log entries": len(list((lake.path(table) / "_delta_log").glob("*.json"))),
                         "maintenance s": maintenance[name]}
    for _ in range(3):  # alternate the scenarios: the same machine state for each
        for name, lake in lakes.items():
            results[name].setdefault("scans", []).append(scan_seconds(lake, table, args.repeat))
    base = statistics.median(s for _, s in results["none"]["scans"])
    print("| maintenance | version files | stored files | stored MB | log entries | maintenance s (total) | "
          "files_query s | full scan s | scan vs none |")
    print("|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in results.items():
        plan, scan = (statistics.median(x) for x in zip(*r["scans"], strict=True))
        print(f"| {name} | {r['version files']:,} | {r['stored files']:,} | {r['stored MB']:.1f} | "
              f"{r['log entries']} | {r['maintenance s']:.1f} | {plan:.3f} | {scan:.3f} | {scan / base:.2f} |")


if __name__ == "__main__":
    main()
