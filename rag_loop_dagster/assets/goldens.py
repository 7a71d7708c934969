"""Golden releases: the curators' accepted labels as immutable, hashed versions, and their lineage."""

from pathlib import Path

from dagster import (
    AssetExecutionContext,
    AssetSelection,
    Config,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
    define_asset_job,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.goldens.coverage import release_coverage_change
from rag_loop.goldens.lineage import refresh_release_tables
from rag_loop.goldens.redaction import KINDS
from rag_loop.goldens.release import (
    MissingTraceError,
    build_goldens,
    publish_release,
    redaction_quality,
    release_policy,
)
from rag_loop.reporting import plots
from rag_loop.reporting.reports import release_report
from rag_loop_dagster.assets.curation import curated_labels
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, RagLoopPaths
from rag_loop_dagster.assets.stage import stage_asset


class ReleaseConfig(Config):
    notes: str = Field("", description="Release notes: what changed and why.")
    released_by: str = Field("", description="Who releases it.")
    redact: list[str] | None = Field(
        None, description=f"Kinds to redact ({', '.join(KINDS)}); null: the newest release's (all at first).")
    keep_email_domains: list[str] | None = Field(
        None, description="Organisation addresses that are content, not personal data (e.g. support@ "
                          "addresses quoted in answers); null: the newest release's (none at first).")


@asset(group_name="goldens", deps=["current_labels", "incident_traces"],  # goldens of an incident name it
       description="Makes the next golden release goldens/vNNNN/ in the home (goldens.json in DeepEval "
                   "format, manifest.json, CHANGES.md) from the accepted labels, unless nothing "
                   "changed since the newest release.")
def golden_release(context: AssetExecutionContext, config: ReleaseConfig, duckdb: DuckDBResource,
                   paths: RagLoopPaths) -> MaterializeResult:
    policy, parent_policy = release_policy(Path(paths.goldens_dir), config.redact, config.keep_email_domains)
    redactor = policy.redactor()
    with duckdb.get_connection() as con:
        try:
            goldens = build_goldens(con, redactor)
            under_parent = build_goldens(con, parent_policy.redactor()) \
                if parent_policy is not None and parent_policy != policy else None
        except MissingTraceError as error:
            raise Failure(description=str(error)) from error
        quality = redaction_quality(con, redactor)
    notes, released_by = redactor.redact(config.notes), redactor.redact(config.released_by)
    result = publish_release(Path(paths.goldens_dir), goldens, notes or "", released_by or "",
                             redactor.summary(), policy=policy, under_parent_policy=under_parent)
    context.log.info(result.message)
    metadata = {"message": result.message, "released": result.version is not None,
                "version": result.version or result.parent or "none", "goldens": len(goldens),
                **{f"redacted_{k}": v for k, v in redactor.summary().items()}, **quality}
    if result.version:
        metadata.update(result.diff.counts())
        metadata["manifest"] = MetadataValue.json(result.manifest)
        metadata["path"] = MetadataValue.path(str(Path(paths.goldens_dir) / result.version))
        with duckdb.get_connection() as con:  # coverage of production against the parent (issue 48)
            coverage = release_coverage_change(con, Path(paths.goldens_dir), result.version)
        if coverage is not None:
            overall = coverage.slices[coverage.slices["slice"] == "all"].iloc[0]
            metadata["coverage_parent"] = float(overall["parent_share"]) if overall["n"] else -1.0
            metadata["coverage"] = float(overall["share"]) if overall["n"] else -1.0
        report = release_report(Path(paths.goldens_dir), result.version, Path(paths.reports_dir), coverage)
        metadata["report"] = MetadataValue.path(str(report))
        metadata["report_url"] = paths.workspace(f"/reports/{report.name}")
        chart = plots.grouped_counts({k: v for k, v in result.manifest["counts"].items() if v},
                                     f"Goldens of {result.version}")
        metadata["counts"] = MetadataValue.md(plots.markdown_image(chart, "counts"))
    return MaterializeResult(metadata=metadata)


@stage_asset(group_name="goldens", deps=[golden_release],
             description="Every golden release with its counts (`golden_releases`), and "
                         "lineage release → golden → label → traces → cluster (`golden_lineage`).",
             parts={"golden_lineage": "Release → golden → label → traces → cluster"})
def golden_releases(duckdb: DuckDBResource, paths: RagLoopPaths) -> MaterializeResult:
    with duckdb.get_connection() as con:
        count = refresh_release_tables(con, Path(paths.goldens_dir))
        table = con.sql("SELECT version, parent_version, created_at, released_by, goldens, added, "
                        "removed, changed, redacted FROM golden_releases ORDER BY version").df()
    latest = table.iloc[-1] if len(table) else None
    chart = plots.bars(dict(zip(table["version"], table["goldens"])), "Goldens per release") \
        if len(table) else None
    return MaterializeResult(metadata={
        **({"goldens_per_release": MetadataValue.md(plots.markdown_image(chart, "releases"))}
           if chart else {}),
        "dagster/row_count": count, "latest_version": latest["version"] if latest is not None else "none",
        "latest_goldens": int(latest["goldens"]) if latest is not None else 0,
        "releases": MetadataValue.md(table.to_markdown(index=False) if len(table) else "no release yet")})


release_goldens = define_asset_job(
    "release_goldens", tags=DUCKDB_WRITER,
    selection=AssetSelection.assets(curated_labels, golden_release, golden_releases,
                                    "judge_calibration").required_multi_asset_neighbors(),
    description="Curators: store new labels, compare them with the judge (judge_calibration) and "
                "make the next golden release (run config: notes, released_by).")
