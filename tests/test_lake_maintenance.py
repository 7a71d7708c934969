"""lake_maintenance_job, run in process on a small lake: every Delta table compacted then
vacuumed (its rows kept; folders that are no Delta table left alone), the database's views of the
lake made again over the compacted files (else the vacuum would delete what they list), the
figures per table as metadata, the retention and target file size from the run config, nothing
done in an embedded deployment; and the weekly schedule is registered, stopped until the user
starts it."""

from __future__ import annotations

import os
import time
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from dagster_duckdb import DuckDBResource

from rag_loop.store.deployment import record_lake
from rag_loop.store.lake import Lake, expose_lake_tables, files_query
from rag_loop_dagster.assets.lake import lake_maintenance_job
from rag_loop_dagster.assets.resources import DeltaLakeStorageResource, EmbeddedStorageResource

D1, D2 = date(2026, 11, 1), date(2026, 11, 2)
SCHEMA = pa.schema([("trace_id", pa.string()), ("n", pa.int64()), ("day", pa.date32())])


def rows(day: date, count: int, tag: str) -> pa.Table:
    return pa.table({"trace_id": [f"{tag}-{i}" for i in range(count)], "n": list(range(count)),
                     "day": [day] * count}, schema=SCHEMA)


def small_lake(root: Path) -> Lake:
    """raw_traces: one day in eight small files (as late data leaves it), one day replaced (its
    first file unlisted), a killed write's file a fortnight old; trace_chunks: one file; and
    folders that are no Delta table."""
    lake = Lake.of(root)
    lake.write("raw_traces", pa.concat_tables([rows(D1, 10, "a"), rows(D2, 10, "b")]), days={D1, D2})
    lake.write("raw_traces", rows(D2, 12, "c"), days={D2})
    added = []
    for i in range(8):
        path = lake.path("raw_traces") / f"day={D1}" / f"part-late-{i}.parquet"
        pq.write_table(rows(D1, 5, f"late{i}").drop_columns(["day"]), path)
        added.append(path)
    lake.commit_files("raw_traces", added, [], SCHEMA)
    orphan = lake.path("raw_traces") / f"day={D1}" / "part-killed.parquet"
    orphan.write_bytes(b"half a file")
    fortnight = time.time() - 14 * 86_400
    os.utime(orphan, (fortnight, fortnight))
    lake.write("trace_chunks", rows(D1, 3, "k"), days={D1})
    (root / ".staging" / "run").mkdir(parents=True)
    (root / ".staging" / "run" / "x.parquet").write_bytes(b"staging")
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("not a table")
    return lake


def read(lake: Lake, table: str) -> list[tuple]:
    with duckdb.connect() as con:
        return sorted(con.execute(files_query(lake.files(table), lake.schema(table))).fetchall())


def figures(result, table: str) -> dict:
    [event] = [e for e in result.all_node_events if e.is_successful_output
               and e.step_key == f"maintain_lake_table[{table}]"]
    return {k: v.value for k, v in event.event_specific_data.metadata.items()}


def run(root: Path, storage=None, **config):
    return lake_maintenance_job.execute_in_process(
        resources={"storage": storage or DeltaLakeStorageResource(uri=str(root)),
                   "duckdb": DuckDBResource(database=str(root.parent / f"{root.name}.duckdb"))},
        run_config={"ops": {"maintain_lake_table": {"config": config}}} if config else None)


def test_maintenance_compacts_and_vacuums_every_table(tmp_path):
    lake = small_lake(tmp_path / "lake")
    before = {t: read(lake, t) for t in ("raw_traces", "trace_chunks")}
    assert lake.tables() == ["raw_traces", "trace_chunks"]
    database = tmp_path / "lake.duckdb"
    with duckdb.connect(str(database)) as con:  # a lake-backed database's view of raw_traces
        expose_lake_tables(con, lake, {"raw_traces": ["trace_id", "n", "day"]})
        record_lake(con, lake)
    result = run(tmp_path / "lake", vacuum_retention_hours=0)
    assert result.success
    with duckdb.connect(str(database)) as con:  # made again over the compacted file: still readable
        assert sorted(con.execute("SELECT trace_id, n, day FROM raw_traces").fetchall()) == before["raw_traces"]
        assert len(con.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'raw_traces'").fetchall()[0][0]
                   .split(".parquet")) == 3  # the two files of the version

    raw = figures(result, "raw_traces")
    assert (raw["files_before"], raw["files_after"]) == (10, 2)  # D1's nine files in one, D2's one
    assert raw["compacted_files"] == 9 and raw["compacted_into"] == 1
    assert raw["removed_files"] == 11  # the nine compacted, D2's replaced one, the killed write's
    assert raw["stored_files_before"] == 12 and raw["stored_files_after"] == 2
    assert raw["stored_bytes_after"] < raw["stored_bytes_before"] and raw["bytes_after"] > 0
    assert raw["views_made_again"] == 1
    chunks = figures(result, "trace_chunks")
    assert (chunks["files_before"], chunks["files_after"], chunks["removed_files"]) == (1, 1, 0)
    assert {t: read(lake, t) for t in ("raw_traces", "trace_chunks")} == before  # rows kept
    summary = result.output_for_node("lake_maintenance_summary")
    assert summary["files_before"] == 11 and summary["files_after"] == 3 and summary["removed_files"] == 11
    # folders that are no Delta table are left as they were
    assert (tmp_path / "lake" / ".staging" / "run" / "x.parquet").read_bytes() == b"staging"
    assert (tmp_path / "lake" / "notes" / "readme.txt").exists()


def test_the_default_retention_keeps_a_week_of_removed_files(tmp_path):
    lake = small_lake(tmp_path / "lake")
    result = run(tmp_path / "lake")  # 168 hours
    raw = figures(result, "raw_traces")
    assert raw["files_after"] == 2 and raw["removed_files"] == 1  # only the fortnight-old killed write's
    assert raw["stored_files_after"] == 12  # 12 - the killed write's + the compacted one: the rest wait out the week
    assert not (lake.path("raw_traces") / f"day={D1}" / "part-killed.parquet").exists()


def test_target_file_size_from_the_config_and_an_empty_lake(tmp_path):
    lake = Lake.of(tmp_path / "lake")
    big = pa.table({"trace_id": [f"t{i:07d}-{'x' * 40}" for i in range(60_000)], "n": list(range(60_000)),
                    "day": [D1] * 60_000}, schema=SCHEMA)
    for part in range(4):  # four files of one day, each about 1 MB
        path = lake.path("t") / f"day={D1}" / f"part-{part}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(big.slice(part * 15_000, 15_000).drop_columns(["day"]), path, compression="none")
        lake.commit_files("t", [path], [], SCHEMA)
    size = sum(p.stat().st_size for p in (lake.path("t") / f"day={D1}").iterdir())
    result = run(tmp_path / "lake", target_file_size=size // 2 + 1)
    assert figures(result, "t")["files_after"] >= 2  # compacted towards the target, not into one
    assert figures(result, "t")["files_after"] < 4
    for storage in (DeltaLakeStorageResource(uri=str(tmp_path / "none")), EmbeddedStorageResource()):
        empty = run(tmp_path / "none", storage)  # no lake folder yet; an embedded deployment
        assert empty.success and empty.output_for_node("lake_maintenance_summary")["files_before"] == 0


def test_the_job_and_its_stopped_weekly_schedule_are_registered():
    from dagster import DefaultScheduleStatus

    from rag_loop_dagster.definitions import defs
    assert defs.resolve_job_def("lake_maintenance_job").tags.get("rag-loop/duckdb") == "writer"
    schedule = defs.resolve_schedule_def("lake_maintenance_schedule")
    assert schedule.job_name == "lake_maintenance_job" and schedule.cron_schedule == "0 3 * * 0"
    assert schedule.default_status == DefaultScheduleStatus.STOPPED
