"""The selection assets on the demo data: materialization, metadata and the planted events."""

import shutil

import duckdb
import pandas as pd
import pytest
from dagster import DagsterInstance, materialize
from dagster_duckdb import DuckDBResource

from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop_dagster.assets.ingestion import raw_traces
from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
from rag_loop_dagster.assets.selection import failure_candidates, quality_estimates, trace_signals
from tests.helpers import demo_config, metadata_of, query, trace_line


def test_materializations_report_counts_per_stream_signal_and_priority(demo_run):
    result, _, _ = demo_run
    signals = metadata_of(result, "trace_signals")
    assert signals["dagster/row_count"] >= 5000 and signals["signal_stale_source"] > 0
    candidates = metadata_of(result, "failure_candidates")
    assert candidates["stream_random"] > 0 and candidates["stream_bad_signal"] > 0
    assert candidates["priority_P0"] > 0 and candidates["priority_P1"] > 0
    assert candidates["expected_judge_cost_usd"] == pytest.approx(candidates["selected"] * 0.003)
    assert candidates["days_thinned"] == 14  # the default budget binds on every demo day
    assert signals["stored_in"] == candidates["stored_in"] == "control database"  # on DuckDB: tables
    assert metadata_of(result, "raw_traces")["stored_in"] == "control database"
    estimates = metadata_of(result, "quality_estimates")
    assert estimates["any_signal_naive_rate_biased"] > estimates["any_signal_population_rate"]
    assert abs(estimates["any_signal_ht_rate"] - estimates["any_signal_population_rate"]) < 0.02


def test_rerun_selects_the_same_candidates(demo_run, tmp_path):
    _, database, _ = demo_run
    copy = tmp_path / "copy.duckdb"
    shutil.copy(database, copy)
    before = query(copy, "SELECT trace_id, inclusion_probability FROM failure_candidates ORDER BY 1")
    resources = {"duckdb": DuckDBResource(database=str(copy)), "engine": DuckDBEngineResource(),
                 "paths": RagLoopPaths()}
    assert materialize([trace_signals, failure_candidates], resources=resources,
                       run_config=demo_config("loop")).success
    assert query(copy, "SELECT trace_id, inclusion_probability FROM failure_candidates "
                       "ORDER BY 1") == before


def test_a_rerun_computes_only_the_days_that_changed(tmp_path):
    """The day-by-day selection assets record per day what they computed from (`day_state`): a
    rerun with nothing new computes no day, late traffic computes its day and the day before
    it, other settings or another database everything; the table is always the whole run's."""
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "a.jsonl").write_text("".join(
        trace_line(f"t{day}", timestamp=f"2026-11-0{day}T12:00:00+00:00") + "\n" for day in (1, 2, 3)))
    instance = DagsterInstance.ephemeral()

    def run(database="a.duckdb", similarity=None, stages=3) -> tuple[dict, ...]:
        """The first `stages` selection assets after raw_traces: what each computed."""
        resources = {"duckdb": DuckDBResource(database=str(tmp_path / database)), "engine": DuckDBEngineResource(),
                     "paths": RagLoopPaths(traces_dir=str(traces))}
        config = {"ops": {"trace_signals": {"config": {"rephrase_similarity": similarity}}}} if similarity else {}
        stage_assets = [trace_signals, failure_candidates, quality_estimates][:stages]
        result = materialize([raw_traces, *stage_assets], resources=resources, instance=instance, run_config=config)
        assert result.success
        keys = ("days_computed", "days_computed_list")
        return tuple({k: metadata_of(result, asset.key.to_user_string())[k] for k in keys} for asset in stage_assets)

    assert run() == ({"days_computed": "all", "days_computed_list": "all"},) * 3
    assert run() == ({"days_computed": 0, "days_computed_list": "none"},) * 3
    (traces / "b.jsonl").write_text(trace_line("late", timestamp="2026-11-02T23:59:00+00:00") + "\n")
    signals, candidates, estimates = run()
    assert signals["days_computed_list"] == "2026-11-01, 2026-11-02"
    assert candidates["days_computed_list"] == estimates["days_computed_list"] == "2026-11-02"
    with duckdb.connect(str(tmp_path / "a.duckdb")) as con:
        con.execute("SET TimeZone = 'UTC'")
        incremental = con.execute("SELECT * FROM trace_signals ORDER BY trace_id").df()
        compute_signals(con, SignalSettings())
        pd.testing.assert_frame_equal(incremental, con.execute("SELECT * FROM trace_signals ORDER BY trace_id").df())
    # what makes trace_signals compute every day (the later stages then follow from its rows, above)
    assert run(similarity=0.5, stages=1)[0]["days_computed"] == "all"
    assert run(database="b.duckdb", stages=1)[0]["days_computed"] == "all"
