"""A write to the trace lake killed (SIGKILL) at any point: the table stays at its previous
version with its previous rows (or, killed after its commit, at the new one whole), DuckDB reads
it through the version's file list and through its Arrow dataset (Spark through the file list:
tests/engines/test_spark_lake_crash.py, in the Spark modules' JVM); vacuum then removes the
killed write's files and the next write succeeds.

The child process replaces four days (300,000 rows) in one `Lake.write`; the table's target file
size is small, so the write leaves files on disk one after another while it runs, and the test
kills it at points of that progress: as it starts, after its first file, after its sixth, and
after its commit. Each write is a process forked for it by one writer server, which imported the
modules once (an import is ~0.55 CPU-s, more than most of the writes)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from datetime import date, timedelta
from functools import partial
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from rag_loop.store.lake import Lake, files_query
from tests.helpers import PROJECT

pytestmark = pytest.mark.slow

DAYS = [date(2026, 11, 1) + timedelta(days=i) for i in range(4)]
ROWS_PER_DAY = 75_000
# where the write is killed: once it has left this many new files on disk, or once it committed
POINTS = {"at-start": (0, False), "one-file": (1, False), "six-files": (6, False), "committed": (0, True),
          "random": (0, False)}
SEED = time.time_ns()

CHILD = """
import os, sys
from datetime import date, timedelta
import pyarrow as pa
from rag_loop.store.lake import Lake
per_day = int(sys.argv[1])
days = [date(2026, 11, 1) + timedelta(days=i) for i in range(4)]
schema = pa.schema([("trace_id", pa.string()), ("n", pa.int64()), ("answer", pa.string()), ("day", pa.date32())])
def batches():
    for d in days:
        for start in range(0, per_day, 25_000):
            n = range(start, min(start + 25_000, per_day))
            yield pa.record_batch([pa.array([f"new-{d:%d}-{i}" for i in n]), pa.array(list(n), pa.int64()),
                                   pa.array([f"answer {i} " * 3 for i in n]), pa.array([d] * len(n), pa.date32())],
                                  schema=schema)
print("ready", flush=True)
for line in sys.stdin:  # a lake root: a writer process forked for it, its pid printed as it starts
    pid = os.fork()
    if pid == 0:
        Lake.of(line.strip()).write("t", pa.RecordBatchReader.from_batches(schema, batches()), days=set(days))
        os._exit(0)
    print(pid, flush=True)
    os.waitpid(pid, 0)  # killed or ended
    print("ended", flush=True)
"""


def old_rows() -> pa.Table:
    """The table's rows before the write: three of the four days, a few rows each."""
    return pa.table({"trace_id": [f"old-{d:%d}-{i}" for d in DAYS[:3] for i in range(100)],
                     "n": [i for _ in DAYS[:3] for i in range(100)],
                     "answer": ["old"] * 300, "day": pa.array([d for d in DAYS[:3] for _ in range(100)], pa.date32())})


def make_table(root: Path) -> Lake:
    """Version 0, its target file size 256 KiB: a write of many rows is many files."""
    write_deltalake(str(root / "t"), old_rows(), partition_by=["day"],
                    configuration={"delta.targetFileSize": str(256 * 1024)})
    return Lake.of(root)


def start_server(script: Path) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, str(script), str(ROWS_PER_DAY)], cwd=PROJECT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert server.stdout.readline() == "ready\n"  # imports done
    return server


def start_write(server: subprocess.Popen, root: Path) -> int:
    """The pid of a process that writes to the lake `root`, started now (the server reaps it)."""
    server.stdin.write(f"{root}\n")
    server.stdin.flush()
    return int(server.stdout.readline())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:  # ended and reaped by the server
        return False
    return True


def on_disk(lake: Lake) -> set[str]:
    folder = lake.path("t")
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "_delta_log" not in p.parts}


def listed(lake: Lake) -> set[str]:
    return {Path(f).relative_to(lake.path("t")).as_posix() for f in lake.files("t")}


def summary(con: duckdb.DuckDBPyConnection, relation: str) -> tuple:
    """Rows, days, and what tells old rows from new, of a relation."""
    return con.execute(f"SELECT count(*), count(DISTINCT day), count(*) FILTER (trace_id LIKE 'old-%'), "
                       f"sum(n), min(day), max(day) FROM {relation}").fetchall()[0]


OLD = (300, 3, 300, 3 * sum(range(100)), DAYS[0], DAYS[2])
NEW = (4 * ROWS_PER_DAY, 4, 0, 4 * sum(range(ROWS_PER_DAY)), DAYS[0], DAYS[3])


def kill_when(pid: int, reached, timeout: float = 60) -> None:
    """SIGKILL to the writer once `reached()` (polled every 2 ms), or once it exits by itself."""
    deadline = time.monotonic() + timeout
    while not reached() and alive(pid) and time.monotonic() < deadline:
        time.sleep(0.002)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def progressed(lake: Lake, files: int) -> bool:
    return len(on_disk(lake)) >= files


def passed(moment: float) -> bool:
    return time.monotonic() >= moment


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """One write killed at each point of its progress (on what it has left on disk so far, so
    the points hold on a loaded machine): per kill, the lake and the files on disk its current
    version does not list (a killed write's, or after a commit the replaced ones)."""
    base = tmp_path_factory.mktemp("crash")
    script = base / "child.py"
    script.write_text(CHILD)
    kills = []
    server = start_server(script)
    try:
        for point, (new_files, committed) in POINTS.items():
            lake = make_table(base / point)
            old = len(on_disk(lake))
            commit = lake.path("t") / "_delta_log" / f"{1:020d}.json"
            writer = start_write(server, lake.path())
            if point == "random":  # a moment drawn anew each run (the seed is in the assertion messages)
                kill_when(writer, partial(passed, time.monotonic() + random.Random(SEED).uniform(0, 1.5)))
            else:
                kill_when(writer, commit.exists if committed else partial(progressed, lake, old + new_files))
            assert server.stdout.readline() == "ended\n"  # gone, not only signalled
            kills.append((point, lake, on_disk(lake) - listed(lake)))
    finally:
        server.stdin.close()
        server.wait()
    return kills


def test_a_killed_write_leaves_the_previous_version_for_duckdb(killed):
    versions = {point: lake.delta("t").version() for point, lake, _ in killed}
    assert versions.pop("random") in (0, 1)
    assert versions == {"at-start": 0, "one-file": 0, "six-files": 0, "committed": 1}
    orphans = {point: len(files) for point, _, files in killed}
    assert orphans["one-file"] >= 1 and orphans["six-files"] >= 6, orphans  # killed half way: files unlisted
    assert len(killed[3][1].files("t")) > 8  # a whole write: many files, one commit
    for point, lake, _ in killed:
        with duckdb.connect() as con:
            con.register("dataset", lake.dataset("t"))
            by_files = summary(con, f"({files_query(lake.files('t'), lake.schema('t'))})")
            expected = OLD if lake.delta("t").version() == 0 else NEW  # never part of a write
            assert by_files == expected, (point, SEED)
            assert summary(con, "dataset") == expected, (point, SEED)
            assert lake.days("t") == (DAYS[:3] if expected == OLD else DAYS)


def test_vacuum_removes_the_killed_write_files_and_the_next_write_succeeds(killed):
    fresh = pa.table({"trace_id": ["after"], "n": [1], "answer": ["a"], "day": pa.array([DAYS[3]], pa.date32())})
    for point, lake, orphans in killed:
        with duckdb.connect() as con:
            before = summary(con, f"({files_query(lake.files('t'), lake.schema('t'))})")
            removed = set(lake.vacuum("t", retention_hours=0))
            assert orphans <= removed, point
            assert on_disk(lake) == listed(lake), point  # nothing left but the version's files
            assert summary(con, f"({files_query(lake.files('t'), lake.schema('t'))})") == before
            version = lake.delta("t").version()
            lake.write("t", fresh, days={DAYS[3]})
            assert lake.delta("t").version() == version + 1
            con.register("dataset", lake.dataset("t"))
            assert con.execute("SELECT trace_id FROM dataset WHERE day = ?", [DAYS[3]]).fetchall() == [("after",)]
            assert con.execute("SELECT count(*) FROM dataset WHERE day < ?", [DAYS[3]]).fetchall()[0][0] == \
                (300 if before == OLD else 3 * ROWS_PER_DAY)


def test_vacuum_removes_a_killed_local_upload(tmp_path):
    """A write killed inside a file leaves object_store's upload `<name>#<n>`, which delta-rs's
    full vacuum leaves on disk; the lake's vacuum removes it once older than the retention."""
    lake = make_table(tmp_path)
    upload = next(lake.path("t").glob("day=*/")) / "part-00003-killed.snappy.parquet#1"
    upload.write_bytes(b"PAR1 half")
    assert lake.vacuum("t", retention_hours=1) == [] and upload.exists()
    assert lake.vacuum("t", retention_hours=0) == [upload.relative_to(lake.path("t")).as_posix()]
    assert on_disk(lake) == listed(lake)
