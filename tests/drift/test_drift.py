"""Drift statistics, checks, the demo's planted events per day, and the schedule."""

from datetime import UTC, date, datetime

import duckdb
import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from rag_loop.drift.checks import Limit, assess
from rag_loop.drift.days import RetrievalSettings, retrieval_day
from rag_loop.drift.stats import js_divergence, psi, top_movers
from tests.helpers import fake_embedder, undeclared_tables


def test_js_divergence_against_scipy_and_by_hand():
    now, before = {"en": 60, "vi": 40}, {"en": 50, "vi": 30, "fr": 20}
    p, q = np.array([0.6, 0.0, 0.4]), np.array([0.5, 0.2, 0.3])  # keys sorted: en, fr, vi
    assert js_divergence(now, before) == pytest.approx(jensenshannon(p, q, base=2) ** 2)
    assert js_divergence({"a": 5}, {"a": 9}) == 0.0
    assert js_divergence({"a": 1}, {"b": 1}) == pytest.approx(1.0)
    assert np.isnan(js_divergence({"a": 1}, {}))


def test_psi_by_hand():
    # shares 0.6/0.4 now vs 0.5/0.5: (0.1 ln 1.2) + (-0.1 ln 0.8)
    assert psi({"a": 60, "b": 40}, {"a": 50, "b": 50}) == pytest.approx(0.1 * np.log(1.2) - 0.1 * np.log(0.8))


def test_top_movers_orders_by_share_change():
    movers = top_movers({"pay": 30, "faq": 70}, {"pay": 5, "faq": 90, "legal": 5}, k=2)
    assert [m["value"] for m in movers] == ["pay", "faq"] and movers[0]["share"] == 0.3


def test_checks_honour_minimum_sample_direction_and_missing_baseline():
    limit = Limit(warn=0.05, error=0.1, min_sample=30)
    assert assess("x", 0.5, 10, limit).fired is False  # too few
    assert assess("x", None, 100, limit).note.startswith("no value")
    assert assess("x", float("nan"), 100, limit).fired is False
    assert assess("x", 0.07, 100, limit).severity == "WARN"
    assert assess("x", 0.2, 100, limit).severity == "ERROR"
    assert assess("x", 0.9, 5, Limit(0.95, 0.95, higher_is_bad=False, min_sample=1)).severity == "ERROR"


EVENT_DAYS = {  # data/demo/EVENTS.md, check by check
    "quality_slo": {"11-04", "11-06", "11-07", "11-08", "11-11", "11-12", "11-13"},
    "quality_vs_baseline": {"11-04", "11-06", "11-07", "11-08", "11-11", "11-12", "11-13"},
    "freshness_within_slo": {"11-11"}, "stale_retrieval_rate": {"11-11"},
    "stale_retrieval_vs_baseline": {"11-11"},
    "query_mix_divergence": {"11-12", "11-13"}, "query_mix_novel_share": {"11-12"},
    "retrieval_empty_rate": set(),
}
QUIET_DAYS = {"11-01", "11-02", "11-03", "11-05", "11-14"}


def test_each_planted_event_fires_its_check_on_its_day(drift_days):
    fired, tables, _ = drift_days
    assert set(tables.values()) == {14}
    for check, days in EVENT_DAYS.items():
        assert {d for d, checks in fired.items() if check in checks} == days, check
    shift = sorted(d for d, checks in fired.items() if "retrieval_score_shift" in checks)
    assert shift[0] == "11-09" and set(shift) <= {"11-09", "11-10", "11-11", "11-12", "11-13"}
    assert fired["11-09"]["retrieval_score_shift"] == "ERROR"
    assert fired["11-11"]["freshness_within_slo"] == "ERROR"


def test_nothing_fires_on_quiet_days(drift_days):
    fired, _, _ = drift_days
    assert {d: checks for d, checks in fired.items() if d in QUIET_DAYS and checks} == {}


def test_first_day_has_no_baseline_and_a_rerun_of_a_day_is_idempotent(drift_days):
    _, _, database = drift_days
    with duckdb.connect(str(database)) as con:
        first = con.execute("SELECT baseline_n, ks_statistic FROM retrieval_scores "
                            "WHERE day = '2026-11-01' AND slice = 'all'").fetchall()
        assert first == [(0, None)]
        before = con.execute("SELECT count(*) FROM retrieval_scores").fetchall()
        verdicts = retrieval_day(con, date(2026, 11, 1), RetrievalSettings())
        assert con.execute("SELECT count(*) FROM retrieval_scores").fetchall() == before
        assert not any(v.fired for v in verdicts)
        look_ahead = con.execute("""
            SELECT count(*) FROM traffic_intents t JOIN intent_clusters c USING (cluster_id)
            WHERE CAST(timezone('UTC', c.first_seen) AS DATE) >= t.day""").fetchall()[0][0]
        assert look_ahead == 0  # a day's traffic is placed only in clusters known before it


def test_schedule_requests_yesterdays_partition():
    from dagster import build_schedule_context

    from rag_loop_dagster.assets.drift import drift_schedule
    context = build_schedule_context(scheduled_execution_time=datetime(2026, 11, 15, 1, 30, tzinfo=UTC))
    request = drift_schedule(context)
    assert request.partition_key == "2026-11-14" and request.run_key == "drift-2026-11-14"


def test_drift_assets_materialize_a_partition_with_their_checks(drift_days, tmp_path):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.drift import DRIFT_ASSETS
    from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
    _, _, database = drift_days
    result = materialize(DRIFT_ASSETS, partition_key="2026-11-11", resources={
        "duckdb": DuckDBResource(database=str(database)), "embedder": fake_embedder(),
        "engine": DuckDBEngineResource(), "paths": RagLoopPaths()})
    assert result.success  # drift checks warn and alert; they do not block
    failed = {c.check_name: c.severity.value for c in result.get_asset_check_evaluations() if not c.passed}
    assert failed["freshness_within_slo"] == "ERROR" and failed["stale_retrieval_rate"] == "ERROR"
    assert "query_mix_divergence" not in failed
    assert undeclared_tables(database) == set()
    links = {e.asset_key.path[-1]: e.materialization.metadata.get("in_workspace")
             for e in result.get_asset_materialization_events()}  # each asset's figures in the workspace
    links = {k: v.value for k, v in links.items() if v is not None}  # (not the part tables)
    assert links == {"query_mix": "http://127.0.0.1:8765/dashboard#change",
                     "freshness_lag": "http://127.0.0.1:8765/dashboard#change",
                     "retrieval_scores": "http://127.0.0.1:8765/dashboard#change",
                     "quality_slis": "http://127.0.0.1:8765/dashboard#quality"}


def test_a_partition_without_traffic_says_its_checks_were_not_evaluated(drift_days, tmp_path):
    """No trace on the day nor in its baseline: the traffic checks fail at WARN saying they
    were not evaluated, instead of passing."""
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.drift import DRIFT_ASSETS
    from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
    _, _, database = drift_days
    result = materialize(DRIFT_ASSETS, partition_key="2026-10-01", resources={
        "duckdb": DuckDBResource(database=str(database)), "embedder": fake_embedder(),
        "engine": DuckDBEngineResource(), "paths": RagLoopPaths()})
    assert result.success
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    for name in ("query_mix_divergence", "retrieval_empty_rate", "retrieval_score_shift", "quality_slo"):
        assert not checks[name].passed and checks[name].severity.value == "WARN", name
        assert checks[name].metadata["outcome"].value.startswith("not evaluated"), name
        assert checks[name].metadata["days_not_evaluated"].value == ["2026-10-01"], name
