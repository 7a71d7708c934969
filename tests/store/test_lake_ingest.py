"""Ingestion with the parsing on Spark leaves the database, and reports, exactly as
`ingest_directory` does (every ingestion table as a set of rows, but for the wall-clock columns;
every file's report): on the demo folder, run again, and after a file changed; on hostile
folders; with files that cannot be read whole. A failure while storing leaves the database as
it was, and a task that crashes its worker gives up only its own file."""

import gzip
import os
import shutil
from datetime import UTC, datetime

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rag_loop.engines.ingest as spark_ingest
import rag_loop.ingest.pipeline as pipeline
from rag_loop.engines.ingest import ingest_directory_on_spark
from rag_loop.ingest import IngestReport, ingest_directory
from rag_loop.store.ddl import KEPT_IN_LAKE
from rag_loop.store.deployment import migrate
from rag_loop.store.lake import Lake, lake_view_uri
from tests.engines.conftest import needs_spark
from tests.helpers import DEMO, trace_line
from tests.helpers.otlp import AFTER, hostile_span, request_spans
from tests.helpers.otlp import line as otlp_line

pytestmark = needs_spark
NOW = datetime(2026, 12, 1, tzinfo=UTC)  # OTLP assembly's clock, the same on both
LATER = datetime(2026, 11, 11, 11, 1, tzinfo=UTC)  # the grace period after tests.helpers.otlp's spans
WALL_CLOCK = {"raw_traces": "ingested_at", "trace_chunks": None, "trace_spans": None,
              "trace_feedback": None, "quarantine": "quarantined_at", "trace_duplicates": "seen_at",
              "ingested_files": "ingested_at", "otlp_spans": "received_at", "otlp_traces": "assembled_at",
              "otlp_pending": None}


def tables(con) -> dict[str, list[tuple]]:
    """Every ingestion table's rows, sorted, without the wall-clock columns, columns by name (a
    lake's view from before a column has it last)."""
    def columns(table: str, clock: str | None) -> str:
        names = sorted(c for c, *_ in con.execute(f"DESCRIBE {table}").fetchall() if c != clock)
        return ", ".join(f'"{name}"' for name in names)
    return {table: con.execute(f"SELECT {columns(table, clock)} FROM {table} ORDER BY ALL").fetchall()
            for table, clock in WALL_CLOCK.items()}


def on_both(session, cons, directory, lake, now=NOW) -> tuple[IngestReport, IngestReport]:
    """Ingest `directory` into cons[0] by `ingest_directory`, into cons[1] on Spark (its traces
    in `lake`), and check that both give the same tables and the same report."""
    sequential = ingest_directory(cons[0], directory, now=now)
    on_spark = ingest_directory_on_spark(session, cons[1], directory, lake, now=now)
    assert tables(cons[1]) == tables(cons[0])
    assert on_spark.files == sequential.files
    assert (on_spark.ignored, on_spark.assembly, on_spark.languages) == \
        (sequential.ignored, sequential.assembly, sequential.languages)
    assert not (lake / ".ingest").exists() or not any((lake / ".ingest").iterdir())
    assert all(lake_view_uri(cons[1], table) == Lake.of(lake).uri(table) for table in KEPT_IN_LAKE)
    return sequential, on_spark


DEMO_FILES = ("native/2026-11-01.jsonl.gz", "native/2026-11-14.jsonl.gz", "native/redelivery.jsonl.gz",
              "malformed/bad-records.jsonl", "otlp/2026-11-01.otlp.jsonl.gz")  # redelivered across files


def test_the_demo_folder_a_rerun_and_a_changed_file_give_the_same_tables(session, tmp_path):
    directory = tmp_path / "traces"
    for name in DEMO_FILES:
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEMO / "traces" / name, directory / name)
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        cons = (sequential, on_spark)
        first, _ = on_both(session, cons, directory, tmp_path / "lake")
        by_path = {f.path: f for f in first.files}
        assert by_path["native/redelivery.jsonl.gz"].counts.duplicates > 0  # across files
        assert {f.format for f in first.files} == {"native", "otlp"}
        stored = tables(on_spark)
        again, _ = on_both(session, cons, directory, tmp_path / "lake")
        assert all(f.skipped for f in again.files) and tables(on_spark) == stored

        changed = directory / "native" / "2026-11-14.jsonl.gz"
        own = gzip.decompress(changed.read_bytes()).splitlines()
        other = gzip.decompress((directory / "native" / "2026-11-01.jsonl.gz").read_bytes()).splitlines()
        appended = [other[0], own[0], trace_line("new-one").encode(), b"{oops", own[2]]
        changed.write_bytes(gzip.compress(b"\n".join(own + appended) + b"\n"))
        _, last = on_both(session, cons, directory, tmp_path / "lake")
        read = [f for f in last.files if not f.skipped]
        assert [f.path for f in read] == ["native/2026-11-14.jsonl.gz"]
        assert (read[0].counts.ingested, read[0].counts.quarantined) == (1, 1)
        assert on_spark.execute("SELECT count(*) FROM trace_duplicates WHERE source_file = ?",
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
def test_hostile_folders_give_the_same_tables(session, tmp_path_factory, files, corrupt_gzip):
    directory = tmp_path_factory.mktemp("d")
    for name, content in files.items():
        body = b"".join(trace_line(kind[1]).encode() + b"\n" if isinstance(kind, tuple)
                        else kind + b"\n" if isinstance(kind, bytes) else LINES[kind]
                        for kind in content)
        with open(os.path.join(os.fsencode(directory), name + b".jsonl"), "wb") as handle:
            handle.write(body)
    if corrupt_gzip:
        (directory / "corrupt.jsonl.gz").write_bytes(b"\x1f\x8b" + b"not gzip at all")
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        on_both(session, (sequential, on_spark), directory, tmp_path_factory.mktemp("lake"))


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
def test_otlp_files_over_two_runs_give_the_same_tables(session, tmp_path_factory, runs, late):
    directory, lake = tmp_path_factory.mktemp("otlp"), tmp_path_factory.mktemp("lake")
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        for run, files in enumerate(runs):
            for name, content in files.items():
                (directory / name).write_text("".join(text + "\n" for text in content))
            # the second run may come after the grace period: traces without a root are assembled
            on_both(session, (sequential, on_spark), directory, lake,
                    now=LATER if run and late else AFTER)


def small_folder(directory, *names: str) -> None:
    """Files of two traces each, one of them the same in every file."""
    directory.mkdir(exist_ok=True)
    for name in names:
        (directory / f"{name}.jsonl").write_text(f"{trace_line(name)}\n{trace_line('shared')}\n")


def test_a_failure_while_storing_leaves_the_database_as_it_was(session, tmp_path, monkeypatch):
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    small_folder(directory, "a")
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        for con in (sequential, on_spark):
            ingest_directory(con, directory, now=NOW)
        migrate(on_spark, Lake.of(lake), "lake")  # the deployment becomes lake-backed
        before = tables(on_spark)
        small_folder(directory, "b", "c")
        # changed: its stored copy of "shared" (line 2) is now on line 1 too, before it
        (directory / "a.jsonl").write_text("".join(f"{trace_line(t)}\n" for t in ("shared", "shared", "a2")))
        # its spans are stored in the same transaction as the native files
        shutil.copy(DEMO / "traces" / "otlp" / "2026-11-01.otlp.jsonl.gz", directory / "0.otlp.jsonl.gz")

        def failing(*args):
            raise RuntimeError("the disk is full")
        monkeypatch.setattr(spark_ingest, "mark_ingested", failing)  # after the rows are inserted
        with pytest.raises(RuntimeError, match="disk is full"):
            ingest_directory_on_spark(session, on_spark, directory, lake, now=NOW)
        assert tables(on_spark) == before
        assert not (lake / ".ingest").exists() or not any((lake / ".ingest").iterdir())
        monkeypatch.undo()
        on_both(session, (sequential, on_spark), directory, lake)  # the run redone whole


def test_files_that_cannot_be_read_whole_are_set_aside_as_on_the_duckdb_path(session, tmp_path, monkeypatch):
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

    for name, function in broken(pipeline).items():  # on the DuckDB path
        monkeypatch.setattr(pipeline, name, function)
    real = spark_ingest.task_function

    def with_broken_readers(task_settings):  # in the tasks: their own process
        task = real(task_settings)

        def run(batches):  # pickled by value, with `broken`
            import rag_loop.ingest.pipeline as tasks_pipeline
            kept = {name: getattr(tasks_pipeline, name) for name in ("_load", "detect_format")}
            for name, function in broken(tasks_pipeline).items():
                setattr(tasks_pipeline, name, function)
            try:
                yield from task(batches)
            finally:  # the worker process runs later tasks too
                for name, function in kept.items():
                    setattr(tasks_pipeline, name, function)
        return run
    monkeypatch.setattr(spark_ingest, "task_function", with_broken_readers)
    with duckdb.connect() as sequential, duckdb.connect() as on_spark:
        _, report = on_both(session, (sequential, on_spark), directory, tmp_path / "lake")
    assert [(f.path, f.reader) for f in report.files] == [
        ("a.jsonl", "read_json"), ("crash.jsonl", "none"), ("locked.jsonl", "retry")]


def test_a_task_that_crashes_its_worker_gives_up_only_its_own_file(session, tmp_path, monkeypatch):
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    small_folder(directory, "a", "b", "c")
    real = spark_ingest.task_function

    def crashing(task_settings):
        task = real(task_settings)

        def run(batches):  # pickled by value, with `real`'s task
            for batch in batches:
                if batch.column("relative")[0].as_py() == "b.jsonl":
                    os._exit(3)
                yield from task(iter([batch]))
        return run
    monkeypatch.setattr(spark_ingest, "task_function", crashing)
    with duckdb.connect() as on_spark:
        report = ingest_directory_on_spark(session, on_spark, directory, lake, now=NOW)
        assert [(f.path, f.reader) for f in report.files] == [
            ("a.jsonl", "read_json"), ("b.jsonl", "retry"), ("c.jsonl", "read_json")]
        assert on_spark.execute("SELECT trace_id, source_file FROM raw_traces ORDER BY ALL").fetchall() == [
            ("a", "a.jsonl"), ("c", "c.jsonl"), ("shared", "a.jsonl")]
        (file, line, reason), = on_spark.execute("SELECT source_file, line_no, reason FROM quarantine").fetchall()
        assert (file, line) == ("b.jsonl", 0)
        assert reason.startswith("unreadable_file: Py4JJavaError(\"org.apache.spark.SparkException: "
                                 "Python worker exited unexpectedly (crashed)")
        assert on_spark.execute("SELECT path FROM ingested_files ORDER BY ALL").fetchall() == [
            ("a.jsonl",), ("c.jsonl",)]  # b is read again next time
        assert not (lake / ".ingest").exists() or not any((lake / ".ingest").iterdir())
