"""One definition, two engines: each ported stage gives the same rows on Spark (over the trace
lake) as on DuckDB (over the database) — exactly, but for floats within 1e-12 — on the demo
world and on what real instrumentations write (tests/fixtures/otlp/); and a Spark rerun
changes nothing."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from rag_loop.engines.engine import SparkEngine
from rag_loop.engines.lake import export_lake
from rag_loop.ingest import ingest_directory
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables
from tests.engines.conftest import needs_spark
from tests.helpers import PROJECT, demo_copy

pytestmark = [needs_spark, pytest.mark.slow]
OTLP = PROJECT / "tests" / "fixtures" / "otlp" / "traces"


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
        else:
            assert a.map(_plain).tolist() == b.map(_plain).tolist(), column


def _plain(value):
    """A cell as comparable Python: lists as lists, missing as None."""
    if isinstance(value, np.ndarray | list):
        return [_plain(v) for v in value]
    return None if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NaT else value


def _on_both(spark, con: duckdb.DuckDBPyConnection, tmp_path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """trace_signals as the DuckDB engine left it in `con`, and as Spark computes it on the lake."""
    expected = con.execute("SELECT * FROM trace_signals").df()
    export_lake(con, tmp_path / "lake")
    engine = SparkEngine(spark, tmp_path / "lake")
    compute_signals(con, SignalSettings(), engine)
    return con.execute("SELECT * FROM trace_signals").df(), expected


def test_trace_signals_on_spark_are_duckdbs_on_the_demo_world_and_a_rerun_changes_nothing(spark, demo_run,
                                                                                           tmp_path):
    con = demo_copy(demo_run, tmp_path)
    schema = con.execute("DESCRIBE trace_signals").fetchall()
    on_spark, on_duckdb = _on_both(spark, con, tmp_path)
    assert len(on_duckdb) == 5227 and on_duckdb.signal_count.sum() > 1000
    assert_same_rows(on_spark, on_duckdb, "trace_id")
    assert con.execute("DESCRIBE trace_signals").fetchall() == schema  # the same column types
    compute_signals(con, SignalSettings(), SparkEngine(spark, tmp_path / "lake"))
    assert_same_rows(con.execute("SELECT * FROM trace_signals").df(), on_duckdb, "trace_id")


def test_trace_signals_on_spark_are_duckdbs_on_otlp_traffic(spark, tmp_path):
    con = duckdb.connect(str(tmp_path / "otlp.duckdb"))
    create_tables(con)
    ingest_directory(con, OTLP)
    compute_signals(con, SignalSettings())
    on_spark, on_duckdb = _on_both(spark, con, tmp_path)
    assert len(on_duckdb) == 132
    assert_same_rows(on_spark, on_duckdb, "trace_id")
