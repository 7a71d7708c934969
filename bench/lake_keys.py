"""The stored-key lookup of ingestion into the trace lake as its history grows: the day-bounded
lookup a run makes (rag_loop.ingest.lake: the stored copies of the days its records fall on)
against a whole-history one, on the same Delta table in the same process (these machines are
noisy: compare, don't time absolutely).

    PYTHONPATH=. python bench/lake_keys.py [--per-day 100000] [--days 7,30,90] [--probe 10000]

For each history of `--days` days, this writes `--per-day` random 32-hex trace ids (OTLP's
shape) a day into a Delta table partitioned by day (one file a day, as daily runs leave it),
then probes `--probe` ids of the newest day (half of them stored, half new: a run's batch) as
first copy wins does: `LakeTraces.stored` of the days concerned (the newest only) semi-joined
with the probe, and the same over every day. Prints each lookup's best of three in seconds,
wall and CPU (the Delta log read included, as a run pays it), and the whole-history lookup as a
multiple of the day-bounded one. The day-bounded figure should stay flat as history grows.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from datetime import date, timedelta
from pathlib import Path

import duckdb

from rag_loop.store.lake import Lake
from rag_loop.store.lake_traces import LakeTraces

FIRST = date(2026, 1, 1)
COLUMNS = "trace_id, source_file, source_line"


def write_history(con: duckdb.DuckDBPyConnection, lake: Lake, per_day: int, days: int) -> None:
    """`per_day` trace ids a day (md5 of their number) over `days` days, one commit a day."""
    shutil.rmtree(lake.path("raw_traces"), ignore_errors=True)
    for offset in range(days):
        day = FIRST + timedelta(days=offset)
        rows = con.sql(f"""SELECT md5(i::VARCHAR) AS trace_id, 'file-' || (i % 97) || '.jsonl' AS source_file,
                                  i AS source_line, DATE '{day}' AS day
                           FROM range({offset * per_day}, {(offset + 1) * per_day}) t(i)""")
        lake.write("raw_traces", rows.to_arrow_table(), days={day})


def best_of(runs: int, lookup) -> tuple[float, float, int]:
    """The best wall and CPU seconds of `runs` lookups, and what the last found."""
    walls, cpus, found = [], [], 0
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        found = lookup()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), found


def lookup(con: duckdb.DuckDBPyConnection, traces: LakeTraces, probe: Path, days: list[date]) -> int:
    """The probe's ids stored on `days`, found as first copy wins finds them."""
    stored = traces.stored("raw_traces", COLUMNS, days)
    return con.execute(f"SELECT count(*) FROM ({stored}) SEMI JOIN read_parquet('{probe}') "
                       "USING (trace_id)").fetchall()[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-day", type=int, default=100_000)
    parser.add_argument("--days", default="7,30,90")
    parser.add_argument("--probe", type=int, default=10_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/lake-keys"))
    args = parser.parse_args()
    con = duckdb.connect()
    lake, probe = Lake.of(args.workdir / "lake"), args.workdir / "probe.parquet"
    traces = LakeTraces(lake)
    figures = []
    for days in (int(n) for n in args.days.split(",")):
        write_history(con, lake, args.per_day, days)
        newest = FIRST + timedelta(days=days - 1)
        first_id, step = (days - 1) * args.per_day, max(1, args.per_day // args.probe)
        con.execute(f"""COPY (SELECT md5(({first_id} + i * {step})::VARCHAR) AS trace_id
                              FROM range({args.probe // 2}) t(i)
                              UNION ALL SELECT md5('new-' || i) FROM range({args.probe - args.probe // 2}) t(i))
                        TO '{probe}' (FORMAT parquet)""")
        bounded = best_of(3, lambda: lookup(con, traces, probe, [newest]))  # noqa: B023 (called at once)
        whole = best_of(3, lambda: lookup(con, traces, probe, lake.days("raw_traces")))
        assert bounded[2] == whole[2] == args.probe // 2, (bounded[2], whole[2])
        row = {"days": days, "stored": days * args.per_day,
               "bounded_s": round(bounded[0], 3), "bounded_cpu_s": round(bounded[1], 3),
               "whole_s": round(whole[0], 3), "whole_cpu_s": round(whole[1], 3),
               "lake_mb": round(sum(p.stat().st_size for p in lake.path("raw_traces").rglob("*.parquet")) / 1e6, 1)}
        figures.append(row)
        print(f"{days:>4} days, {row['stored']:>11,} stored keys ({row['lake_mb']} MB): day-bounded "
              f"{bounded[0]:.3f} s ({bounded[1]:.3f} CPU-s), whole history {whole[0]:.3f} s "
              f"({whole[1]:.3f} CPU-s), {whole[0] / bounded[0]:.1f}x")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
