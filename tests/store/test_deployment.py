"""`rag-loop lake migrate`: the trace-sized tables move between the DuckDB file and the lake only
when asked, both ways, idempotently, with every row; a run refuses a table in the other home."""

from datetime import date

import duckdb
import pytest
from click.testing import CliRunner

from rag_loop.cli import main
from rag_loop.store.deployment import TRACE_SIZED, WrongHome, recorded_lake, require_home
from rag_loop.store.lake import Lake
from rag_loop.store.tables import relation_kind
from tests.engines.test_lake import _world
from tests.helpers import undeclared_tables


def _snapshot(con) -> dict[str, list]:
    return {t: con.execute(f'SELECT * FROM "{t}" ORDER BY ALL').fetchall() for t in TRACE_SIZED
            if relation_kind(con, t)}


def test_migrate_moves_every_row_both_ways_and_a_second_run_moves_nothing(tmp_path):
    database, lake = tmp_path / "w.duckdb", Lake.of(tmp_path / "o'brien lake")
    with _world(database, [(0, 2, True, "a'b"), (86_400_000_000, 1, False, "c")]) as con:
        con.execute("CREATE TABLE trace_signals AS SELECT trace_id, CAST(timezone('UTC', \"timestamp\") AS DATE) "
                    "AS day FROM raw_traces")
        before = _snapshot(con)
    runner = CliRunner()
    first = runner.invoke(main, ["lake", "migrate", "--to", "lake", "--lake", lake.root, "--db", str(database)])
    assert first.exit_code == 0, first.output
    assert "raw_traces: 2 rows moved to the lake" in first.output
    again = runner.invoke(main, ["lake", "migrate", "--to", "lake", "--db", str(database)],
                          env={"RAG_LOOP_LAKE": lake.root})
    assert "nothing to move" in again.output
    elsewhere = runner.invoke(main, ["lake", "migrate", "--to", "embedded", "--lake", str(tmp_path / "elsewhere"),
                                     "--db", str(database)])
    assert elsewhere.exit_code != 0 and "records the trace lake" in elsewhere.output  # moved nothing
    with duckdb.connect(str(database)) as con:
        assert all(relation_kind(con, t) == "view" for t in before)
        assert _snapshot(con) == before
        assert lake.days("raw_traces") == [date(2026, 11, 1), date(2026, 11, 2)]
        assert recorded_lake(con) == lake  # the home is recorded once, with no storage option to hide
    assert "rag_loop_deployment" not in undeclared_tables(database)  # the record is a declared asset
    with duckdb.connect(str(database)) as con:
        with pytest.raises(WrongHome, match="migrate --to embedded"):
            require_home(con, None)
        with pytest.raises(WrongHome, match="another trace lake"):
            require_home(con, Lake.of(tmp_path / "elsewhere"))
    back = runner.invoke(main, ["lake", "migrate", "--to", "embedded", "--lake", lake.root, "--db", str(database)])
    assert back.exit_code == 0 and "rows moved to the DuckDB file" in back.output
    with duckdb.connect(str(database)) as con:
        assert all(relation_kind(con, t) == "table" for t in before)
        assert _snapshot(con) == before
        assert recorded_lake(con) is None
        with pytest.raises(WrongHome, match="migrate --to lake"):
            require_home(con, lake)
        require_home(con, None)
    missing = runner.invoke(main, ["lake", "migrate", "--to", "lake", "--lake", lake.root,
                                   "--db", str(tmp_path / "none.duckdb")])
    assert missing.exit_code != 0 and "no database" in missing.output


def test_an_embedded_run_refuses_a_lake_backed_database_from_before_the_record(tmp_path):
    """Views of a lake and no rag_loop_deployment row (a database migrated before the home was
    recorded): an embedded configuration is refused up front, not when a write hits a view."""
    database, lake = tmp_path / "w.duckdb", Lake.of(tmp_path / "lake")
    with _world(database, [(0, 2, True, "a")]):
        pass
    assert CliRunner().invoke(main, ["lake", "migrate", "--to", "lake", "--lake", lake.root,
                                     "--db", str(database)]).exit_code == 0
    with duckdb.connect(str(database)) as con:
        con.execute("DROP TABLE rag_loop_deployment")
        with pytest.raises(WrongHome, match=r"raw_traces.* are views of a trace lake.*migrate --to embedded"):
            require_home(con, None)
    back = CliRunner().invoke(main, ["lake", "migrate", "--to", "embedded", "--lake", lake.root, "--db", str(database)])
    assert back.exit_code == 0, back.output
    with duckdb.connect(str(database)) as con:
        require_home(con, None)


def test_a_lake_backed_deployment_on_s3_migrates_runs_a_stage_and_vacuums(tmp_path, monkeypatch):
    """On a local S3-compatible server (moto, loopback only): traces ingested into the DuckDB
    file, `rag-loop lake migrate --to lake` onto s3:// (delta-rs and DuckDB's reader take the
    endpoint and keys from the AWS_* environment), trace_signals materialized by Dagster on the
    DuckDB engine into the s3 lake, read back through a fresh connection of the resource and by
    `rag-loop summary`, a vacuum, ingestion of a new file into the s3 lake by the engine
    resource, and the way back."""
    from dagster import materialize

    from rag_loop.ingest import ingest_directory
    from rag_loop_dagster.assets.resources import (
        DeltaLakeStorageResource,
        DuckDBEngineResource,
        RagLoopDuckDBResource,
    )
    from rag_loop_dagster.assets.selection import trace_signals
    from tests.helpers import trace_line
    from tests.helpers.s3 import s3_server

    traces, database = tmp_path / "traces", tmp_path / "rag.duckdb"
    traces.mkdir()
    (traces / "a.jsonl").write_text("".join(
        trace_line(f"t{n}", timestamp=f"2026-11-0{1 + n % 3}T08:00:00Z", feedback={"rating": "negative"} if n % 2
                   else None) + "\n" for n in range(9)))
    with duckdb.connect(str(database)) as con:
        assert ingest_directory(con, traces).by_format()["native"].ingested == 9
        before = _snapshot(con)
    with s3_server() as s3:
        options = s3.storage_options()
        for name in ("AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP"):
            monkeypatch.setenv(name, options[name])
        monkeypatch.setenv("AWS_CONDITIONAL_PUT", "etag")
        uri = f"s3://{s3.bucket}/deployment"
        moved = CliRunner().invoke(main, ["lake", "migrate", "--to", "lake", "--lake", uri, "--db", str(database)])
        assert moved.exit_code == 0, moved.output
        assert any(key.startswith("deployment/raw_traces/day=2026-11-03/") for key in s3.keys("deployment/"))
        storage = DeltaLakeStorageResource(uri=uri, storage_options=options)
        resources = {"duckdb": RagLoopDuckDBResource(database=str(database), storage=storage),
                     "engine": DuckDBEngineResource(storage=storage)}
        assert materialize([trace_signals], resources=resources).success
        lake = storage.lake()
        assert lake.days("trace_signals") == [date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 3)]
        with resources["duckdb"].get_connection() as con:
            assert relation_kind(con, "trace_signals") == "view"
            assert con.execute("SELECT count(*), count(*) FILTER (thumbs_down) FROM trace_signals").fetchall() \
                == [(9, 4)]
            assert _snapshot(con) | {"trace_signals": []} == before | {"trace_signals": []}
        assert materialize([trace_signals], resources=resources).success  # again: a new version, same rows
        assert lake.vacuum("trace_signals", retention_hours=0)  # the first version's files go
        (traces / "b.jsonl").write_text(trace_line("t9", timestamp="2026-11-03T09:00:00Z") + "\n")
        with resources["duckdb"].get_connection() as con:  # ingestion into the s3 lake, by the engine resource
            assert resources["engine"].engine().ingest(con, traces).by_format()["native"].ingested == 1
            assert relation_kind(con, "raw_traces") == "view"
            assert con.execute("SELECT count(*) FROM raw_traces").fetchall() == [(10,)]
            before = {t: rows for t, rows in _snapshot(con).items() if t != "trace_signals"}
        summary = CliRunner().invoke(main, ["summary", "--db", str(database)], env={"RAG_LOOP_LAKE": uri})
        assert summary.exit_code == 0, summary.output
        assert "raw_traces               10 rows" in summary.output and "trace_signals             9 rows" \
            in summary.output
        back = CliRunner().invoke(main, ["lake", "migrate", "--to", "embedded", "--lake", uri, "--db", str(database)])
        assert back.exit_code == 0, back.output
    with duckdb.connect(str(database)) as con:
        assert relation_kind(con, "raw_traces") == relation_kind(con, "trace_signals") == "table"
        assert {t: rows for t, rows in _snapshot(con).items() if t != "trace_signals"} == before
        assert con.execute("SELECT count(*) FROM trace_signals").fetchall() == [(9,)]
