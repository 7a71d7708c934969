"""The portable stages (one Ibis expression each) on DuckDB and on Spark, and DuckDB's scaling
curve, beside a bare DuckDB scan as the reference.

    python bench/engines.py [--traces 1000000] [--scaling 100000,1000000,3000000]
                            [--workdir bench/out/engines] [--skip-spark] [--spark-master local[2]]
                            [--spark-memory 2g]
                            [--memory-limits default,1GB] [--keep]

1. Engine comparison on a world of N traces (bench/selection.py's `build_database`: ~72,000
   traces a day, 1M traces cover 14 days): times the bare reference in the same process (a
   `count(*), sum(length(original_query))` scan of raw_traces and a `COPY raw_traces TO` Parquet),
   each ported stage on DuckDB (engine None, the default), `rag-loop lake migrate --to lake`,
   each stage on DuckDB again over the lake (its tables Delta tables), and on Spark
   (`spark_session`, local[2] as the engine resource builds it; the session start is timed
   apart, each stage is run twice: the first run is what a Dagster run with a new session pays,
   the rerun is the warm figure). Checks that both engines give the same row counts. The Spark
   figures are figures, not a gate.
2. Scaling curve of the DuckDB path: per size, the database is built once (in its own process)
   and each stage then runs in a fresh process, which reports its seconds, its resident memory
   right before the stage and its peak during it (VmHWM, reset right before the stage; also the
   raw ru_maxrss, which Linux never lets drop below the launching process's peak): DuckDB
   streams, so the peak should stay roughly flat as traffic grows. The curve is run once per
   `--memory-limits` value: DuckDB's own default (80% of RAM, which it fills with cached blocks
   and bigger operators when it can, so its peak grows with the data), and 1GB, the cap the
   ingestion uses: once the data outgrows it the peak stops growing (DuckDB evicts and spills).

A stage is ported when its function takes an `engine` parameter (`STAGES` lists them in order).
Everything generated goes under --workdir.
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
from selection import build_database

from rag_loop.drift.days import FreshnessSettings, QueryMixSettings, RetrievalSettings
from rag_loop.drift.figures import freshness_figures, mix_counts, retrieval_figures
from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.incremental import table_fingerprints
from rag_loop.online.quality import OnlineQualitySettings
from rag_loop.selection.estimate_expressions import DaySlices, population_expression
from rag_loop.selection.estimates import DEFAULT_SLICES, estimate_inputs, estimate_rates, update_estimates
from rag_loop.selection.novelty import NoveltySettings
from rag_loop.selection.sampling import SamplingPolicy, candidate_inputs, select_candidates
from rag_loop.selection.sampling_expressions import SampleDays, novelty_sample_expression, novelty_traffic_expression
from rag_loop.selection.signals import SignalSettings, compute_signals, signal_counts, signal_inputs
from rag_loop.store.deployment import TRACE_SIZED, migrate
from rag_loop.store.lake import Lake


@dataclass(frozen=True)
class Stage:
    """A stage: `function(con, settings, engine=...)` (re)builds `table` and returns its rows."""

    table: str
    function: Callable[..., int]
    settings: Callable[[], Any]
    label: str = ""  # the step's name, when not the table's

    @property
    def name(self) -> str:
        return self.label or self.table

    @property
    def ported(self) -> bool:
        return "engine" in inspect.signature(self.function).parameters

    def run(self, con: duckdb.DuckDBPyConnection, engine=None) -> int:
        if engine is None:  # the default path, as the assets call it on DuckDB
            return self.function(con, self.settings())
        return self.function(con, self.settings(), engine=engine)


def _newest_day(con: duckdb.DuckDBPyConnection) -> date:
    return con.execute("SELECT max(day) FROM trace_signals").fetchall()[0][0]


def _keep(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> int:
    """A stage whose result is a frame: kept as a table, so every stage is counted alike."""
    con.register("bench_frame", frame)
    try:
        con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT * FROM bench_frame')
    finally:
        con.unregister("bench_frame")
    return len(frame)


def quality_estimates(con: duckdb.DuckDBPyConnection, slices, engine=None) -> int:
    """quality_estimates over the whole table (every day, the default slices)."""
    return _keep(con, "quality_estimates", estimate_rates(con, slices, engine=engine))


def query_mix(con: duckdb.DuckDBPyConnection, settings: QueryMixSettings, engine=None) -> int:
    """query_mix's counts for the newest day and its baseline window (no intent clusters)."""
    return _keep(con, "query_mix_counts", mix_counts(con, _newest_day(con), settings.baseline_days, None, engine))


def retrieval_scores(con: duckdb.DuckDBPyConnection, settings: RetrievalSettings, engine=None) -> int:
    """retrieval_scores for the newest day against its baseline window."""
    return _keep(con, "retrieval_scores", retrieval_figures(con, _newest_day(con), settings.baseline_days, engine))


def stale_retrieval(con: duckdb.DuckDBPyConnection, settings: FreshnessSettings, engine=None) -> int:
    """freshness_lag's stale retrieval rates for the newest day against its baseline window."""
    day = _newest_day(con)
    return _keep(con, "stale_retrieval", freshness_figures(con, day, settings.baseline_days,
                                                            settings.slo_minutes, engine)[1])


def novelty_sample(con: duckdb.DuckDBPyConnection, settings: NoveltySettings, engine=None) -> int:
    """trace_novelty's reads in a daily run: the traffic fingerprint of every day (a few rows a
    day), then the sample of the newest day and its window (the clustering after it is bounded
    by the sample)."""
    engine = engine or DuckDBEngine()
    engine.frame(con, ("raw_traces",), novelty_traffic_expression, None)
    newest = _newest_day(con)
    days = tuple(newest - timedelta(days=k) for k in range(settings.window_days + 1))
    return _keep(con, "novelty_sample", engine.frame(
        con, ("raw_traces",), novelty_sample_expression, SampleDays(settings.daily_sample, days)))


def online_traffic(con: duckdb.DuckDBPyConnection, settings: OnlineQualitySettings, engine=None) -> int:
    """online_quality's traffic per slice on the newest day (the judged traces are bounded by
    the judging budget)."""
    wanted = DaySlices(_newest_day(con), tuple(tuple(s) for s in settings.slices))
    return _keep(con, "online_traffic", (engine or DuckDBEngine()).frame(
        con, ("trace_signals",), population_expression, wanted))


def _newest_days(con: duckdb.DuckDBPyConnection) -> list[date]:
    newest = _newest_day(con)
    return [newest - timedelta(days=1), newest]


def signals_daily(con: duckdb.DuckDBPyConnection, settings: SignalSettings, engine=None) -> int:
    """trace_signals' daily run once the table exists: the input and row fingerprints that pick
    the days to compute, then the newest day and the day before it (new traffic on the newest
    day changes both) replaced."""
    signal_inputs(con, settings)
    table_fingerprints(con, "trace_signals")
    compute_signals(con, settings, engine, days=_newest_days(con))
    return _rows(con, "trace_signals")


def candidates_daily(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy, engine=None) -> int:
    """failure_candidates' daily run: its fingerprints, then the newest two days replaced."""
    candidate_inputs(con, policy)
    table_fingerprints(con, "failure_candidates")
    select_candidates(con, policy, engine, days=_newest_days(con))
    return _rows(con, "failure_candidates")


def estimates_daily(con: duckdb.DuckDBPyConnection, slices, engine=None) -> int:
    """quality_estimates' daily run: its fingerprints, then the newest two days replaced."""
    estimate_inputs(con, slices, 0.95)
    table_fingerprints(con, "quality_estimates")
    update_estimates(con, slices, engine=engine, days=_newest_days(con))
    return _rows(con, "quality_estimates")


# in dependency order: each reads what the ones before it wrote
STAGES = (
    Stage("trace_signals", compute_signals, SignalSettings),
    Stage("failure_candidates", select_candidates, SamplingPolicy),
    Stage("quality_estimates", quality_estimates, lambda: DEFAULT_SLICES),
    Stage("query_mix_counts", query_mix, QueryMixSettings),
    Stage("retrieval_scores", retrieval_scores, RetrievalSettings),
    Stage("stale_retrieval", stale_retrieval, FreshnessSettings),
    Stage("novelty_sample", novelty_sample, NoveltySettings),
    Stage("online_traffic", online_traffic, OnlineQualitySettings),
    Stage("trace_signals", signals_daily, SignalSettings, "signals_2_days"),
    Stage("failure_candidates", candidates_daily, SamplingPolicy, "candidates_2_days"),
    Stage("quality_estimates", estimates_daily, lambda: DEFAULT_SLICES, "estimates_2_days"),
)


def ported_stages() -> list[Stage]:
    return [s for s in STAGES if s.ported]


def _quiet(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    con.execute("SET enable_progress_bar = false")
    return con


def _status_mb(field: str) -> float | None:
    """VmRSS (resident now) or VmHWM (peak since exec or the last reset) from /proc, in MB."""
    try:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) / 1024 for line in handle if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return None


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def _reset_peak() -> bool:
    """Start the peak (VmHWM, and ru_maxrss's own part) over from the resident memory now
    (Linux >= 4.0): ru_maxrss alone would keep the launching process's peak, which Linux
    carries across fork and exec."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_since_reset(reset: bool) -> float:
    return (_status_mb("VmHWM") if reset else None) or _maxrss_mb()


def _rows(con: duckdb.DuckDBPyConnection, table: str) -> int:
    return con.execute(f'SELECT count(*) FROM "{table}"').fetchall()[0][0]


def _bare(con: duckdb.DuckDBPyConnection, target: Path) -> tuple[float, float]:
    """The reference: a bare scan of raw_traces and a bare COPY of it to Parquet."""
    start = time.perf_counter()
    con.execute("SELECT count(*), sum(length(original_query)) FROM raw_traces").fetchall()
    scan = time.perf_counter() - start
    start = time.perf_counter()
    con.execute(f"COPY raw_traces TO '{target}' (FORMAT parquet)")
    return scan, time.perf_counter() - start


# --- the child processes of the scaling curve ------------------------------------------------

def _child(args: argparse.Namespace) -> None:
    """One step in a fresh process; prints one JSON line."""
    if args.child == "build":
        reset = _reset_peak()
        start = time.perf_counter()
        with _quiet(duckdb.connect(str(args.database))) as con:
            build_database(con, args.size)
            con.execute("CHECKPOINT")
        result = {"seconds": time.perf_counter() - start, "peak_mb": _peak_since_reset(reset),
                  "file_mb": args.database.stat().st_size / 2**20}
    else:
        con = _quiet(duckdb.connect(str(args.database)))
        if args.child_memory_limit:
            con.execute(f"SET memory_limit = '{args.child_memory_limit}'")
        limit = con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchall()[0]
        before, reset = _status_mb("VmRSS") or _maxrss_mb(), _reset_peak()
        if args.child == "bare":
            scan, copy = _bare(con, args.database.with_suffix(".parquet"))
            seconds, rows = scan + copy, _rows(con, "raw_traces")
            args.database.with_suffix(".parquet").unlink(missing_ok=True)
        else:
            stage = next(s for s in STAGES if s.name == args.child)
            start = time.perf_counter()
            stage.run(con)
            seconds, rows = time.perf_counter() - start, _rows(con, stage.table)
        con.close()
        result = {"seconds": seconds, "rows": rows, "before_mb": before, "peak_mb": _peak_since_reset(reset),
                  "maxrss_mb": _maxrss_mb(), "peak_reset": reset, "memory_limit": limit[0], "threads": limit[1]}
    print(json.dumps(result))


def _in_child(step: str, database: Path, size: int, memory_limit: str | None) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", step, "--database", str(database),
               "--size", str(size)] + (["--child-memory-limit", memory_limit] if memory_limit else [])
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{step} on {size:,} traces failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the parent -------------------------------------------------------------------------------

def compare(args: argparse.Namespace, stages: list[Stage]) -> dict:
    """The engine comparison on one world of --traces traces."""
    folder = args.workdir / "compare"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    lake = Lake.of(folder / "lake")
    out: dict[str, Any] = {"stages": {s.name: {} for s in stages}, "errors": []}
    con = _quiet(duckdb.connect(str(folder / "world.duckdb")))
    start = time.perf_counter()
    build_database(con, args.traces)
    con.execute("CHECKPOINT")
    out["build"] = time.perf_counter() - start
    out["days"] = con.execute("SELECT count(DISTINCT CAST(timezone('UTC', \"timestamp\") AS DATE)) "
                              "FROM raw_traces").fetchall()[0][0]
    out["scan"], out["copy"] = _bare(con, folder / "bare-raw_traces.parquet")
    print(f"world: {args.traces:,} traces over {out['days']} days, built in {out['build']:.2f} s "
          f"({folder / 'world.duckdb'})")
    print(f"bare DuckDB scan (count, sum(length(original_query))): {out['scan']:.3f} s (reference)")
    print(f"bare DuckDB COPY raw_traces TO parquet: {out['copy']:.3f} s (reference, the 'copy' ratios below)")

    for stage in stages:
        start = time.perf_counter()
        stage.run(con)
        out["stages"][stage.name]["duckdb"] = time.perf_counter() - start
        out["stages"][stage.name]["duckdb_rows"] = _rows(con, stage.table)
    signals = "trace_signals" in out["stages"]
    out["duckdb_signal_counts"] = signal_counts(con) if signals else None

    start = time.perf_counter()
    moved = migrate(con, lake, "lake")  # the deployment becomes lake-backed: the Spark engine's
    out["export"] = time.perf_counter() - start
    print(f"rag-loop lake migrate --to lake: {out['export']:.2f} s ({len(moved)} of {len(TRACE_SIZED)} tables, "
          f"{sum(f.stat().st_size for f in lake.path().rglob('*.parquet')) / 2**20:.0f} MB), "
          f"{out['export'] / out['copy']:.2f}x copy")
    for stage in stages:  # DuckDB again, the stages' tables in the lake now
        start = time.perf_counter()
        stage.run(con, DuckDBEngine(lake))
        out["stages"][stage.name]["duckdb_lake"] = time.perf_counter() - start
        print(f"  {stage.name} on DuckDB over the lake: {out['stages'][stage.name]['duckdb_lake']:.2f} s "
              f"({out['stages'][stage.name]['duckdb_lake'] / out['stages'][stage.name]['duckdb']:.2f}x embedded)")

    if not args.skip_spark:
        from rag_loop.engines.engine import SparkEngine, spark_session
        start = time.perf_counter()
        session = spark_session(args.spark_master, {"spark.driver.memory": args.spark_memory})
        session.sparkContext.setLogLevel("ERROR")
        engine = SparkEngine(session, lake)
        out["session"] = time.perf_counter() - start
        print(f"Spark session ({args.spark_master}, pyspark {session.version}): {out['session']:.2f} s "
              "(not counted in the stage times)")
        try:
            for run in ("spark", "spark_rerun"):
                for stage in stages:
                    start = time.perf_counter()
                    try:
                        stage.run(con, engine)
                    except Exception as error:  # a figure, not a gate: report it and go on
                        out["errors"].append(f"{stage.name} on Spark ({run}): {type(error).__name__}: {error}")
                        print(f"  {out['errors'][-1].splitlines()[0]}")
                        continue
                    out["stages"][stage.name][run] = time.perf_counter() - start
                    out["stages"][stage.name][f"{run}_rows"] = _rows(con, stage.table)
                if run == "spark" and signals and "spark" in out["stages"]["trace_signals"]:
                    out["spark_signal_counts"] = signal_counts(con)
        finally:
            session.stop()
    con.close()

    print()
    header = (f"{'stage':<20} {'DuckDB s':>9} {'Spark s':>9} {'rerun s':>9} {'Spark/DuckDB':>13} "
              f"{'DuckDB/copy':>12} {'Spark/copy':>11}  rows (DuckDB / Spark)")
    print(header)
    print("-" * len(header))
    for table, t in out["stages"].items():
        spark, rerun = t.get("spark"), t.get("spark_rerun")
        print(f"{table:<20} {t['duckdb']:>9.2f} {_fmt(spark, '9.2f')} {_fmt(rerun, '9.2f')} "
              f"{_ratio(spark, t['duckdb'], 13)} {t['duckdb'] / out['copy']:>11.2f}x "
              f"{_ratio(spark, out['copy'], 11)}  "
              f"{t['duckdb_rows']:,} / {_fmt(t.get('spark_rows'), ',')}")
    if not args.skip_spark:
        for table, t in out["stages"].items():
            same = t.get("spark_rows") == t["duckdb_rows"] and t.get("spark_rerun_rows", t["duckdb_rows"]) == \
                t["duckdb_rows"]
            t["same_rows"] = same
            print(f"{table} rows: DuckDB {t['duckdb_rows']:,}, Spark {_fmt(t.get('spark_rows'), ',')}, "
                  f"rerun {_fmt(t.get('spark_rerun_rows'), ',')}: {'equal' if same else 'DIFFERENT'}")
        if signals:
            same_signals = out["duckdb_signal_counts"] == out.get("spark_signal_counts")
            out["same_signals"] = same_signals
            print(f"trace_signals per-signal counts: {'equal' if same_signals else 'DIFFERENT'} "
                  f"(any signal: {out['duckdb_signal_counts']['any_signal']:,} on DuckDB, "
                  f"{_fmt(out.get('spark_signal_counts', {}).get('any_signal'), ',')} on Spark)")
    return out


def scaling(args: argparse.Namespace, stages: list[Stage], sizes: list[int], limits: list[str | None]) -> list[dict]:
    """The DuckDB path per size: one process builds the database, then one process per memory
    limit and stage."""
    folder = args.workdir / "scaling"
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    header = (f"{'traces':>11} {'limit':>8} {'step':<20} {'seconds':>8} {'traces/s':>11} {'RSS before MB':>14} "
              f"{'peak RSS MB':>12} {'peak-before MB':>15} {'ru_maxrss MB':>13} {'rows':>11}")
    said: set[str | None] = set()
    for size in sizes:
        database = folder / f"traces-{size}.duckdb"
        database.unlink(missing_ok=True)
        Path(f"{database}.wal").unlink(missing_ok=True)
        built = _in_child("build", database, size, None)
        print(f"{size:,} traces: built in {built['seconds']:.1f} s ({built['file_mb']:.0f} MB file, "
              f"builder peak {built['peak_mb']:.0f} MB)")
        for limit in limits:
            for step in ["bare", *[s.name for s in stages]]:
                result = {"size": size, "limit": limit or "default", "step": step,
                          **_in_child(step, database, size, limit)}
                if limit not in said:
                    said.add(limit)
                    print(f"  limit {limit or 'default'}: DuckDB memory_limit = {result['memory_limit']} "
                          f"({f'SET memory_limit = {limit!r}' if limit else 'not set: the DuckDB default'}), "
                          f"threads = {result['threads']}")
                    if len(said) == 1:
                        print("  peak RSS: the process's peak resident memory during the step ("
                              + ("VmHWM, reset right before it" if result["peak_reset"] else "ru_maxrss")
                              + "); ru_maxrss: getrusage's figure, never below the launching process's peak "
                              "(Linux keeps it across exec)")
                        print(header)
                        print("-" * len(header))
                rows.append(result)
                label = "bare scan + COPY" if step == "bare" else step
                print(f"{size:>11,} {result['limit']:>8} {label:<20} {result['seconds']:>8.2f} "
                      f"{size / result['seconds']:>11,.0f} {result['before_mb']:>14.0f} {result['peak_mb']:>12.0f} "
                      f"{result['peak_mb'] - result['before_mb']:>15.0f} {result['maxrss_mb']:>13.0f} "
                      f"{result['rows']:>11,}")
        if not args.keep:
            database.unlink(missing_ok=True)
            Path(f"{database}.wal").unlink(missing_ok=True)
    return rows


def _fmt(value, spec: str) -> str:
    """`value` formatted, or "-" (as wide as the spec says) when there is none."""
    if value is None:
        width = spec.split(".")[0].lstrip(",")
        return "-".rjust(int(width)) if width.isdigit() else "-"
    return format(value, spec)


def _ratio(value, reference: float, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value / reference:>{width - 1}.2f}x"


def summary(args: argparse.Namespace, stages: list[Stage], compared: dict, curve: list[dict],
            wall: float) -> None:
    print()
    print("=" * 30 + " summary " + "=" * 30)
    for stage in STAGES:
        if not stage.ported:
            print(f"{stage.name}: not ported yet ({stage.function.__name__} has no engine parameter): "
                  "left out of the comparison and the scaling curve")
    if compared:
        print(f"world {args.traces:,} traces / {compared['days']} days: build {compared['build']:.1f} s, "
              f"migrate {compared['export']:.2f} s; reference: scan {compared['scan']:.3f} s, "
              f"COPY {compared['copy']:.2f} s")
        for table, t in compared["stages"].items():
            line = f"  {table}: DuckDB {t['duckdb']:.2f} s ({t['duckdb'] / compared['copy']:.1f}x copy)"
            if "spark" in t:
                rerun = t.get("spark_rerun")
                line += (f", Spark {args.spark_master} {t['spark']:.1f} s first / {_fmt(rerun, '.1f')} s rerun "
                         f"({t['spark'] / t['duckdb']:.1f}x / {_fmt(rerun and rerun / t['duckdb'], '.1f')}x "
                         f"DuckDB), rows {'equal' if t.get('same_rows') else 'DIFFERENT'}")
            elif not args.skip_spark:
                line += ", Spark: failed"
            print(line)
        if "session" in compared:
            print(f"  Spark session start {compared['session']:.1f} s (apart)"
                  + (f"; trace_signals per-signal counts {'equal' if compared['same_signals'] else 'DIFFERENT'}"
                     if "same_signals" in compared else ""))
        for error in compared["errors"]:
            print(f"  ERROR {error.splitlines()[0]}")
    if curve:
        sizes = sorted({r["size"] for r in curve})
        small, large = sizes[0], sizes[-1]
        print(f"DuckDB scaling {small:,} -> {large:,} traces (x{large / small:.0f}), a process per step:")
        for limit in dict.fromkeys(r["limit"] for r in curve):
            effective = next(r["memory_limit"] for r in curve if r["limit"] == limit)
            print(f"  memory_limit {limit} ({effective}):")
            for step in ["bare", *[s.name for s in stages]]:
                a, b = (next(r for r in curve if (r["size"], r["limit"], r["step"]) == (n, limit, step))
                        for n in (small, large))
                print(f"    {'bare scan + COPY' if step == 'bare' else step}: peak RSS {a['peak_mb']:.0f} -> "
                      f"{b['peak_mb']:.0f} MB (x{b['peak_mb'] / a['peak_mb']:.2f}; above the process before it "
                      f"{a['peak_mb'] - a['before_mb']:.0f} -> {b['peak_mb'] - b['before_mb']:.0f} MB), "
                      f"{small / a['seconds']:,.0f} -> {large / b['seconds']:,.0f} traces/s")
    print(f"wall time: {wall:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000, help="size of the engine comparison's world")
    parser.add_argument("--scaling", default="100000,1000000,3000000",
                        help="sizes of the DuckDB scaling curve, comma-separated (empty: none)")
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/engines"))
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--spark-memory", default="2g",
                        help="spark.driver.memory (local mode: the executors' too; Spark's 1g default is "
                             "too small for retrieval_scores' broadcast at 1M traces)")
    parser.add_argument("--memory-limits", default="default,1GB",
                        help="DuckDB memory_limit values for the scaling curve, comma-separated, one pass "
                             "each ('default': not set)")
    parser.add_argument("--child-memory-limit", help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the scaling curve's databases")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--database", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    started = time.perf_counter()
    args.workdir = args.workdir.resolve()
    sizes = [int(s.replace("_", "")) for s in args.scaling.split(",") if s.strip()]
    stages = ported_stages()
    print(f"ported stages: {', '.join(s.name for s in stages) or 'none'}")
    for stage in STAGES:
        if not stage.ported:
            print(f"{stage.name}: not ported yet ({stage.function.__name__} takes no engine); left out")
    print()
    print(f"== engine comparison: {args.traces:,} traces ==" if args.traces > 0 else "== engine comparison: skipped ==")
    compared = compare(args, stages) if args.traces > 0 else {}
    print()
    print(f"== DuckDB scaling curve: {', '.join(f'{s:,}' for s in sizes)} traces, a fresh process per stage ==")
    limits = [None if v.strip().lower() == "default" else v.strip() for v in args.memory_limits.split(",") if v.strip()]
    curve = scaling(args, stages, sizes, limits or [None]) if sizes else []
    summary(args, stages, compared, curve, time.perf_counter() - started)
    if compared.get("errors"):
        sys.exit(1)


if __name__ == "__main__":
    main()
