"""Stage 4-5: curator labels in, immutable golden releases out."""

from pathlib import Path

import pandas as pd
from dagster import (
    AssetExecutionContext,
    Config,
    MaterializeResult,
    MetadataValue,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    asset,
    sensor,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from assets.ingestion import directory_fingerprint
from assets.intents import curation_queue
from assets.resources import RagLoopPaths
from assets.tables import stage_asset
from rag_loop import plots
from rag_loop.goldens import (
    build_goldens,
    publish_release,
    redaction_quality,
    refresh_release_tables,
)
from rag_loop.labels import label_files, label_summary, store_label_files
from rag_loop.redaction import KINDS, Redactor
from rag_loop.reports import release_report


@stage_asset(group_name="curation", deps=[curation_queue],
             parts={"label_errors": "Every invalid label row with its file, line and errors",
                    "label_files": "Label files read, by content hash (an edited file replaces "
                                   "its rows)",
                    "current_labels": "View: the latest label per trace"},
       description="Curator labels from data/curation/labels/ (JSONL or CSV), validated row by "
                   "row: valid rows in `curated_labels` (a relabel supersedes, both kept; "
                   "`current_labels` is the latest per trace), invalid rows in `label_errors`.")
def curated_labels(context: AssetExecutionContext, duckdb: DuckDBResource,
                   paths: RagLoopPaths) -> MaterializeResult:
    with duckdb.get_connection() as con:
        report = store_label_files(con, Path(paths.curation_dir) / "labels", log=context.log.info)
        summary = label_summary(con)
    errors = pd.DataFrame(report.errors[:20])
    if not errors.empty:
        errors["errors"] = errors["errors"].map("; ".join)
    return MaterializeResult(metadata={
        "dagster/row_count": summary["labels"], **summary, "files_read": report.files,
        "run_stored": report.stored, "run_rejected": report.rejected, "run_warnings": report.warnings,
        "run_errors": MetadataValue.md(errors.to_markdown(index=False) if not errors.empty
                                       else "no invalid rows")})


@sensor(job_name="label_job", minimum_interval_seconds=30,
        description="Stores curator label files when they appear or change.")
def new_label_files_sensor(context: SensorEvaluationContext, paths: RagLoopPaths):
    fingerprint = directory_fingerprint(Path(paths.curation_dir) / "labels", label_files)
    if fingerprint == context.cursor:
        return SkipReason("no new label files")
    context.update_cursor(fingerprint)
    return RunRequest(run_key=fingerprint)


class ReleaseConfig(Config):
    notes: str = Field("", description="Release notes: what changed and why.")
    released_by: str = Field("", description="Who releases it.")
    redact: list[str] = Field(list(KINDS), description=f"Kinds to redact: {', '.join(KINDS)}.")
    keep_email_domains: list[str] = Field(
        [], description="Organisation addresses that are content, not personal data "
                        "(e.g. support@ addresses quoted in answers).")


@asset(group_name="goldens", deps=["current_labels"],
       description="Makes the next golden release data/goldens/vNNNN/ (goldens.json in DeepEval "
                   "format, manifest.json, CHANGES.md) from the accepted labels, unless nothing "
                   "changed since the newest release.")
def golden_release(context: AssetExecutionContext, config: ReleaseConfig, duckdb: DuckDBResource,
                   paths: RagLoopPaths) -> MaterializeResult:
    redactor = Redactor(config.redact, config.keep_email_domains)
    with duckdb.get_connection() as con:
        goldens = build_goldens(con, redactor)
        quality = redaction_quality(con, redactor)
    notes, released_by = redactor.redact(config.notes), redactor.redact(config.released_by)
    result = publish_release(Path(paths.goldens_dir), goldens, notes or "", released_by or "",
                             redactor.summary())
    context.log.info(result.message)
    metadata = {"message": result.message, "released": result.version is not None,
                "version": result.version or result.parent or "none", "goldens": len(goldens),
                **{f"redacted_{k}": v for k, v in redactor.summary().items()}, **quality}
    if result.version:
        metadata.update(result.diff.counts())
        metadata["manifest"] = MetadataValue.json(result.manifest)
        metadata["path"] = MetadataValue.path(str(Path(paths.goldens_dir) / result.version))
        report = release_report(Path(paths.goldens_dir), result.version, Path(paths.reports_dir))
        metadata["report"] = MetadataValue.path(str(report))
        metadata["report_url"] = MetadataValue.url(report.resolve().as_uri())
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
