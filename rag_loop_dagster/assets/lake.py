"""Maintenance of the trace lake: every Delta table of the deployment's lake (resource
`storage`: a folder or an s3:// URI; an embedded deployment has none, and the job does nothing)
compacted (`optimize`: a day's small files, from daily ingestion and late data, into fewer), the
database's views of it made again over the compacted files, then vacuumed (`vacuum`: files no
version within the retention lists, a killed write's too, deleted). Without the views made again,
a view made before the compaction would list files the next vacuum deletes.

A job of ops, not an asset: it changes no table's rows, so it has no place in the lineage graph
(an asset would also join `rag_loop_job`, which selects every asset). One op invocation per table
(a dynamic fan-out), each with its figures as metadata. It carries the DuckDB writer tag like
every rag-loop job (it writes the views): the instance runs it one at a time with the runs that
write the lake, so a compaction never races a day's replacement (one of the two commits would
fail on the conflict). The schedule (weekly, Sunday 03:00 UTC) is stopped until the user starts it.
"""

from dagster import (
    AssetSpec,
    Config,
    DefaultScheduleStatus,
    DynamicOut,
    DynamicOutput,
    In,
    MetadataValue,
    OpExecutionContext,
    Out,
    Output,
    ScheduleDefinition,
    job,
    op,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field

from rag_loop.store.lake_maintenance import maintain_table
from rag_loop_dagster.assets.resources import DUCKDB_WRITER, StorageResource

LAKE_MAINTENANCE_CRON = "0 3 * * 0"

rag_loop_deployment = AssetSpec(
    "rag_loop_deployment", group_name="ingestion", kinds={"duckdb"},
    description="A lake-backed deployment's home, one row: the trace lake's URI and the names (never the "
                "values) of its storage options. Written by `rag-loop lake migrate` (removed by `--to "
                "embedded`) and by a new database's first lake-backed run; every run compares its configured "
                "lake with it and refuses another (rag_loop.store.deployment).")


class LakeMaintenanceConfig(Config):
    vacuum_retention_hours: int = Field(
        168, ge=0, description="Files a version stopped listing this long ago, and files no version lists "
                               "that are this old (a killed write's), are deleted. Readers of a version older "
                               "than this lose its files; below the time a write takes, a running write's "
                               "files can go.")
    target_file_size: int | None = Field(
        None, gt=0, description="Bytes a compacted file aims at; empty: the table's delta.targetFileSize, or "
                                "delta-rs's default (100 MiB).")


@op(out=DynamicOut(str), description="The lake's Delta tables (subfolders holding a _delta_log).")
def lake_tables(context: OpExecutionContext, storage: StorageResource):
    lake = storage.lake()
    if lake is None:
        context.log.info("an embedded deployment: every table is in the DuckDB file, no lake to maintain")
        return
    tables = lake.tables()
    context.log.info(f"{len(tables)} Delta tables in {lake.root}: {', '.join(tables) or 'none'}")
    for table in tables:
        yield DynamicOutput(table, mapping_key="".join(c if c.isalnum() else "_" for c in table))


@op(ins={"table": In(str)}, out=Out(dict), description="optimize, then vacuum, one table.")
def maintain_lake_table(context: OpExecutionContext, config: LakeMaintenanceConfig, storage: StorageResource,
                        duckdb: DuckDBResource, table: str):
    lake = storage.lake()
    with duckdb.get_connection() as con:  # attached: the views of an object store's files are read to be made
        figures = maintain_table(lake, table, config.vacuum_retention_hours, config.target_file_size,
                                 lake.attach(con))
    context.log.info(f"{table}: {figures['files_before']} -> {figures['files_after']} files, "
                     f"{figures['removed_files']} removed")
    return Output({"table": table, **figures}, metadata={"table": table, **figures})


@op(ins={"figures": In(list)}, description="The figures of every table, summed.")
def lake_maintenance_summary(figures: list[dict]):
    totals = {key: sum(f[key] for f in figures) for key in ("files_before", "files_after", "removed_files",
                                                             "stored_bytes_before", "stored_bytes_after")}
    rows = "\n".join(f"| {f['table']} | {f['files_before']} | {f['files_after']} | {f['removed_files']} | "
                     f"{f['stored_bytes_before']:,} | {f['stored_bytes_after']:,} |" for f in figures)
    table = ("| table | files before | files after | removed | stored bytes before | after |\n"
             "| --- | --- | --- | --- | --- | --- |\n" + rows)
    return Output(totals, metadata={"tables": len(figures), **totals, "per table": MetadataValue.md(table)})


@job(tags=DUCKDB_WRITER, description="Compact (optimize) then vacuum every Delta table of the trace lake "
                                     "(resource storage); scheduled weekly by lake_maintenance_schedule (stopped "
                                     "until turned on).")
def lake_maintenance_job():
    lake_maintenance_summary(lake_tables().map(maintain_lake_table).collect())


lake_maintenance_schedule = ScheduleDefinition(
    name="lake_maintenance_schedule", job=lake_maintenance_job, cron_schedule=LAKE_MAINTENANCE_CRON,
    execution_timezone="UTC", default_status=DefaultScheduleStatus.STOPPED,
    description="Weekly compaction and vacuum of the trace lake (Sunday 03:00 UTC); stopped by default.")
