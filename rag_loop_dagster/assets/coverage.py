"""Golden coverage (issue 48): per day, how much of production the newest golden release covers,
by intent and slice, with a check that warns when covered traffic falls under a floor."""

from pathlib import Path

import pyarrow as pa
from dagster import AssetExecutionContext, AssetSelection, Config, MaterializeResult, MetadataValue, define_asset_job
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.drift.checks import Limit
from rag_loop.goldens.coverage import (
    CHECK,
    INTENT_COVERAGE_FILE,
    CoverageSettings,
    coverage_day,
    intent_coverage,
    largest_uncovered,
    release_goldens,
)
from rag_loop.store.files import write_parquet_atomically
from rag_loop_dagster.assets.daily import DAILY, check_specs, daily, day_checks, partition_days, series_chart
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, EngineResource, RagLoopPaths
from rag_loop_dagster.assets.stage import stage_asset

_DEFAULTS = CoverageSettings()


class CoverageConfig(Config):
    min_share: float = Field(_DEFAULTS.min_share.warn,
                             description="WARN when the covered share of the day's traffic (Σ 1/π of "
                                         "sampled traces in intents with a golden) is below this.")
    min_sample: int = Field(_DEFAULTS.min_share.min_sample,
                            description="Fewer sampled traces with an intent that day: not evaluated.")
    release: str | None = Field(None, description="Release to measure (vNNNN); null: the newest.")
    baseline_days: int = Field(_DEFAULTS.baseline_days,
                               description="Trailing days an intent's failure rate is compared with.")
    rising_by: float = Field(_DEFAULTS.rising_by, description="Failure-rate increase (points of 1) "
                                                              "that marks an uncovered intent as rising.")
    min_assessed: int = Field(_DEFAULTS.min_assessed,
                              description="Judged or labelled traces of an intent that day, for its rate.")


@stage_asset(**daily("drift"),
             deps=["raw_traces", "failure_candidates", "trace_clusters", "intent_clusters",
                   "trace_judgments", "current_labels", "golden_releases"],
             parts={"golden_coverage_intents": "Per day, intent and slice value: volume (Σ 1/π), "
                                               "covered by the release, failure rate vs baseline"},
             check_specs=check_specs("golden_coverage", {
                 CHECK: "Share of the day's traffic in intents the newest release holds a golden "
                        "of, against its floor (WARN); not evaluated without a release or data."}),
             description="Per day and slice (language, tenant, query_type): the day's traffic, the "
                         "share in intents the newest golden release covers (Horvitz-Thompson over "
                         "the sampled traces' intents; the counts on the engine resource: DuckDB, or "
                         "Spark over the trace lake), the largest uncovered intents and those "
                         "whose failure rate rises while uncovered.")
def golden_coverage(context: AssetExecutionContext, config: CoverageConfig, duckdb: DuckDBResource,
                    engine: EngineResource, paths: RagLoopPaths) -> MaterializeResult:
    settings = CoverageSettings(Limit(config.min_share, None, False, config.min_sample), config.baseline_days,
                                config.rising_by, config.min_assessed)
    goldens = release_goldens(Path(paths.goldens_dir), config.release)
    context.log.info(f"golden_coverage: release {goldens.version or 'none'}")
    on = engine.engine()  # the traffic-sized counts: DuckDB, or Spark over the trace lake
    with duckdb.get_connection() as con:
        result = day_checks(context, [CHECK], lambda day: coverage_day(con, day, goldens, settings, on),
                            "golden_coverage",
                            lambda: series_chart(con, "SELECT day, covered_share FROM golden_coverage "
                                                      "WHERE slice = 'all' ORDER BY day",
                                                 ["covered_share"], "golden_coverage per day"),
                            paths.workspace("/intents"))
        days = partition_days(context)
        per_day = con.execute("""
            SELECT day, release, traffic, n AS sampled, round(covered_share, 3) AS covered_share,
                   round(covered_traffic) AS covered_traffic, intents, covered_intents, largest_uncovered
            FROM golden_coverage WHERE slice = 'all' AND day IN (SELECT unnest($days::DATE[]))
            ORDER BY day""", {"days": days}).df()
        uncovered = largest_uncovered(con, days)
        export = Path(paths.reports_dir) / INTENT_COVERAGE_FILE  # the workspace's intents page sorts by it
        write_parquet_atomically(pa.Table.from_pandas(intent_coverage(con, goldens), preserve_index=False), export)
    shares = per_day["covered_share"].dropna()
    return MaterializeResult(metadata={
        **result.metadata, "release": goldens.version or "none",
        "covered_share_mean": float(shares.mean()) if len(shares) else -1.0,
        "workspace_export": MetadataValue.path(str(export)),
        "per_day": MetadataValue.md(per_day.to_markdown(index=False) if len(per_day) else "no day"),
        "largest_uncovered": MetadataValue.md(uncovered.to_markdown(index=False) if len(uncovered)
                                              else "none")},
        check_results=result.check_results)


coverage_job = define_asset_job("coverage_job", partitions_def=DAILY, tags=DUCKDB_WRITER,
                                selection=AssetSelection.assets(golden_coverage),
                                description="Golden coverage of the days' traffic by the newest release "
                                            "(also part of drift_job; run it after a release).")
