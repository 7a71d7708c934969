"""Ingestion into a lake-backed deployment (`ingest_directory_into_lake`: parsed and deduplicated
by DuckDB, appended to Delta) against the embedded path, on the same files, in the same process
(these machines are noisy: compare, don't time absolutely). Spark ingestion, which this bench
also ran until it lost (bench/RESULTS.md, 2026-12-04), is gone; its last version is in commit
3cbc173 (`bench/spark_ingest.py` there runs all three).

    PYTHONPATH=bench python bench/lake_ingest.py [--traces 200000] [--files 8] [--new 10000]
    PYTHONPATH=bench python bench/lake_ingest.py --otlp --traces 50000 --files 4 --new 5000

Writes `--files` native files of demo-shaped traces (bench/ingest.py's), then ingests them (1)
into a fresh DuckDB file with `ingest_directory` and (2) into a Delta lake; then adds
one file of `--new` traces, of which a tenth repeat stored ids, and ingests again on both
(the incremental run: the stored copies of the new file's trace ids are looked up in the lake's
files of their days). Prints each run's seconds, both database files' sizes and the lake's (its
Delta tables' current versions' files), and checks that both give the same rows. `--otlp`:
Collector-style OTLP files of that many traces (four spans each, bench/ingest.py's) instead,
the new file's traces new (the spans and trace states go to the lake too; the incremental run
assembles only the new ones).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import duckdb
from ingest import write_otlp, write_traces

from rag_loop.ingest import ingest_directory
from rag_loop.ingest.lake import ingest_directory_into_lake
from rag_loop.store.ddl import KEPT_IN_LAKE
from rag_loop.store.lake import Lake

CHECKED = {"raw_traces": "trace_id, source_file, source_line", "trace_chunks": "trace_id, chunk_id, rank",
           "trace_duplicates": "trace_id, source_file, line_no"}
CHECKED_OTLP = {"raw_traces": "trace_id, source_file, source_line", "otlp_traces": "trace_id, state, spans",
                "otlp_spans": "count(*), count(DISTINCT trace_id)", "otlp_pending": "count(*)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--new", type=int, default=10_000)
    parser.add_argument("--otlp", action="store_true", help="OTLP files of --traces traces instead")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/lake-ingest"))
    args = parser.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    traces = args.workdir / "traces"
    traces.mkdir(parents=True)
    per_file = args.traces // args.files
    for n in range(args.files):
        if args.otlp:
            write_otlp(traces / f"part-{n}.otlp.jsonl", 4 * per_file, seed=n, first=n * per_file)
        else:
            write_traces(traces / f"part-{n}.jsonl", per_file, seed=n)
            _renumber(traces / f"part-{n}.jsonl", n * per_file)
    checked = CHECKED_OTLP if args.otlp else CHECKED
    duck = duckdb.connect(str(args.workdir / "duckdb.duckdb"))
    into_lake = duckdb.connect(str(args.workdir / "lake.duckdb"))
    lake = args.workdir / "lake"
    figures = {}
    for run in ("first", "incremental"):
        if run == "incremental" and args.otlp:
            write_otlp(traces / "new.otlp.jsonl", 4 * args.new, seed=99, first=args.traces)
        elif run == "incremental":
            write_traces(traces / "new.jsonl", args.new, seed=99)
            _renumber(traces / "new.jsonl", args.traces - args.new // 10)  # a tenth are stored already
        start = time.perf_counter()
        on_duckdb = ingest_directory(duck, traces)
        figures[f"{run}_duckdb"] = time.perf_counter() - start
        start = time.perf_counter()
        in_lake = ingest_directory_into_lake(into_lake, traces, lake)
        figures[f"{run}_lake"] = time.perf_counter() - start
        assert in_lake.files == on_duckdb.files, "the reports differ"
        for table, key in checked.items():
            query = f"SELECT {key} FROM {table} ORDER BY ALL"
            assert duck.execute(query).fetchall() == into_lake.execute(query).fetchall(), f"{table} differs"
        print(f"{run}: {on_duckdb.total()}; embedded {figures[f'{run}_duckdb']:.2f} s, into the lake "
              f"{figures[f'{run}_lake']:.2f} s ({figures[f'{run}_lake'] / figures[f'{run}_duckdb']:.2f}x)",
              flush=True)
    for con in (duck, into_lake):
        con.execute("CHECKPOINT")
    sizes = {name: (args.workdir / f"{name}.duckdb").stat().st_size / 1e6 for name in ("duckdb", "lake")}
    sizes["lake_files"] = sum(os.stat(f).st_size for t in KEPT_IN_LAKE for f in Lake.of(lake).files(t)) / 1e6
    print(f"database files: embedded {sizes['duckdb']:.1f} MB, lake-backed {sizes['lake']:.1f} MB "
          f"(the traces are in the lake: {sizes['lake_files']:.1f} MB of Parquet)")
    print(json.dumps({**{k: round(v, 2) for k, v in figures.items()},
                      **{f"{k}_mb": round(v, 1) for k, v in sizes.items()}}))


def _renumber(path: Path, first: int) -> None:
    """Trace ids from `first` on (write_traces numbers every file from 0)."""
    lines = path.read_text().splitlines()
    path.write_text("".join(line.replace(f'"tr-{i:012d}"', f'"tr-{first + i:012d}"', 1) + "\n"
                            for i, line in enumerate(lines)))


if __name__ == "__main__":
    main()
