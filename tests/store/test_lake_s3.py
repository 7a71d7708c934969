"""The trace lake on object storage: a local S3-compatible server (moto, on a loopback port the
test starts) holds the Delta tables; days are written and replaced, a column joins later, DuckDB
reads the version's Arrow dataset, compaction and vacuum run; commits go by conditional put, so
concurrent writers lose no version; and the real ingestion's raw_traces land there by day and
come back equal. Nothing leaves loopback: explicit endpoint, no instance metadata, and a refusing
proxy for anything else (tests/helpers/s3.py)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta

import duckdb
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from deltalake import DeltaTable

from rag_loop.store.ddl import utc_day
from rag_loop.store.deployment import record_lake
from rag_loop.store.lake import Lake, expose_lake_tables, files_query
from tests.helpers import trace_line
from tests.helpers.s3 import s3_server

D1, D2, D3 = date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 3)


@pytest.fixture(scope="module")
def s3():
    with s3_server() as server:
        yield server


@pytest.fixture
def lake(s3, request):
    return Lake(f"s3://{s3.bucket}/{request.node.name}", storage_options=s3.storage_options())


def rows(day: date, count: int, tag: str = "a") -> pa.Table:
    return pa.table({"trace_id": [f"{tag}{day:%d}-{i}" for i in range(count)], "n": list(range(count)),
                     "day": pa.array([day] * count, pa.date32())})


def scan(lake: Lake, table: str, sql: str = "SELECT trace_id, n, day FROM t", delta: DeltaTable | None = None
         ) -> list[tuple]:
    """The table's current version (or its version `delta`) read by DuckDB through its Arrow
    dataset (on s3://)."""
    with duckdb.connect() as con:
        con.register("t", lake.dataset(table) if delta is None else delta.to_pyarrow_dataset())
        return sorted(con.execute(sql).fetchall(), key=repr)


def expected(*tables: pa.Table) -> list[tuple]:
    table = pa.concat_tables(tables)
    return sorted(zip(*(table.column(c).to_pylist() for c in ("trace_id", "n", "day")), strict=True), key=repr)


def data_keys(s3, lake: Lake, table: str) -> set[str]:
    prefix = lake.uri(table).removeprefix(f"s3://{s3.bucket}/") + "/"
    return {k.removeprefix(prefix) for k in s3.keys(prefix) if not k.removeprefix(prefix).startswith("_delta_log/")}


def listed(lake: Lake, table: str, delta: DeltaTable | None = None) -> set[str]:
    return {f.removeprefix(lake.uri(table) + "/") for f in lake.files(table, delta=delta)}


def test_the_server_honours_conditional_puts(s3):
    """What makes delta-rs's commits safe without a lock: a second PUT of a log entry that
    exists is refused."""
    client = s3.client()
    client.put_object(Bucket=s3.bucket, Key="probe/00000.json", Body=b"first")
    with pytest.raises(ClientError, match="PreconditionFailed"):
        client.put_object(Bucket=s3.bucket, Key="probe/00000.json", Body=b"second", IfNoneMatch="*")
    assert client.get_object(Bucket=s3.bucket, Key="probe/00000.json")["Body"].read() == b"first"


def test_days_schema_evolution_optimize_and_vacuum_on_s3(s3, lake):
    assert lake.uri("t").startswith("s3://") and lake.delta("t") is None
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    lake.write("t", rows(D2, 4, "b"), days={D2})  # D2 replaced by predicate
    assert lake.days("t") == [D1, D2] and lake.delta("t").version() == 1
    # below, each version is loaded once and read through: a load on S3 asks for every commit
    delta = lake.delta("t")
    assert scan(lake, "t", delta=delta) == expected(rows(D1, 3), rows(D2, 4, "b"))
    assert all(f.startswith(lake.uri("t") + "/day=") for f in lake.files("t", delta=delta))

    wider = rows(D3, 2).append_column("language", pa.array(["vi", "en"]))
    lake.write("t", wider, days={D3})  # a column joins; older files read NULL
    assert lake.schema("t").names == ["trace_id", "n", "day", "language"]
    assert scan(lake, "t", "SELECT day, count(*), count(language) FROM t GROUP BY day") == \
        [(D1, 3, 0), (D2, 4, 0), (D3, 2, 2)]

    for i in range(4):  # small files of one day, as late data arrives: appended by predicate-free commits
        from deltalake import write_deltalake
        write_deltalake(lake.uri("t"), rows(D1, 1, f"late{i}-"), mode="append", schema_mode="merge",
                        storage_options=lake.options())
    delta = lake.delta("t")
    before = scan(lake, "t", "SELECT trace_id, n, day, language FROM t", delta)
    assert len(lake.files("t", [D1], delta)) == 5
    metrics = lake.optimize("t", delta=delta)  # `delta` brought to the version after
    assert metrics["numFilesRemoved"] == 5 and len(lake.files("t", [D1], delta)) == 1
    assert scan(lake, "t", "SELECT trace_id, n, day, language FROM t", delta) == before

    assert data_keys(s3, lake, "t") > listed(lake, "t", delta)  # replaced and compacted files still stored
    removed = lake.vacuum("t", retention_hours=0, delta=delta)
    assert len(removed) == 6  # D2's first file and D1's five small ones
    assert data_keys(s3, lake, "t") == listed(lake, "t")  # the version a new load sees
    assert scan(lake, "t", "SELECT trace_id, n, day, language FROM t", delta) == before
    assert lake.day_fingerprints("t").keys() == {D1, D2, D3}


def test_concurrent_writers_lose_no_commit(s3, lake):
    """Writers of different days at once: each commit lands (a loser of a log version retries on
    the next), none overwrites another's."""
    lake.write("t", rows(D1, 1), days={D1})
    days = [D1 + timedelta(days=i) for i in range(1, 7)]
    with ThreadPoolExecutor(len(days)) as pool:
        list(pool.map(lambda d: lake.write("t", rows(d, 2, "c"), days={d}), days))
    delta = lake.delta("t")
    assert delta.version() == len(days)
    assert lake.days("t", delta) == [D1, *days]
    assert scan(lake, "t", delta=delta) == expected(rows(D1, 1), *(rows(d, 2, "c") for d in days))


def test_ingested_raw_traces_round_trip_through_the_s3_lake(s3, lake, tmp_path):
    from rag_loop.ingest import ingest_directory
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "a.jsonl").write_text("".join(trace_line(
        f"t{i}", timestamp=f"2026-11-0{1 + i % 3}T{i % 24:02d}:30:00Z", answer=f"answer {i}",
        feedback={"rating": "negative"} if i % 4 == 0 else None) + "\n" for i in range(12)))
    (traces / "b.jsonl").write_text(trace_line("late", timestamp="2026-11-02T23:59:59Z") + "\n")
    with duckdb.connect() as con:
        report = ingest_directory(con, traces)
        assert con.execute("SELECT count(*) FROM raw_traces").fetchall()[0] == (13,), report
        table = con.sql(f"SELECT *, {utc_day()} AS day FROM raw_traces").to_arrow_table()
        days = {d for d in table.column("day").to_pylist()}
        assert days == {D1, D2, D3}
        lake.write("raw_traces", table, days=days)
        assert lake.days("raw_traces") == [D1, D2, D3]

        con.register("lake_raw", lake.dataset("raw_traces"))
        columns = ", ".join(f'"{c}"' for c in table.column_names)
        mismatched = con.execute(f"""
            SELECT count(*) FROM ((SELECT {columns} FROM lake_raw EXCEPT ALL
                                   SELECT *, {utc_day()} AS day FROM raw_traces)
                                  UNION ALL (SELECT *, {utc_day()} AS day FROM raw_traces EXCEPT ALL
                                             SELECT {columns} FROM lake_raw))""").fetchall()[0][0]
        assert mismatched == 0
        assert con.execute("SELECT count(*) FROM lake_raw").fetchall()[0] == (13,)
        # a day of the database written again, alone: the lake's other days keep their files
        prints = lake.day_fingerprints("raw_traces")
        con.execute("UPDATE raw_traces SET answer = 'changed' WHERE trace_id = 'late'")
        again = con.sql(f"SELECT *, {utc_day()} AS day FROM raw_traces WHERE {utc_day()} = DATE '{D2}'"
                            ).to_arrow_table()
        lake.write("raw_traces", again, days={D2})
        after = lake.day_fingerprints("raw_traces")
        assert after[D1] == prints[D1] and after[D3] == prints[D3] and after[D2] != prints[D2]
        con.register("lake_raw", lake.dataset("raw_traces"))
        assert con.execute("SELECT answer FROM lake_raw WHERE trace_id = 'late'").fetchall()[0] == ("changed",)
        assert con.execute("SELECT count(*) FROM lake_raw").fetchall()[0] == (13,)


def test_files_query_and_views_read_the_version_on_s3(s3, lake, tmp_path):
    """files_query over the version's s3:// file list, and a control database's view of
    it, read by a connection the lake attached (its Arrow filesystem): the dataset's rows."""
    lake.write("t", pa.concat_tables([rows(D1, 3), rows(D2, 2)]), days={D1, D2})
    with duckdb.connect(str(tmp_path / "control.duckdb")) as con:
        lake.attach(con)
        got = sorted(con.execute(files_query(lake.files("t"), lake.schema("t"))).fetchall(), key=repr)
        assert got == scan(lake, "t") == expected(rows(D1, 3), rows(D2, 2))
        expose_lake_tables(con, lake, {"t": ["trace_id", "n", "day"]})
        assert sorted(con.execute("SELECT * FROM t").fetchall(), key=repr) == got


def test_nothing_reaches_beyond_loopback(s3):
    """An endpoint off this machine (a documentation address that would hang) is refused at
    once by the proxy the server's environment sets: a test that forgot its endpoint fails
    instead of reaching AWS."""
    options = {**s3.storage_options(), "AWS_ENDPOINT_URL": "http://203.0.113.5:9000", "max_retries": "0"}
    started = time.monotonic()
    with pytest.raises(OSError, match="Connection refused"):
        Lake(f"s3://{s3.bucket}/away", options).delta("t")
    assert time.monotonic() - started < 5
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"


def test_the_maintenance_job_on_an_s3_lake(s3, lake, tmp_path):
    """The lake's tables listed on the object store (prefixes holding a _delta_log), each
    compacted and vacuumed by lake_maintenance_job."""
    from dagster_duckdb import DuckDBResource
    from deltalake import write_deltalake

    from rag_loop_dagster.assets.lake import lake_maintenance_job
    from rag_loop_dagster.assets.resources import DeltaLakeStorageResource
    lake.write("raw_traces", rows(D1, 2), days={D1})
    for i in range(3):
        write_deltalake(lake.uri("raw_traces"), rows(D1, 1, f"late{i}-"), mode="append",
                        storage_options=lake.options())
    lake.write("documents", pa.table({"doc_id": ["a"]}), partitioned=False)
    database = tmp_path / "control.duckdb"
    with duckdb.connect(str(database)) as con:  # a lake-backed database's view of raw_traces
        expose_lake_tables(lake.attach(con), lake, {"raw_traces": ["trace_id", "n", "day"]})
        record_lake(con, lake)
    s3.client().put_object(Bucket=s3.bucket, Key=f"{lake.root.split('/', 3)[3]}/notes/readme.txt", Body=b"x")
    assert lake.tables() == ["documents", "raw_traces"]
    assert len(lake.stored_files("raw_traces")) == 4
    before = scan(lake, "raw_traces")

    result = lake_maintenance_job.execute_in_process(
        resources={"storage": DeltaLakeStorageResource(uri=lake.root, storage_options=dict(lake.storage_options)),
                   "duckdb": DuckDBResource(database=str(database))},
        run_config={"ops": {"maintain_lake_table": {"config": {"vacuum_retention_hours": 0}}}})
    assert result.success
    summary = result.output_for_node("lake_maintenance_summary")
    assert (summary["files_before"], summary["files_after"], summary["removed_files"]) == (5, 2, 4)
    assert len(lake.stored_files("raw_traces")) == 1 and scan(lake, "raw_traces") == before
    with duckdb.connect(str(database)) as con:  # the view made again over the compacted file
        assert sorted(lake.attach(con).execute("SELECT * FROM raw_traces").fetchall(), key=repr) == before
    assert s3.keys(f"{lake.root.split('/', 3)[3]}/notes/") != []  # no Delta table: left alone
