"""The retrieval figures on Spark `local[2]` with the parts the query reads several times
cached (`Functions.reuse`, the Spark engine's) and inlined (the registry's plain `SPARK`,
which Spark computes again from the lake's files at each reading), in one process, alternating,
against DuckDB on the same world (bench/selection.py's, signals computed, exported to a lake).

    PYTHONPATH=bench python bench/spark_reuse.py [--traces 1000000] [--workdir bench/out/reuse]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import duckdb
import pandas as pd
from selection import build_database

from rag_loop.drift.figures import retrieval_figures
from rag_loop.engines.engine import SparkEngine, spark_session
from rag_loop.engines.functions import SPARK
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.deployment import copy_small_tables, migrate
from rag_loop.store.lake import Lake


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/reuse"))
    args = parser.parse_args()
    work = args.workdir / str(args.traces)
    work.mkdir(parents=True, exist_ok=True)
    database = work / "world.duckdb"
    fresh = not database.exists()
    con = duckdb.connect(str(database))
    if fresh:
        build_database(con, args.traces)
        compute_signals(con, SignalSettings())
        migrate(con, Lake.of(work / "lake"), "lake")  # lake-backed: the traces and signals in the lake
        copy_small_tables(con, Lake.of(work / "lake"))
    day = con.execute("SELECT max(day) FROM trace_signals").fetchall()[0][0]
    session = spark_session("local[2]", {"spark.driver.memory": "2g"})
    session.sparkContext.setLogLevel("ERROR")
    cached = SparkEngine(session, work / "lake")
    inlined = SparkEngine(session, work / "lake")
    inlined.functions = SPARK  # reuse is the identity
    start = time.perf_counter()
    expected = retrieval_figures(con, day, 7)
    print(f"DuckDB: {time.perf_counter() - start:.2f} s")
    for turn, order in enumerate(((("inlined", inlined), ("cached", cached)),
                                  (("cached", cached), ("inlined", inlined)))):
        for name, engine in order:
            start = time.perf_counter()
            figures = retrieval_figures(con, day, 7, engine)
            print(f"Spark {name:8s} (turn {turn + 1}): {time.perf_counter() - start:.2f} s")
            pd.testing.assert_frame_equal(figures, expected, check_exact=False, rtol=0, atol=1e-9)
    print("rows equal to DuckDB's on both")


if __name__ == "__main__":
    main()
