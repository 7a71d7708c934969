"""The stored-key lookup of the (removed) Spark ingestion as the trace lake's history grows,
against DuckDB's of the same files in the same process (these machines are noisy: compare, don't
time absolutely). Ingestion into the lake now reads the keys of the days concerned only
(rag_loop.ingest.lake); this measures what a whole-history lookup costs.

    PYTHONPATH=. python bench/lake_keys.py [--stored 1000000,4000000,16000000] [--days 30] [--probe 10000]

Each run of Spark ingestion found the stored copies of its trace ids (first copy wins) and
the pending traces' states by a semi-join of the run's ids with the lake's keys over every
day: a scan of the whole history's key column. This
writes `--stored` random 32-hex trace ids (OTLP's shape) over `--days` day files, then
probes `--probe` ids (half of them stored) as a run does, on Spark `local[2]` and on DuckDB;
prints each lookup's best of three, in seconds and nanoseconds per stored key, and Spark's as
a multiple of DuckDB's. The per-key figure is what a history of N keys costs each run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from datetime import date, timedelta
from pathlib import Path

import duckdb

from rag_loop.engines.engine import spark_session


def write_keys(con: duckdb.DuckDBPyConnection, lake: Path, stored: int, days: int) -> None:
    """`stored` trace ids, md5 of their number, spread evenly over `days` day files."""
    shutil.rmtree(lake, ignore_errors=True)
    for offset in range(days):
        target = lake / f"day={date(2026, 1, 1) + timedelta(days=offset)}" / "part-0.parquet"
        target.parent.mkdir(parents=True)
        con.execute(f"""COPY (SELECT md5(i::VARCHAR) AS trace_id, 'file-' || (i % 97) || '.jsonl' AS source_file,
                                     i AS source_line
                              FROM range({offset}, {stored}, {days}) t(i))
                        TO '{target}' (FORMAT parquet)""")


def best_of(runs: int, lookup) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        found = lookup()
        times.append(time.perf_counter() - start)
    return min(times), found


def lookups(session, con: duckdb.DuckDBPyConnection, lake: Path, probe: Path) -> list[tuple[float, int]]:
    """The probe's stored ids found in the lake's keys, as a run finds them on Spark (the key
    and day columns of every day, a semi-join) and as DuckDB would: (best seconds, found) each."""
    ids, keys = session.read.parquet(str(probe)), session.read.parquet(str(lake))

    def on_spark() -> int:
        return keys.select("trace_id", "day").join(ids, "trace_id", "left_semi").count()

    def on_duckdb() -> int:
        return con.execute(f"""SELECT count(*) FROM read_parquet('{lake}/*/*.parquet', hive_partitioning = true)
                               SEMI JOIN read_parquet('{probe}') USING (trace_id)""").fetchall()[0][0]
    on_spark()  # the JVM's first query of these files
    return [best_of(3, on_spark), best_of(3, on_duckdb)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", default="1000000,4000000,16000000")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--probe", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/lake-keys"))
    args = parser.parse_args()
    session = spark_session("local[2]", {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"})
    session.sparkContext.setLogLevel("ERROR")
    con = duckdb.connect()
    figures = []
    for stored in (int(n) for n in args.stored.split(",")):
        lake, probe = args.workdir / "lake", args.workdir / "probe.parquet"
        write_keys(con, lake, stored, args.days)
        step = max(1, stored // args.probe)  # half stored ids, half never stored
        con.execute(f"""COPY (SELECT md5((i * {step})::VARCHAR) AS trace_id FROM range({args.probe // 2}) t(i)
                              UNION ALL SELECT md5('new-' || i) FROM range({args.probe - args.probe // 2}) t(i))
                        TO '{probe}' (FORMAT parquet)""")
        (spark_s, spark_found), (duckdb_s, duckdb_found) = lookups(session, con, lake, probe)
        assert spark_found == duckdb_found == args.probe // 2, (spark_found, duckdb_found)
        row = {"stored": stored, "spark_s": round(spark_s, 2), "duckdb_s": round(duckdb_s, 2),
               "spark_ns_per_key": round(spark_s / stored * 1e9, 1),
               "duckdb_ns_per_key": round(duckdb_s / stored * 1e9, 1),
               "lake_mb": round(sum(p.stat().st_size for p in lake.rglob("*.parquet")) / 1e6, 1)}
        figures.append(row)
        print(f"{stored:>12,} stored keys ({row['lake_mb']} MB): Spark {spark_s:.2f} s "
              f"({row['spark_ns_per_key']} ns/key), DuckDB {duckdb_s:.2f} s ({row['duckdb_ns_per_key']} ns/key), "
              f"{spark_s / duckdb_s:.1f}x")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
