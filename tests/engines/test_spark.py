"""One definition, two engines (every test here runs Spark, in one session per worker): the
registry's functions agree, and each ported stage gives the same rows on Spark (over the trace
lake) as on DuckDB (over the database) — exactly, but for floats within 1e-12, and with the
same column types — on the demo world and on what real instrumentations write
(tests/fixtures/otlp/), through the Dagster resource over Spark Connect too; and a Spark rerun
changes nothing, in the table or in the lake."""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import date
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from rag_loop.drift.days import FreshnessSettings, RetrievalSettings, freshness_day, retrieval_day
from rag_loop.drift.figures import mix_counts, retrieval_figures
from rag_loop.engines.engine import DuckDBEngine, SparkEngine
from rag_loop.engines.functions import SPARK
from rag_loop.ingest import ingest_directory
from rag_loop.online.quality import OnlineQualitySettings, online_quality_day
from rag_loop.selection.estimates import estimate_rates, parse_slices
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.sampling_expressions import SampleDays, novelty_sample_expression, novelty_traffic_expression
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.deployment import migrate
from rag_loop.store.lake import Lake
from rag_loop.store.tables import relation_kind
from tests.engines.conftest import needs_spark
from tests.engines.test_functions import _expression, _frame, _on_duckdb
from tests.helpers import PROJECT, demo_config, demo_copy

pytestmark = [needs_spark, pytest.mark.slow]
OTLP = PROJECT / "tests" / "fixtures" / "otlp" / "traces"
CONNECT_RUN = PROJECT / "tests" / "engines" / "scripts" / "assets_on_spark_connect.py"


def assert_same_rows(spark_rows: pd.DataFrame, duckdb_rows: pd.DataFrame, key: str) -> None:
    assert list(spark_rows.columns) == list(duckdb_rows.columns)
    assert len(spark_rows) == len(duckdb_rows)
    left = spark_rows.sort_values(key).reset_index(drop=True)
    right = duckdb_rows.sort_values(key).reset_index(drop=True)
    for column in left.columns:
        a, b = left[column], right[column]
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            assert (a.isna() == b.isna()).all(), column
            assert np.allclose(a[a.notna()].astype(float), b[b.notna()].astype(float), rtol=0, atol=1e-12), column
        elif not _equal_cells(a, b):
            assert a.map(_plain).tolist() == b.map(_plain).tolist(), column


def _equal_cells(a: pd.Series, b: pd.Series) -> bool:
    """Whether each cell of `a` equals `b`'s as it is, which implies their `_plain` values are
    equal: most columns are settled without mapping every cell; a NaN, NaT, pd.NA or array
    cell leaves the decision to `_plain`."""
    try:
        return a.tolist() == b.tolist()
    except (TypeError, ValueError):  # arrays and pd.NA have no plain truth value
        return False


def _plain(value):
    """A cell as comparable Python: lists as lists, missing as None."""
    if isinstance(value, np.ndarray | list):
        return [_plain(v) for v in value]
    return None if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NaT \
        or value is pd.NA else value


PORTED = ("trace_signals", "failure_candidates")


def _on_both(spark, con: duckdb.DuckDBPyConnection, tmp_path, policy: SamplingPolicy,
             stages: tuple[str, ...] = PORTED) -> dict[str, tuple]:
    """Each ported stage's rows as the DuckDB engine left them in `con`, and as Spark computes
    them on the lake (`stages` of them; the others' rows migrate to it): {stage: (on Spark, on DuckDB)}."""
    expected = {stage: con.execute(f"SELECT * FROM {stage}").df() for stage in stages}
    migrate(con, Lake.of(tmp_path / "lake"), "lake")  # the deployment becomes lake-backed
    engine = SparkEngine(spark, tmp_path / "lake")
    if "trace_signals" in stages:
        compute_signals(con, SignalSettings(), engine)
    select_candidates(con, policy, engine)
    return {stage: (con.execute(f"SELECT * FROM {stage}").df(), expected[stage]) for stage in stages}


def _demo_policy() -> SamplingPolicy:
    config = demo_config("loop")["ops"]["failure_candidates"]["config"]
    return SamplingPolicy(query_type_rates=config["query_type_rates"],
                          high_risk_query_types=tuple(config["high_risk_query_types"]))


def test_the_stages_on_spark_are_duckdbs_on_the_demo_world(spark, demo_run, tmp_path):
    con = demo_copy(demo_run, tmp_path)
    schemas = {stage: con.execute(f"DESCRIBE {stage}").fetchall() for stage in PORTED}
    both = _on_both(spark, con, tmp_path, _demo_policy())
    signals, candidates = both["trace_signals"][1], both["failure_candidates"][1]
    assert len(signals) == 5227 and signals.signal_count.sum() > 1000
    assert len(candidates) > 1000 and candidates.by_novelty.sum() > 0 and (candidates.thinning < 1).any()
    for stage, (on_spark, on_duckdb) in both.items():
        assert relation_kind(con, stage) == "view"  # of the lake's day files: no copy in the database
        assert_same_rows(on_spark, on_duckdb, "trace_id")
        assert con.execute(f"DESCRIBE {stage}").fetchall() == schemas[stage], stage  # the same types
    slices = (("language",), ("query_type", "language"))
    on_duckdb = estimate_rates(con, slices)
    on_spark = estimate_rates(con, slices, engine=SparkEngine(spark, tmp_path / "lake"))
    assert len(on_duckdb) > 500 and on_duckdb.random_n.sum() > 0
    pd.testing.assert_frame_equal(on_spark, on_duckdb, check_exact=False, rtol=0, atol=1e-12)
    mix_on_duckdb = mix_counts(con, date(2026, 11, 12), 7)
    mix_on_spark = mix_counts(con, date(2026, 11, 12), 7, engine=SparkEngine(spark, tmp_path / "lake"))
    assert len(mix_on_duckdb) > 100 and set(mix_on_duckdb.dimension) == {"language", "query_type", "tenant", "length"}
    pd.testing.assert_frame_equal(mix_on_spark, mix_on_duckdb)
    _the_drift_days_are_duckdbs(spark, con, tmp_path / "lake")
    _online_quality_is_duckdbs(spark, con, tmp_path / "lake")
    engines = (DuckDBEngine(), SparkEngine(spark, tmp_path / "lake"))
    sample = [engine.frame(con, ("raw_traces",), novelty_sample_expression, SampleDays(40)) for engine in engines]
    assert len(sample[0]) == 14 * 2 * 40  # days × languages × 40
    pd.testing.assert_frame_equal(sample[1], sample[0])
    traffic = [engine.frame(con, ("raw_traces",), novelty_traffic_expression, None).sort_values(["day", "language"])
               .reset_index(drop=True) for engine in engines]
    assert len(traffic[0]) == 14 * 2
    pd.testing.assert_frame_equal(traffic[1], traffic[0])


def test_a_budget_that_caps_the_random_stream_selects_the_same_rows_on_spark(spark, demo_run, tmp_path):
    """10 traces a day on the demo world (issue 42): every day's ~18 random draws are cut to the
    5 smallest, its random rate lowered to the 6th, the diagnostic streams thinned into the
    other 5; Spark gives DuckDB's rows, the whole table and one day alone (over the signals
    DuckDB computed: Spark's are DuckDB's, test_the_stages_on_spark_are_duckdbs_on_the_demo_world)."""
    con = demo_copy(demo_run, tmp_path)
    policy = replace(_demo_policy(), daily_budget_usd=0.03)
    select_candidates(con, policy)
    on_spark, on_duckdb = _on_both(spark, con, tmp_path, policy, ("failure_candidates",))["failure_candidates"]
    per_day = on_duckdb.groupby("day").agg(selected=("trace_id", "size"), random=("by_random", "sum"),
                                           rate=("p_random", "max"))
    assert len(per_day) == 14 and (per_day.selected == 10).all() and (per_day.random == 5).all()
    assert (per_day.rate < 0.05).all() and (on_duckdb.thinning < 1).all()
    assert_same_rows(on_spark, on_duckdb, "trace_id")
    select_candidates(con, policy, SparkEngine(spark, tmp_path / "lake"), days=[date(2026, 11, 9)])
    assert_same_rows(con.execute("SELECT * FROM failure_candidates").df(), on_duckdb, "trace_id")


def test_a_days_run_on_spark_opens_no_other_days_file_rewrites_only_its_days_and_engines_take_turns(
        spark, demo_run, tmp_path):
    """Chunks and feedback carry their trace's day, the lake's partition: two days' signals on
    Spark read the files of the days they need (those and the next) and never open another's
    (every other day's chunk and feedback file is made unreadable meanwhile); their lake files
    are rewritten, the other days' untouched, the rows are DuckDB's and the database's table a
    view of the lake. Then a day on DuckDB, a day on Spark and the whole table on DuckDB: the
    rows stay in the lake (the deployment's home for them), the same rows every time."""
    con = demo_copy(demo_run, tmp_path)
    lake, days = Lake.of(tmp_path / "lake"), [date(2026, 11, 9), date(2026, 11, 10)]
    signals = con.execute("SELECT * FROM trace_signals").df()
    migrate(con, lake, "lake")
    files = {d: lake.files("trace_signals", [d]) for d in days}
    others = lake.files("trace_signals", set(lake.days("trace_signals")) - set(days))
    hidden = {}
    for table in ("trace_chunks", "trace_feedback"):
        for day in lake.days(table):
            if day not in (*days, date(2026, 11, 11)):
                for path in lake.files(table, [day]):
                    hidden[path] = Path(path).read_bytes()
                    Path(path).write_bytes(b"not a parquet file")
    engine = SparkEngine(spark, lake)
    assert compute_signals(con, SignalSettings(), engine, days=days) == signals.day.dt.date.isin(days).sum() > 500
    assert all(set(lake.files("trace_signals", [d])).isdisjoint(files[d]) for d in days)  # new files
    assert lake.files("trace_signals", set(lake.days("trace_signals")) - set(days)) == others
    assert relation_kind(con, "trace_signals") == "view"  # the rows stay in the lake
    assert lake.days("trace_signals") == sorted(set(signals.day.dt.date))
    assert_same_rows(con.execute("SELECT * FROM trace_signals").df(), signals, "trace_id")
    for path, content in hidden.items():
        Path(path).write_bytes(content)
    compute_signals(con, SignalSettings(), DuckDBEngine(lake), days=days[1:])
    assert relation_kind(con, "trace_signals") == "view"
    assert_same_rows(con.execute("SELECT * FROM trace_signals").df(), signals, "trace_id")
    compute_signals(con, SignalSettings(), engine, days=days[:1])
    assert relation_kind(con, "trace_signals") == "view"
    assert lake.days("trace_signals") == sorted(set(signals.day.dt.date))
    from_lake = engine.frame(con, ("trace_signals",), lambda t, columns, _: t["trace_signals"].select(*columns),
                             list(signals.columns))
    assert_same_rows(from_lake, signals, "trace_id")
    compute_signals(con, SignalSettings(), DuckDBEngine(lake))
    assert relation_kind(con, "trace_signals") == "view"
    assert lake.days("trace_signals") == sorted(set(signals.day.dt.date))
    assert_same_rows(con.execute("SELECT * FROM trace_signals").df(), signals, "trace_id")


def _online_quality_is_duckdbs(spark, con: duckdb.DuckDBPyConnection, lake) -> None:
    """The day's traffic per slice and its application cost, counted on Spark, give the same
    online_quality and online_cost rows."""
    day, settings = date(2026, 11, 12), OnlineQualitySettings(slo_targets={"Faithfulness": 0.9})
    tables = []
    for engine in (None, SparkEngine(spark, lake)):
        online_quality_day(con, day, settings, engine)
        tables.append([con.execute(f"SELECT * FROM {t} WHERE day = ? ORDER BY ALL", [day]).df()
                       for t in ("online_quality", "online_cost")])
    on_duckdb, on_spark = tables
    assert on_duckdb[0].population_n.sum() > 1000 and on_duckdb[1].requests.iloc[0] > 300
    for got, expected in zip(on_spark, on_duckdb):
        pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=0, atol=1e-12)


def _the_drift_days_are_duckdbs(spark, con: duckdb.DuckDBPyConnection, lake) -> None:
    """The planted index rebuild (11-09: the rerank score shift) and stale password policy
    (11-11: stale retrieval) give the same figures and verdicts on Spark, whose caches of the
    parts read several times (`Functions.reuse`) are released after the query."""
    for run, table, day, planted in ((retrieval_day, "retrieval_scores", date(2026, 11, 9), "retrieval_score_shift"),
                                     (freshness_day, "stale_retrieval", date(2026, 11, 11), "stale_retrieval_rate")):
        settings = RetrievalSettings() if run is retrieval_day else FreshnessSettings()
        on_duckdb = run(con, day, settings)
        expected = con.execute(f"SELECT * FROM {table} WHERE day = ?", [day]).df()
        on_spark = run(con, day, settings, SparkEngine(spark, lake))
        assert not spark.sql("SHOW VIEWS LIKE 'rag_loop_reused*'").collect()  # released
        pd.testing.assert_frame_equal(con.execute(f"SELECT * FROM {table} WHERE day = ?", [day]).df(), expected,
                                      check_exact=False, rtol=0, atol=1e-12)
        assert [(v.name, v.fired, v.severity, v.n) for v in on_spark] == [
            (v.name, v.fired, v.severity, v.n) for v in on_duckdb]
        assert [v.value for v in on_spark] == pytest.approx([v.value for v in on_duckdb], abs=1e-12)
        assert {v.name: v.severity for v in on_spark if v.fired}[planted] == "ERROR"


def _otlp_on_duckdb(tmp_path) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The OTLP fixtures' ported tables and language estimates, all on DuckDB."""
    with duckdb.connect(str(tmp_path / "expected.duckdb")) as con:
        ingest_directory(con, OTLP)
        compute_signals(con, SignalSettings())
        select_candidates(con, SamplingPolicy())
        expected = {t: con.execute(f"SELECT * FROM {t}").df() for t in PORTED}
        estimates = estimate_rates(con, parse_slices(["language"]))
        day = con.execute("SELECT max(day) FROM trace_signals").fetchall()[0][0]
        expected["retrieval"] = retrieval_figures(con, day, 7)
    assert len(expected["trace_signals"]) == 132 and len(expected["failure_candidates"]) >= 3
    assert expected["retrieval"].n.max() > 0
    return expected, estimates


def test_the_spark_resource_on_a_spark_connect_url_stores_what_duckdb_does_and_a_rerun_changes_nothing(
        spark_connect_url, tmp_path):
    """raw_traces → trace_lake → trace_signals → failure_candidates → quality_estimates in a
    run worker whose Spark resource is a Spark Connect URL (the server: this session's JVM, on
    loopback), over the OTLP fixtures, ingested into the lake (tests/store/test_lake_ingest.py
    compares every ingestion table, and later files' over two runs): the same rows as on DuckDB,
    and the same retrieval figures (whose parts read several times the executors cache); a daily
    trace_signals run computes no day and leaves the lake's files. (A Spark rerun's rows and
    files: test_a_days_run_on_spark_opens_no_other_days_file_rewrites_only_its_days_and_engines_take_turns.)
    pyspark allows one kind of session per process: hence the worker's own process, as Dagster runs it."""
    expected, estimates = _otlp_on_duckdb(tmp_path)
    database = tmp_path / "over-connect.duckdb"
    shutil.copytree(OTLP, tmp_path / "traces")  # the run's folder, none of the fixtures' own
    done = subprocess.run([sys.executable, str(CONNECT_RUN), spark_connect_url, str(tmp_path / "traces"),
                           str(tmp_path / "lake"),
                           str(database)], env={**os.environ, "PYTHONPATH": str(PROJECT)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["success"] == [True, True] and outcome["connect"]
    assert outcome["raw_traces_rows"] == 132
    assert outcome["days_computed_daily"] == 0  # the lake's files unchanged: their fingerprints too
    assert outcome["files_again"] == outcome["files"]
    lake = (tmp_path / "lake").resolve()
    assert outcome["stored_in"] == {name: f"trace lake: {lake / name} (a Delta table; the control database holds a "
                                          "view of its files)" for name in ("raw_traces", *PORTED)}
    assert {Path(f).parts[0] for f in outcome["files"]} == {
        "failure_candidates", "otlp_spans", "otlp_traces", "raw_traces", "trace_chunks", "trace_spans",
        "trace_signals"}  # no feedback in the OTLP fixtures, no knowledge base: those tables have no file
    pd.testing.assert_frame_equal(pd.read_parquet(f"{database}.retrieval.parquet"), expected.pop("retrieval"),
                                  check_exact=False, rtol=0, atol=1e-12)
    with duckdb.connect(str(database)) as con:
        for table, rows in expected.items():
            assert_same_rows(con.execute(f"SELECT * FROM {table}").df(), rows, "trace_id")
        stored = con.execute("SELECT * FROM quality_estimates").df()
    pd.testing.assert_frame_equal(stored, estimates, check_exact=False, rtol=0, atol=1e-12, check_names=False)


def test_spark_and_duckdb_spell_every_function_alike(spark, tmp_path):
    frame = _frame()
    expected = _on_duckdb(frame)
    spark.createDataFrame(frame).createOrReplaceTempView("functions_input")
    engine = SparkEngine(spark, tmp_path)
    got = engine.backend.execute(_expression(engine.backend.table("functions_input"), SPARK))
    got = got.sort_values("i").reset_index(drop=True)
    assert got.folded.tolist() == expected.folded.tolist()
    assert got.us.tolist() == expected.us.tolist()
    assert [d.date() for d in got.day] == [d.date() for d in expected.day]
    assert (got.draw - expected.draw).abs().max() == 0
