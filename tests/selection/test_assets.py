"""The selection assets on the demo data: materialization, metadata and the planted events."""

import shutil

import pytest
from dagster import materialize
from dagster_duckdb import DuckDBResource

from assets.resources import DuckDBEngineResource, RagLoopPaths
from assets.selection import failure_candidates, trace_signals
from tests.helpers import demo_config, metadata_of, query


def test_materializations_report_counts_per_stream_signal_and_priority(demo_run):
    result, _, _ = demo_run
    signals = metadata_of(result, "trace_signals")
    assert signals["dagster/row_count"] >= 5000 and signals["signal_stale_source"] > 0
    candidates = metadata_of(result, "failure_candidates")
    assert candidates["stream_random"] > 0 and candidates["stream_bad_signal"] > 0
    assert candidates["priority_P0"] > 0 and candidates["priority_P1"] > 0
    assert candidates["expected_judge_cost_usd"] == pytest.approx(candidates["selected"] * 0.003)
    assert candidates["days_thinned"] == 14  # the default budget binds on every demo day
    estimates = metadata_of(result, "quality_estimates")
    assert estimates["any_signal_naive_rate_biased"] > estimates["any_signal_population_rate"]
    assert abs(estimates["any_signal_ht_rate"] - estimates["any_signal_population_rate"]) < 0.02


def test_rerun_selects_the_same_candidates(demo_run, tmp_path):
    _, database, _ = demo_run
    copy = tmp_path / "copy.duckdb"
    shutil.copy(database, copy)
    before = query(copy, "SELECT trace_id, inclusion_probability FROM failure_candidates ORDER BY 1")
    resources = {"duckdb": DuckDBResource(database=str(copy)), "engine": DuckDBEngineResource(),
                 "paths": RagLoopPaths(lake_dir=str(tmp_path / "lake"))}
    assert materialize([trace_signals, failure_candidates], resources=resources,
                       run_config=demo_config("loop")).success
    assert query(copy, "SELECT trace_id, inclusion_probability FROM failure_candidates "
                       "ORDER BY 1") == before
