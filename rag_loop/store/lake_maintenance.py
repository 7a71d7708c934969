"""Maintenance of a lake table: compaction (`optimize`), the database's view of it made again
over the compacted files, then `vacuum`; with the figures before and after. The Dagster job
(rag_loop_dagster/assets/lake.py) runs it per table."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from deltalake import DeltaTable

from rag_loop.store.deployment import TRACE_SIZED, recorded_lake
from rag_loop.store.lake import Lake, create_lake_views


def _version_files(delta: DeltaTable | None) -> tuple[int, int]:
    """Files and bytes of the table's version `delta`."""
    if delta is None:
        return 0, 0
    sizes = pa.table(delta.get_add_actions()).column("size_bytes").to_pylist()
    return len(sizes), sum(sizes)


def lake_views(con: duckdb.DuckDBPyConnection, lake: Lake, table: str, delta: DeltaTable | None = None) -> list[str]:
    """The database's view of the lake's `table` (a trace-sized table of a database that
    records this lake), made again over its current version's files (or its version `delta`)
    with the columns it has; returns it, or nothing."""
    recorded = recorded_lake(con)
    if table not in TRACE_SIZED or recorded is None or recorded.root != lake.root:
        return []
    # the columns from the catalog: a view whose files are gone is made again too
    columns = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND "
                                         "schema_name = current_schema() ORDER BY column_index", [table]).fetchall()]
    if not columns:  # the database shows no such table (yet)
        return []
    create_lake_views(con, lake, {table: columns}, deltas={table: delta} if delta else None)
    return [table]


def maintain_table(lake: Lake, table: str, retention_hours: int, target_size: int | None,
                   con: duckdb.DuckDBPyConnection | None = None) -> dict[str, int]:
    """`optimize`, the views of the table in `con`'s database made again, then `vacuum`; the
    figures before and after. The table's log is read once: each step brings it forward."""
    delta = lake.delta(table)
    files_before, bytes_before = _version_files(delta)
    stored_before = lake.stored_files(table)
    metrics = lake.optimize(table, target_size, delta)
    views = lake_views(con, lake, table, delta) if con is not None else []
    removed = lake.vacuum(table, retention_hours, delta)
    files_after, bytes_after = _version_files(delta)
    stored_after = lake.stored_files(table)
    return {"files_before": files_before, "files_after": files_after,
            "bytes_before": bytes_before, "bytes_after": bytes_after,
            "compacted_files": int(metrics.get("numFilesRemoved", 0)),
            "compacted_into": int(metrics.get("numFilesAdded", 0)),
            "removed_files": len(removed), "views_made_again": len(views),
            "stored_files_before": len(stored_before), "stored_files_after": len(stored_after),
            "stored_bytes_before": sum(stored_before.values()), "stored_bytes_after": sum(stored_after.values())}
