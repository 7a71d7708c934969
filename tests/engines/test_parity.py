"""One definition, two engines: each ported stage gives the same rows on Spark (over the trace
lake) as on DuckDB (over the database) — exactly, but for floats within 1e-12, and with the
same column types — on the demo world and on what real instrumentations write
(tests/fixtures/otlp/); and a Spark rerun changes nothing, in the table or in the lake."""

import duckdb
import numpy as np
import pandas as pd
import pytest

from rag_loop.engines.engine import SparkEngine
from rag_loop.engines.lake import export_lake
from rag_loop.ingest import ingest_directory
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables
from tests.engines.conftest import needs_spark
from tests.helpers import PROJECT, demo_config, demo_copy

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


PORTED = ("trace_signals", "failure_candidates")


def _on_both(spark, con: duckdb.DuckDBPyConnection, tmp_path, policy: SamplingPolicy) -> dict[str, tuple]:
    """Each ported stage's rows as the DuckDB engine left them in `con`, and as Spark computes
    them on the lake: {stage: (on Spark, on DuckDB)}."""
    expected = {stage: con.execute(f"SELECT * FROM {stage}").df() for stage in PORTED}
    export_lake(con, tmp_path / "lake")
    engine = SparkEngine(spark, tmp_path / "lake")
    compute_signals(con, SignalSettings(), engine)
    select_candidates(con, policy, engine)
    return {stage: (con.execute(f"SELECT * FROM {stage}").df(), expected[stage]) for stage in PORTED}


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
        assert_same_rows(on_spark, on_duckdb, "trace_id")
        assert con.execute(f"DESCRIBE {stage}").fetchall() == schemas[stage], stage  # the same types


def test_the_stages_on_spark_are_duckdbs_on_otlp_traffic_and_a_rerun_changes_nothing(spark, tmp_path):
    con = duckdb.connect(str(tmp_path / "otlp.duckdb"))
    create_tables(con)
    ingest_directory(con, OTLP)
    compute_signals(con, SignalSettings())
    select_candidates(con, SamplingPolicy())
    both = _on_both(spark, con, tmp_path, SamplingPolicy())
    assert len(both["trace_signals"][1]) == 132 and len(both["failure_candidates"][1]) >= 3
    for on_spark, on_duckdb in both.values():
        assert_same_rows(on_spark, on_duckdb, "trace_id")
    files = sorted(p.relative_to(tmp_path) for p in (tmp_path / "lake").rglob("*.parquet"))
    again = _on_both(spark, con, tmp_path, SamplingPolicy())  # the same lake, computed again
    for stage, (on_spark, _) in again.items():
        assert_same_rows(on_spark, both[stage][1], "trace_id")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "lake").rglob("*.parquet")) == files
