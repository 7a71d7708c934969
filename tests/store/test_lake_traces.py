"""raw_traces, its child tables and otlp_spans in the trace lake (rag_loop.engines.raw_lake): an
OTLP trace assembled again is removed from the file that held it and added anew; a trace's
spans on two days, or a late span on another day than the others, are all found for its
assembly, the spans stored before are not written again and the run's own are not read back;
a failure while writing the lake's files leaves the database and the lake (its tables'
versions) as they were; DuckDB ingestion after Spark's refuses the lake's tables, and Spark's
the database's, until `migrate` moves them, with the same rows as DuckDB alone; the traffic
fingerprints are the current versions' day files'."""

import os
import shutil
from datetime import timedelta

import duckdb
import pytest

import rag_loop.engines.raw_lake as raw_lake
from rag_loop.engines.engine import SparkEngine
from rag_loop.engines.incremental import traffic_fingerprints
from rag_loop.engines.ingest import ingest_directory_on_spark
from rag_loop.ingest import ingest_directory
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.ddl import KEPT_IN_LAKE
from rag_loop.store.deployment import WrongHome, migrate
from rag_loop.store.lake import Lake, create_lake_views, lake_view_uri
from rag_loop.store.tables import create_tables, relation_kind
from tests.engines.conftest import needs_spark
from tests.engines.test_spark import assert_same_rows
from tests.engines.test_spark_ingest import NOW, on_both, small_folder, tables
from tests.helpers import trace_line
from tests.helpers.otlp import AFTER, line, request_spans, shifted, write

pytestmark = needs_spark


def test_a_trace_assembled_again_is_rewritten_in_the_lake(session, tmp_path):  # noqa: F811
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    first, second = request_spans(1), request_spans(2)
    write(directory / "a.otlp.jsonl", [line(first[:2]), line(second)])  # trace 1 without its LLM span
    (directory / "native.jsonl").write_text(trace_line("native", timestamp="2026-11-11T09:00:00Z") + "\n")  # same day
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        on_both(session, (sequential, on_spark), directory, lake, now=AFTER)
        (day,) = Lake.of(lake).days("raw_traces")
        files = Lake.of(lake).files("raw_traces", [day])
        write(directory / "b.otlp.jsonl", [line(first[2:])])  # the late span: trace 1 assembled again
        _, report = on_both(session, (sequential, on_spark), directory, lake, now=AFTER)
        assert report.assembly.reassembled == 1
        after = Lake.of(lake).files("raw_traces", [day])
        assert len(after) == len(files) + 1  # the file that held trace 1 rewritten, one file added
        assert len(set(files) - set(after)) == 1 and len(set(after) - set(files)) == 2  # replaced by its rewrite
        held = on_spark.execute("SELECT trace_id, count(*) FROM raw_traces GROUP BY ALL HAVING count(*) > 1").fetchall()
        assert held == []


DAY_BEFORE, DAY_AFTER = -11 * 3_600_000, 15 * 3_600_000  # a span of tests.helpers.otlp at 23:00 before, 01:00 after


def spans_read_back(monkeypatch) -> list[int]:
    """The span rows Spark ingestion reads from the lake (`LakeTraces._load_rows`), per read."""
    real, read = raw_lake.LakeTraces._load_rows, []

    def counting(self, con, table, ids, days, folder):
        real(self, con, table, ids, days, folder)
        if table == "otlp_spans":
            files = list((folder / table).glob("*.parquet"))
            read.append(duckdb.sql(f"SELECT count(*) FROM read_parquet({[str(f) for f in files]})").fetchall()[0][0]
                        if files else 0)
    monkeypatch.setattr(raw_lake.LakeTraces, "_load_rows", counting)
    return read


def test_a_traces_spans_on_two_days_and_a_late_span_on_another_day_are_all_assembled(session, tmp_path,  # noqa: F811
                                                                                       monkeypatch):
    """For an assembly, Spark ingestion reads back the spans earlier runs stored, never the run's own."""
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    first, second, third = request_spans(1), request_spans(2), request_spans(3)
    write(directory / "a.otlp.jsonl", [line([shifted(first[1], DAY_BEFORE), shifted(third[1], DAY_AFTER)]),
                                       line(second)])
    read = spans_read_back(monkeypatch)
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        _, report = on_both(session, (sequential, on_spark), directory, lake, now=AFTER - timedelta(hours=11))
        assert report.assembly.waiting == 2  # traces 1 and 3: one span of the day before, or after; no root yet
        assert len(Lake.of(lake).days("otlp_spans")) == 3 and sum(read) == 0  # every trace new: nothing read
        for con in (sequential, on_spark):  # trace 3 as from before the days: any day (its span's, no other's)
            con.execute("UPDATE otlp_pending SET day = NULL WHERE trace_id = ?", [f"{3:032x}"])
        write(directory / "b.otlp.jsonl", [line([first[0], first[2], third[0], third[2]])])  # on that day
        read.clear()
        _, report = on_both(session, (sequential, on_spark), directory, lake, now=AFTER)
        assert report.assembly.ingested == 2 and report.assembly.waiting == 0
        assert sum(read) == 2  # traces 1 and 3's spans of the first run
        assert on_spark.execute("SELECT spans FROM otlp_traces ORDER BY trace_id").fetchall() == [(3,), (3,), (3,)]

        stored = {path: os.stat(path).st_mtime_ns for path in Lake.of(lake).files("otlp_spans")}
        late = shifted(second[2], DAY_BEFORE) | {"spanId": f"{2:08x}{9:08x}"}  # trace 2 assembled, on one day
        write(directory / "c.otlp.jsonl", [line([late])])
        read.clear()
        _, report = on_both(session, (sequential, on_spark), directory, lake, now=AFTER)
        assert report.assembly.reassembled == 1 and sum(read) == 3  # trace 2's spans, but the late one
        assert on_spark.execute("SELECT spans FROM otlp_traces ORDER BY trace_id").fetchall() == [(3,), (4,), (3,)]
        after = {path: os.stat(path).st_mtime_ns for path in Lake.of(lake).files("otlp_spans")}
        assert stored.items() <= after.items() and len(after) == len(stored) + 1  # added, none rewritten


def test_a_failure_while_writing_the_lake_leaves_database_and_lake_as_they_were(session, tmp_path, monkeypatch):  # noqa: F811
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    small_folder(directory, "a")
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        on_both(session, (sequential, on_spark), directory, lake)
        before, files = tables(on_spark), sorted(lake.rglob("*"))
        versions = {table: Lake.of(lake).delta(table).version() for table in KEPT_IN_LAKE}
        rows = {table: Lake.of(lake).dataset(table).to_table().sort_by([("trace_id", "ascending")])
                for table in KEPT_IN_LAKE}
        for name, day in (("b", "01"), ("c", "02")):  # two days: two new files
            (directory / f"{name}.jsonl").write_text(trace_line(name, timestamp=f"2026-11-{day}T08:00:00Z") + "\n")
        real, calls = raw_lake.write_lake_file, []

        def failing(*args):
            calls.append(args)
            if len(calls) == 2:  # the first day's new file is written, the second's is not
                raise OSError("the disk is full")
            return real(*args)
        monkeypatch.setattr(raw_lake, "write_lake_file", failing)
        with pytest.raises(OSError, match="disk is full"):
            ingest_directory_on_spark(session, on_spark, directory, lake, now=NOW)
        assert tables(on_spark) == before
        assert {table: Lake.of(lake).delta(table).version() for table in KEPT_IN_LAKE} == versions
        assert {table: Lake.of(lake).dataset(table).to_table().sort_by([("trace_id", "ascending")])
                for table in KEPT_IN_LAKE} == rows
        assert sorted(p for p in lake.rglob("*") if ".ingest" not in p.parts) == \
            [p for p in files if ".ingest" not in p.parts]  # no commit, no file left behind
        monkeypatch.undo()
        on_both(session, (sequential, on_spark), directory, lake)  # the run redone whole


def test_duckdb_and_spark_ingestion_take_turns_on_one_database(session, tmp_path):  # noqa: F811
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    with duckdb.connect() as sequential, duckdb.connect(str(tmp_path / "turns.duckdb")) as turns:
        small_folder(directory, "a")
        on_both(session, (sequential, turns), directory, lake)
        fingerprints = traffic_fingerprints(turns)
        assert set(fingerprints) == set(Lake.of(lake).days("raw_traces"))
        assert fingerprints == Lake.of(lake).day_fingerprints("raw_traces")  # the current version's files

        small_folder(directory, "b")
        (directory / "late.jsonl").write_text(trace_line("late", timestamp="2026-11-20T10:00:00Z") + "\n")
        ingest_directory(sequential, directory, now=NOW)
        with pytest.raises(WrongHome, match="migrate --to embedded"):
            ingest_directory(turns, directory, now=NOW)  # a run never moves a table home
        migrate(turns, Lake.of(lake), "embedded")  # the lake's traces back into the database
        ingest_directory(turns, directory, now=NOW)
        assert {relation_kind(turns, table) for table in KEPT_IN_LAKE} == {"table"}
        create_tables(turns)
        assert tables(turns) == tables(sequential)

        small_folder(directory, "c")
        crashed = lake / "raw_traces" / f"day={min(Lake.of(lake).days('raw_traces'))}" / "part-crashed.parquet"
        crashed.write_bytes(b"half a file")  # what a run killed while writing leaves: no version lists it
        with pytest.raises(WrongHome, match="migrate --to lake"):
            ingest_directory_on_spark(session, turns, directory, lake, now=NOW)
        assert {relation_kind(turns, table) for table in KEPT_IN_LAKE} == {"table"}  # refused before any change
        migrate(turns, Lake.of(lake), "lake")
        on_both(session, (sequential, turns), directory, lake)  # and into the lake again
        assert str(crashed) not in Lake.of(lake).files("raw_traces")
        create_tables(turns)  # a stage's: the views are left as they are
        assert all(lake_view_uri(turns, table) == Lake.of(lake).uri(table) for table in KEPT_IN_LAKE)
        assert tables(turns) == tables(sequential)
        now = traffic_fingerprints(turns)
        changed = {day for day in now if now[day] != fingerprints.get(day)}
        assert changed == set(now)  # every day was migrated (rewritten) once: a new fingerprint each
        small_folder(directory, "d")  # a trace of 1 November, and "shared" again
        on_both(session, (sequential, turns), directory, lake)
        again = traffic_fingerprints(turns)
        assert {day.isoformat() for day in again if again[day] != now[day]} == {"2026-11-01"}
        assert {day.isoformat() for day in again} == {"2026-11-01", "2026-11-20"}


def test_a_lake_from_before_a_column_takes_it_in_the_next_run(session, tmp_path):
    """The lake's raw_traces table (its schema and files) and view as a rag-loop from before
    `retrieval_unreadable` left them: the next Spark ingestion adds the column to the table and
    stores its new traces with it, and the view has it again (NULL in the older files), as
    DuckDB's table does; a stage on Spark reads it from both kinds of file (`trace_signals` as
    on DuckDB)."""
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    with duckdb.connect() as sequential, duckdb.connect(str(tmp_path / "older.duckdb")) as older:
        small_folder(directory, "a")
        on_both(session, (sequential, older), directory, lake)
        columns = [c for c, *_ in older.execute("DESCRIBE raw_traces").fetchall() if c != "retrieval_unreadable"]
        rows = Lake.of(lake).dataset("raw_traces").to_table().drop_columns(["retrieval_unreadable"])
        shutil.rmtree(lake / "raw_traces")
        Lake.of(lake).write("raw_traces", rows)
        assert "retrieval_unreadable" not in Lake.of(lake).schema("raw_traces").names
        create_lake_views(older, Lake.of(lake), {"raw_traces": columns})
        assert "retrieval_unreadable" not in {c for c, *_ in older.execute("DESCRIBE raw_traces").fetchall()}
        small_folder(directory, "b")
        on_both(session, (sequential, older), directory, lake)
        assert older.execute("SELECT count(*) FROM raw_traces WHERE retrieval_unreadable IS NULL").fetchall() == [(3,)]
        compute_signals(sequential, SignalSettings())  # a stage on Spark reads the older files and the newer
        compute_signals(older, SignalSettings(), SparkEngine(session, lake))
        assert_same_rows(older.execute("SELECT * FROM trace_signals").df(),
                         sequential.execute("SELECT * FROM trace_signals").df(), "trace_id")
