"""Ingestion into a lake-backed deployment (rag_loop.ingest.lake) leaves the database, and
reports, exactly as `ingest_directory` does in an embedded one (every ingestion table as a set of
rows, but for the wall-clock columns; every file's report): on the demo folder, run again, and
after a file changed; on hostile folders; on OTLP files over two runs; with files that cannot be
read whole; on an s3:// lake. A failure while storing leaves the database as it was; the stored
copies are looked up in the days the new records fall on only."""

import gzip
import os
import shutil
from datetime import UTC, date, datetime

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rag_loop.ingest.lake as lake_ingest
import rag_loop.ingest.pipeline as pipeline
from rag_loop.engines.incremental import traffic_fingerprints
from rag_loop.ingest import IngestReport, ingest_directory
from rag_loop.ingest.lake import ingest_directory_into_lake
from rag_loop.store.deployment import migrate, recorded_lake
from rag_loop.store.lake import Lake
from rag_loop.store.lake_traces import LakeTraces
from tests.helpers import DEMO, trace_line
from tests.helpers.otlp import AFTER, hostile_span, request_spans
from tests.helpers.otlp import line as otlp_line

NOW = datetime(2026, 12, 1, tzinfo=UTC)  # OTLP assembly's clock, the same on both
LATER = datetime(2026, 11, 11, 11, 1, tzinfo=UTC)  # the grace period after tests.helpers.otlp's spans
WALL_CLOCK = {"raw_traces": "ingested_at", "trace_chunks": None, "trace_spans": None,
              "trace_feedback": None, "quarantine": "quarantined_at", "trace_duplicates": "seen_at",
              "ingested_files": "ingested_at", "otlp_spans": "received_at", "otlp_traces": "assembled_at",
              "otlp_pending": None}


def tables(con) -> dict[str, list[tuple]]:
    """Every ingestion table's rows, sorted, without the wall-clock columns, columns by name (a
    lake's view from before a column has it last)."""
    def columns(table: str, clock: str | None) -> str:  # the catalog's: a DESCRIBE of a view reads its files
        names = sorted(c for (c,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
            "AND schema_name = current_schema() AND table_name = ?", [table]).fetchall() if c != clock)
        return ", ".join(f'"{name}"' for name in names)
    return {table: con.execute(f"SELECT {columns(table, clock)} FROM {table} ORDER BY ALL").fetchall()
            for table, clock in WALL_CLOCK.items()}


def on_both(cons, directory, lake, now=NOW) -> tuple[IngestReport, IngestReport]:
    """Ingest `directory` into cons[0] by `ingest_directory`, into cons[1] with its traces in
    `lake` (a folder or a Lake), and check that both give the same tables and the same report."""
    embedded = ingest_directory(cons[0], directory, now=now)
    in_lake = ingest_directory_into_lake(cons[1], directory, lake, now=now)
    assert tables(cons[1]) == tables(cons[0])
    assert in_lake.files == embedded.files
    assert (in_lake.ignored, in_lake.assembly, in_lake.languages) == \
        (embedded.ignored, embedded.assembly, embedded.languages)
    assert recorded_lake(cons[1]).root == Lake.of(lake).root
    return embedded, in_lake


DEMO_FILES = ("native/2026-11-01.jsonl.gz", "native/2026-11-14.jsonl.gz", "native/redelivery.jsonl.gz",
              "malformed/bad-records.jsonl", "otlp/2026-11-01.otlp.jsonl.gz")  # redelivered across files


def test_the_demo_folder_a_rerun_and_a_changed_file_give_the_same_tables(tmp_path):
    directory = tmp_path / "traces"
    for name in DEMO_FILES:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO / "traces" / name, directory / name)
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        cons = (embedded, in_lake)
        first, _ = on_both(cons, directory, tmp_path / "lake")
        by_path = {f.path: f for f in first.files}
        assert by_path["native/redelivery.jsonl.gz"].counts.duplicates > 0  # across files
        assert {f.format for f in first.files} == {"native", "otlp"}
        stored = tables(in_lake)
        again, _ = on_both(cons, directory, tmp_path / "lake")
        assert all(f.skipped for f in again.files) and tables(in_lake) == stored

        changed = directory / "native" / "2026-11-14.jsonl.gz"
        own = gzip.decompress(changed.read_bytes()).splitlines()
        other = gzip.decompress((directory / "native" / "2026-11-01.jsonl.gz").read_bytes()).splitlines()
        appended = [other[0], own[0], trace_line("new-one").encode(), b"{oops", own[2]]
        changed.write_bytes(gzip.compress(b"\n".join(own + appended) + b"\n"))
        _, last = on_both(cons, directory, tmp_path / "lake")
        read = [f for f in last.files if not f.skipped]
        assert [f.path for f in read] == ["native/2026-11-14.jsonl.gz"]
        assert (read[0].counts.ingested, read[0].counts.quarantined) == (1, 1)
        assert in_lake.execute("SELECT count(*) FROM trace_duplicates WHERE source_file = ?",
                                [read[0].path]).fetchall() == [(3,)]  # the lines appended


names = st.binary(min_size=1, max_size=8).filter(
    lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b".."))
lines = st.one_of(st.sampled_from(["blank", "garbage", "deep", "cr"]),
                  st.tuples(st.just("good"), st.sampled_from(["t0", "t1", "t2"])),  # shared ids
                  st.binary(max_size=20))
LINES = {"blank": b"\n", "garbage": b"{oops\n", "deep": b"[" * 3000 + b"\n", "cr": b'{"a": 1}\r\n'}


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(names, st.lists(lines, max_size=5), min_size=1, max_size=3),
       corrupt_gzip=st.booleans())
def test_hostile_folders_give_the_same_tables(tmp_path_factory, files, corrupt_gzip):
    directory = tmp_path_factory.mktemp("d")
    for name, content in files.items():
        body = b"".join(trace_line(kind[1]).encode() + b"\n" if isinstance(kind, tuple)
                        else kind + b"\n" if isinstance(kind, bytes) else LINES[kind]
                        for kind in content)
        with open(os.path.join(os.fsencode(directory), name + b".jsonl"), "wb") as handle:
            handle.write(body)
    if corrupt_gzip:
        (directory / "corrupt.jsonl.gz").write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        on_both((embedded, in_lake), directory, tmp_path_factory.mktemp("lake"))


@st.composite
def otlp_runs(draw):
    """Two runs' OTLP files: request traces' spans spread over lines, files and runs (roots that
    come later, late spans), some sent twice (an exporter's retry), among hostile spans and
    garbage lines; a file of the second run is the first run's file grown, or a new one."""
    lines: dict[tuple[int, int], list[list[dict] | str]] = {}
    for trace in range(1, draw(st.integers(1, 5)) + 1):
        for part in request_spans(trace):
            for _ in range(draw(st.integers(1, 2))):
                place = (draw(st.integers(0, 1)), draw(st.integers(0, 2)))
                batch = lines.setdefault(place, [])
                if batch and isinstance(batch[-1], list) and draw(st.booleans()):
                    batch[-1].append(part)  # on the line before: an export batch
                else:
                    batch.append([part])
    for place in list(lines) + [(draw(st.integers(0, 1)), draw(st.integers(0, 2)))]:
        for _ in range(draw(st.integers(0, 2))):
            hostile = draw(st.one_of(hostile_span(draw(st.integers(1, 5))).map(lambda s: [s]),
                                     st.text(max_size=20).map(lambda t: t.replace("\n", " "))))
            lines.setdefault(place, []).insert(draw(st.integers(0, len(lines[place]))), hostile)
    text = {place: [otlp_line(item) if isinstance(item, list) else item for item in items]
            for place, items in lines.items()}
    return [{f"f{f}.otlp.jsonl": text.get((0, f), []) + (text.get((1, f), []) if run else [])
             for f in range(3) if (0, f) in text or (run and (1, f) in text)} for run in (0, 1)]


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=otlp_runs(), late=st.booleans())
def test_otlp_files_over_two_runs_give_the_same_tables(tmp_path_factory, runs, late):
    directory, lake = tmp_path_factory.mktemp("otlp"), tmp_path_factory.mktemp("lake")
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        for run, files in enumerate(runs):
            for name, content in files.items():
                (directory / name).write_text("".join(text + "\n" for text in content))
            # the second run may come after the grace period: traces without a root are assembled
            on_both((embedded, in_lake), directory, lake,
                    now=LATER if run and late else AFTER)


def small_folder(directory, *names: str) -> None:
    """Files of two traces each, one of them the same in every file."""
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / f"{name}.jsonl").write_text(f"{trace_line(name)}\n{trace_line('shared')}\n")


def test_a_failure_while_storing_leaves_the_database_as_it_was(tmp_path, monkeypatch):
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    small_folder(directory, "a")
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        for con in (embedded, in_lake):
            ingest_directory(con, directory, now=NOW)
        migrate(in_lake, Lake.of(lake), "lake")  # the deployment becomes lake-backed
        before = tables(in_lake)
        small_folder(directory, "b", "c")
        # changed: its stored copy of "shared" (line 2) is now on line 1 too, before it
        (directory / "a.jsonl").write_text("".join(f"{trace_line(t)}\n" for t in ("shared", "shared", "a2")))
        # its spans are stored in the same transaction as the native files
        shutil.copy(DEMO / "traces" / "otlp" / "2026-11-01.otlp.jsonl.gz", directory / "0.otlp.jsonl.gz")

        def failing(*args):
            raise RuntimeError("the disk is full")
        monkeypatch.setattr(lake_ingest, "mark_ingested", failing)  # after the rows are inserted
        with pytest.raises(RuntimeError, match="disk is full"):
            ingest_directory_into_lake(in_lake, directory, lake, now=NOW)
        assert tables(in_lake) == before
        monkeypatch.undo()
        on_both((embedded, in_lake), directory, lake)  # the run redone whole


def test_files_that_cannot_be_read_whole_are_set_aside_as_on_the_duckdb_path(tmp_path, monkeypatch):
    directory = tmp_path / "traces"
    small_folder(directory, "a", "crash", "locked")

    def broken(module) -> dict:
        """The pipeline module's functions, but for a reader crash on crash.jsonl and no
        permission to open locked.jsonl (root ignores chmod 000)."""
        load, detect = module._load, module.detect_format

        def crashing(con, fmt, reader, path, *args):
            if path.name == "crash.jsonl":
                raise RecursionError("maximum recursion depth exceeded")
            return load(con, fmt, reader, path, *args)

        def no_permission(path, *args):
            if path.name == "locked.jsonl":
                raise PermissionError(13, "Permission denied", str(path))
            return detect(path, *args)
        return {"_load": crashing, "detect_format": no_permission}

    for name, function in broken(pipeline).items():  # both paths read a file with these
        monkeypatch.setattr(pipeline, name, function)
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        _, report = on_both((embedded, in_lake), directory, tmp_path / "lake")
    assert [(f.path, f.reader) for f in report.files] == [
        ("a.jsonl", "read_json"), ("crash.jsonl", "none"), ("locked.jsonl", "retry")]


def test_the_stored_copies_are_looked_up_in_the_new_records_days_only(tmp_path, monkeypatch):
    """A resent record carries its timestamp, so its day: the lookup reads the days the run's
    records fall on, not the history."""
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    directory.mkdir()
    (directory / "a.jsonl").write_text("".join(trace_line(f"a{d}", timestamp=f"2026-11-0{d}T08:00:00Z") + "\n"
                                               for d in (1, 2, 3)))
    asked, real = [], LakeTraces.stored

    def recording(self, table, columns, days):
        asked.append((table, sorted(days)))
        return real(self, table, columns, days)
    monkeypatch.setattr(LakeTraces, "stored", recording)
    with duckdb.connect() as embedded, duckdb.connect() as in_lake:
        on_both((embedded, in_lake), directory, lake)
        asked.clear()
        (directory / "b.jsonl").write_text(trace_line("a2", timestamp="2026-11-02T08:00:00Z") + "\n"
                                           + trace_line("b", timestamp="2026-11-02T09:00:00Z") + "\n")
        _, report = on_both((embedded, in_lake), directory, lake)
    assert asked == [("raw_traces", [date(2026, 11, 2)])]
    assert report.files[-1].counts.duplicates == 1


def test_an_s3_lake_gives_the_same_tables(tmp_path):
    """On a local S3-compatible server (moto, loopback only), the endpoint given only in the
    lake's storage options: a first run (a day's file and redeliveries of its traces and of
    another day's), then a changed file and a new OTLP file; the traffic fingerprints (of the
    view's lake table) read the log with those options."""
    from tests.helpers.s3 import s3_server

    directory = tmp_path / "traces"
    (directory / "native").mkdir(parents=True)
    shutil.copy(DEMO / "traces" / "native" / "2026-11-01.jsonl.gz", directory / "native" / "2026-11-01.jsonl.gz")
    # the redelivery file's lines of two days (of eleven): the S3 requests go by day file, and the
    # demo folder's test reads the whole file into a local lake
    redelivered = gzip.decompress((DEMO / "traces" / "native" / "redelivery.jsonl.gz").read_bytes()).splitlines()
    two_days = [line for line in redelivered if b'"2026-11-01T' in line or b'"2026-11-02T' in line]
    assert len(two_days) == 3  # two traces of 2026-11-01.jsonl.gz again, one of another day
    (directory / "native" / "redelivery.jsonl.gz").write_bytes(gzip.compress(b"\n".join(two_days) + b"\n"))
    with s3_server() as s3, duckdb.connect() as embedded, duckdb.connect() as in_lake:
        lake = Lake(f"s3://{s3.bucket}/lake", s3.storage_options())
        on_both((embedded, in_lake), directory, lake)
        (directory / "native" / "redelivery.jsonl.gz").write_bytes(gzip.compress(trace_line("new-one").encode()))
        shutil.copy(DEMO / "traces" / "otlp" / "2026-11-01.otlp.jsonl.gz", directory / "spans.otlp.jsonl.gz")
        _, report = on_both((embedded, in_lake), directory, lake)
        assert report.assembly.ingested > 0
        assert any(key.startswith("lake/otlp_spans/day=") for key in s3.keys("lake/"))
        assert "AWS_ENDPOINT_URL" not in os.environ  # the marker's table found with the lake's options
        assert traffic_fingerprints(in_lake) == lake.day_fingerprints("raw_traces") != {}
