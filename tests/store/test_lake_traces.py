"""raw_traces, its child tables and otlp_spans in the trace lake (rag_loop.store.lake_traces): an
OTLP trace assembled again is removed from the file that held it and added anew; a trace's
spans on two days, or a late span on another day than the others, are all found for its
assembly, the spans stored before are not written again and the run's own are not read back;
a failure while writing the lake's files leaves the database and the lake (its tables'
versions) as they were; embedded ingestion after a lake-backed one refuses the lake's tables,
and the lake's the database's, until `migrate` moves them, with the same rows as embedded
alone; the traffic fingerprints are the current versions' day files'."""

import os
from datetime import timedelta

import duckdb
import pytest

import rag_loop.store.lake_traces as lake_traces
from rag_loop.engines.incremental import traffic_fingerprints
from rag_loop.ingest import ingest_directory
from rag_loop.ingest.lake import ingest_directory_into_lake
from rag_loop.store.ddl import KEPT_IN_LAKE
from rag_loop.store.deployment import WrongHome, migrate, recorded_lake
from rag_loop.store.lake import Lake
from rag_loop.store.tables import create_tables, relation_kind
from tests.helpers import trace_line
from tests.helpers.otlp import AFTER, line, request_spans, shifted, write
from tests.store.test_lake_ingest import NOW, on_both, small_folder, tables


def test_a_trace_assembled_again_is_rewritten_in_the_lake(tmp_path):
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    first, second = request_spans(1), request_spans(2)
    write(directory / "a.otlp.jsonl", [line(first[:2]), line(second)])  # trace 1 without its LLM span
    (directory / "native.jsonl").write_text(trace_line("native", timestamp="2026-11-11T09:00:00Z") + "\n")  # same day
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        on_both((embedded, in_lake), directory, lake, now=AFTER)
        (day,) = Lake.of(lake).days("raw_traces")
        files = Lake.of(lake).files("raw_traces", [day])
        write(directory / "b.otlp.jsonl", [line(first[2:])])  # the late span: trace 1 assembled again
        _, report = on_both((embedded, in_lake), directory, lake, now=AFTER)
        assert report.assembly.reassembled == 1
        after = Lake.of(lake).files("raw_traces", [day])
        assert len(after) == len(files) + 1  # the file that held trace 1 rewritten, one file added
        assert len(set(files) - set(after)) == 1 and len(set(after) - set(files)) == 2  # replaced by its rewrite
        held = in_lake.execute("SELECT trace_id, count(*) FROM raw_traces GROUP BY ALL HAVING count(*) > 1").fetchall()
        assert held == []


DAY_BEFORE, DAY_AFTER = -11 * 3_600_000, 15 * 3_600_000  # a span of tests.helpers.otlp at 23:00 before, 01:00 after


def spans_read_back(monkeypatch) -> list[int]:
    """The span rows ingestion reads from the lake (`LakeTraces._load_rows`), per read."""
    real, read = lake_traces.LakeTraces._load_rows, []

    def counting(self, con, table, ids, days):
        loaded = 'SELECT count(*) FROM temp.main."_lake_before_otlp_spans"'
        before = con.execute(loaded).fetchall()[0][0]
        real(self, con, table, ids, days)
        if table == "otlp_spans":
            read.append(con.execute(loaded).fetchall()[0][0] - before)
    monkeypatch.setattr(lake_traces.LakeTraces, "_load_rows", counting)
    return read


def test_a_traces_spans_on_two_days_and_a_late_span_on_another_day_are_all_assembled(tmp_path,
                                                                                       monkeypatch):
    """For an assembly, ingestion reads back the spans earlier runs stored, never the run's own."""
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    first, second, third = request_spans(1), request_spans(2), request_spans(3)
    write(directory / "a.otlp.jsonl", [line([shifted(first[1], DAY_BEFORE), shifted(third[1], DAY_AFTER)]),
                                       line(second)])
    read = spans_read_back(monkeypatch)
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        _, report = on_both((embedded, in_lake), directory, lake, now=AFTER - timedelta(hours=11))
        assert report.assembly.waiting == 2  # traces 1 and 3: one span of the day before, or after; no root yet
        assert len(Lake.of(lake).days("otlp_spans")) == 3 and sum(read) == 0  # every trace new: nothing read
        for con in (embedded, in_lake):  # trace 3 as from before the days: any day (its span's, no other's)
            con.execute("UPDATE otlp_pending SET day = NULL WHERE trace_id = ?", [f"{3:032x}"])
        write(directory / "b.otlp.jsonl", [line([first[0], first[2], third[0], third[2]])])  # on that day
        read.clear()
        _, report = on_both((embedded, in_lake), directory, lake, now=AFTER)
        assert report.assembly.ingested == 2 and report.assembly.waiting == 0
        assert sum(read) == 2  # traces 1 and 3's spans of the first run
        assert in_lake.execute("SELECT spans FROM otlp_traces ORDER BY trace_id").fetchall() == [(3,), (3,), (3,)]

        stored = {path: os.stat(path).st_mtime_ns for path in Lake.of(lake).files("otlp_spans")}
        late = shifted(second[2], DAY_BEFORE) | {"spanId": f"{2:08x}{9:08x}"}  # trace 2 assembled, on one day
        write(directory / "c.otlp.jsonl", [line([late])])
        read.clear()
        _, report = on_both((embedded, in_lake), directory, lake, now=AFTER)
        assert report.assembly.reassembled == 1 and sum(read) == 3  # trace 2's spans, but the late one
        assert in_lake.execute("SELECT spans FROM otlp_traces ORDER BY trace_id").fetchall() == [(3,), (4,), (3,)]
        after = {path: os.stat(path).st_mtime_ns for path in Lake.of(lake).files("otlp_spans")}
        assert stored.items() <= after.items() and len(after) == len(stored) + 1  # added, none rewritten


def test_a_failure_while_writing_the_lake_leaves_database_and_lake_as_they_were(tmp_path, monkeypatch):
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    small_folder(directory, "a")
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        on_both((embedded, in_lake), directory, lake)
        before, files = tables(in_lake), sorted(lake.rglob("*"))
        versions = {table: Lake.of(lake).delta(table).version() for table in KEPT_IN_LAKE}
        rows = {table: Lake.of(lake).dataset(table).to_table().sort_by([("trace_id", "ascending")])
                for table in KEPT_IN_LAKE}
        for name, day in (("b", "01"), ("c", "02")):  # two days: two new files
            (directory / f"{name}.jsonl").write_text(trace_line(name, timestamp=f"2026-11-{day}T08:00:00Z") + "\n")
        real, calls = lake_traces.write_lake_file, []

        def failing(*args):
            calls.append(args)
            if len(calls) == 2:  # the first day's new file is written, the second's is not
                raise OSError("the disk is full")
            return real(*args)
        monkeypatch.setattr(lake_traces, "write_lake_file", failing)
        with pytest.raises(OSError, match="disk is full"):
            ingest_directory_into_lake(in_lake, directory, lake, now=NOW)
        assert tables(in_lake) == before
        assert {table: Lake.of(lake).delta(table).version() for table in KEPT_IN_LAKE} == versions
        assert {table: Lake.of(lake).dataset(table).to_table().sort_by([("trace_id", "ascending")])
                for table in KEPT_IN_LAKE} == rows
        assert sorted(p for p in lake.rglob("*") if ".ingest" not in p.parts) == \
            [p for p in files if ".ingest" not in p.parts]  # no commit, no file left behind
        monkeypatch.undo()
        on_both((embedded, in_lake), directory, lake)  # the run redone whole


def test_embedded_and_lake_backed_ingestion_take_turns_on_one_database(tmp_path):
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    with duckdb.connect() as embedded, duckdb.connect(str(tmp_path / "turns.duckdb")) as turns:
        small_folder(directory, "a")
        on_both((embedded, turns), directory, lake)
        fingerprints = traffic_fingerprints(turns)
        assert set(fingerprints) == set(Lake.of(lake).days("raw_traces"))
        assert fingerprints == Lake.of(lake).day_fingerprints("raw_traces")  # the current version's files

        small_folder(directory, "b")
        (directory / "late.jsonl").write_text(trace_line("late", timestamp="2026-11-20T10:00:00Z") + "\n")
        ingest_directory(embedded, directory, now=NOW)
        with pytest.raises(WrongHome, match="migrate --to embedded"):
            ingest_directory(turns, directory, now=NOW)  # a run never moves a table home
        migrate(turns, Lake.of(lake), "embedded")  # the lake's traces back into the database
        ingest_directory(turns, directory, now=NOW)
        assert {relation_kind(turns, table) for table in KEPT_IN_LAKE} == {"table"}
        create_tables(turns)
        assert tables(turns) == tables(embedded)

        small_folder(directory, "c")
        crashed = lake / "raw_traces" / f"day={min(Lake.of(lake).days('raw_traces'))}" / "part-crashed.parquet"
        crashed.write_bytes(b"half a file")  # what a run killed while writing leaves: no version lists it
        with pytest.raises(WrongHome, match="migrate --to lake"):
            ingest_directory_into_lake(turns, directory, lake, now=NOW)
        assert {relation_kind(turns, table) for table in KEPT_IN_LAKE} == {"table"}  # refused before any change
        migrate(turns, Lake.of(lake), "lake")
        on_both((embedded, turns), directory, lake)  # and into the lake again
        assert str(crashed) not in Lake.of(lake).files("raw_traces")
        create_tables(turns)  # a stage's: the views are left as they are
        assert {relation_kind(turns, table) for table in KEPT_IN_LAKE} == {"view"}
        assert recorded_lake(turns) == Lake.of(lake)
        assert tables(turns) == tables(embedded)
        now = traffic_fingerprints(turns)
        changed = {day for day in now if now[day] != fingerprints.get(day)}
        assert changed == set(now)  # every day was migrated (rewritten) once: a new fingerprint each
        small_folder(directory, "d")  # a trace of 1 November, and "shared" again
        on_both((embedded, turns), directory, lake)
        again = traffic_fingerprints(turns)
        assert {day.isoformat() for day in again if again[day] != now[day]} == {"2026-11-01"}
        assert {day.isoformat() for day in again} == {"2026-11-01", "2026-11-20"}
