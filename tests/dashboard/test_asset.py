"""The dashboard asset on a temporary DuckDB: it writes dashboard.json into the reports folder,
with the drift checks that fired in this instance, and links to its workspace page."""

import json

import duckdb
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    DagsterInstance,
    MaterializeResult,
    MetadataValue,
    asset,
    materialize,
)
from dagster_duckdb import DuckDBResource

from rag_loop_dagster.assets.dashboard import dashboard
from rag_loop_dagster.assets.resources import RagLoopPaths
from tests.dashboard.world import build

CONFIG = {"ops": {"dashboard": {"config": {"slo_targets": {"Faithfulness": 0.9}, "min_sample": 20}}}}


def _query_mix_check(fired: list[str], days: list[str]):
    """A stand-in for query_mix's run: its divergence check's result over `days` as day_checks
    records it (details per day, the days fired)."""
    @asset(name="query_mix", check_specs=[AssetCheckSpec("query_mix_divergence", asset="query_mix")])
    def query_mix():
        return MaterializeResult(check_results=[AssetCheckResult(
            check_name="query_mix_divergence", passed=not fired, severity=AssetCheckSeverity.WARN,
            description=f"fired on {len(fired)} of {len(days)} days",
            metadata={"days_fired": fired, "details": MetadataValue.json({d: {} for d in days})})])
    return query_mix


def test_dashboard_asset_writes_the_export(tmp_path):
    database = tmp_path / "rag.duckdb"
    with duckdb.connect(str(database)) as con:
        build(con)
    paths = RagLoopPaths(curation_dir=str(tmp_path / "curation"), reports_dir=str(tmp_path / "reports"),
                         goldens_dir=str(tmp_path / "goldens"), workspace_url="http://127.0.0.1:9999")
    resources = {"duckdb": DuckDBResource(database=str(database)), "paths": paths}
    instance = DagsterInstance.ephemeral()
    days = ["2026-11-10", "2026-11-11", "2026-11-12"]
    assert materialize([_query_mix_check(["2026-11-10", "2026-11-12"], days)], instance=instance).success
    assert materialize([_query_mix_check([], ["2026-11-12"])], instance=instance).success  # 11-12 again
    result = materialize([dashboard], resources=resources, instance=instance, run_config=CONFIG)
    assert result.success
    figures = json.loads((tmp_path / "reports" / "dashboard.json").read_text())
    # the newest run of a day decides it: 11-12 no longer fired, 11-10 still did
    assert [(a["day"], a["check"], a["severity"]) for a in figures["change"]["alerts"]] == [
        ("2026-11-10", "query_mix_divergence", "WARN")]
    assert figures["change"]["drift_checked"]
    assert figures["quality"]["targets"] == {"Faithfulness": 0.9} and figures["quality"]["slo"]
    metadata = result.asset_materializations_for_node("dashboard")[0].metadata
    assert metadata["dashboard_in_workspace"].value == "http://127.0.0.1:9999/dashboard"
    assert metadata["days"].value == 14 and metadata["alerts"].value == 1 and metadata["evals"].value == 2


def test_a_coverage_warning_is_an_alert_of_the_change_layer(tmp_path):
    """golden_coverage's share check (issue 48) is watched like the drift and SLO checks."""
    @asset(name="golden_coverage", check_specs=[AssetCheckSpec("golden_coverage_share", asset="golden_coverage")])
    def golden_coverage():  # a stand-in for the coverage run's check over two days, one under its floor
        return MaterializeResult(check_results=[AssetCheckResult(
            check_name="golden_coverage_share", passed=False, severity=AssetCheckSeverity.WARN,
            description="fired on 1 of 2 days", metadata={"days_fired": ["2026-11-12"], "details": MetadataValue.json(
                {"2026-11-11": {}, "2026-11-12": {"release": "v0001", "sampled": 80}})})])
    instance = DagsterInstance.ephemeral()
    assert materialize([golden_coverage], instance=instance).success
    paths = RagLoopPaths(reports_dir=str(tmp_path / "reports"))
    assert materialize([dashboard], resources={"duckdb": DuckDBResource(database=str(tmp_path / "rag.duckdb")),
                                               "paths": paths}, instance=instance, run_config=CONFIG).success
    figures = json.loads((tmp_path / "reports" / "dashboard.json").read_text())
    assert [(a["day"], a["asset"], a["check"], a["severity"], a["note"]) for a in figures["change"]["alerts"]] == [
        ("2026-11-12", "golden_coverage", "golden_coverage_share", "WARN", "fired on 1 of 2 days")]


def test_dashboard_asset_on_an_empty_database(tmp_path):
    paths = RagLoopPaths(reports_dir=str(tmp_path / "reports"))
    result = materialize([dashboard], resources={"duckdb": DuckDBResource(database=str(tmp_path / "rag.duckdb")),
                                                 "paths": paths})
    assert result.success
    figures = json.loads((tmp_path / "reports" / "dashboard.json").read_text())
    assert figures["product"]["traffic"] == [] and not figures["change"]["drift_checked"]


def test_the_dashboard_follows_drift_releases_and_evals():
    from rag_loop_dagster.definitions import defs
    assert defs.get_sensor_def("dashboard_after_runs").job_name == "dashboard_job"
    assert defs.resolve_job_def("dashboard_job").asset_layer.executable_asset_keys == {dashboard.key}
