"""The selection assets on the demo data: materialization, metadata and the planted events."""

import shutil

import pytest
from conftest import metadata_of, query
from dagster import materialize
from dagster_duckdb import DuckDBResource

from assets.selection import failure_candidates, trace_signals
from rag_loop.demo.generate import simulate
from rag_loop.signals import SignalSettings


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


def test_vietnamese_policy_regression_shows_by_prompt_version_and_language(demo_run):
    _, database, _ = demo_run
    rates = dict(query(database, """
        SELECT slice_value, sum(ht_rate * population_n) / sum(population_n) FROM quality_estimates
        WHERE slice = 'prompt_version × language' AND outcome = 'no_citation'
          AND day BETWEEN '2026-11-06' AND '2026-11-08' GROUP BY 1"""))
    assert rates["qa-v4 × vi"] > 0.25
    assert max(rates["qa-v3 × vi"], rates["qa-v4 × en"], rates["qa-v3 × en"]) < 0.02


def test_timeouts_and_stale_sources_land_on_their_planted_days(demo_run):
    _, database, _ = demo_run
    timeout = dict(query(database, "SELECT day::VARCHAR, avg(timeout::INT) FROM trace_signals "
                                    "GROUP BY 1"))
    assert timeout["2026-11-04"] > 0.05 > max(v for d, v in timeout.items() if d != "2026-11-04")
    stale = query(database, """
        SELECT document, min("timestamp") >= '2026-11-11 09:00:00+00',
               max("timestamp") <= '2026-11-11 15:30:00+00'
        FROM (SELECT unnest(stale_documents) AS document, "timestamp" FROM trace_signals
              WHERE stale_source AND day = '2026-11-11') GROUP BY ALL""")
    assert stale == [("password-policy@2024", True, True)]


def test_rephrase_detector_against_the_generator_ground_truth(demo_run):
    _, database, _ = demo_run
    traces = simulate(7)
    truth = {t["trace_id"] for t in traces if t.get("_rephrased")}
    flagged = {r[0] for r in query(database, "SELECT trace_id FROM trace_signals "
                                              "WHERE immediate_rephrase")}
    flagged &= {t["trace_id"] for t in traces}  # OTLP export re-encodes its trace ids
    precision = len(flagged & truth) / len(flagged)
    recall = len(flagged & truth) / len(truth)
    assert precision > 0.9 and recall > 0.3, (precision, recall, SignalSettings())


def test_rerun_selects_the_same_candidates(demo_run, tmp_path):
    _, database, _ = demo_run
    copy = tmp_path / "copy.duckdb"
    shutil.copy(database, copy)
    before = query(copy, "SELECT trace_id, inclusion_probability FROM failure_candidates ORDER BY 1")
    resources = {"duckdb": DuckDBResource(database=str(copy))}
    assert materialize([trace_signals, failure_candidates], resources=resources).success
    assert query(copy, "SELECT trace_id, inclusion_probability FROM failure_candidates "
                       "ORDER BY 1") == before
