"""A working folder in memory for the end-to-end tests' Dagster instances and databases (and the
session's tmp_path folders, tests/conftest.py).

Dagster's SQLite run and event storage commits every event (hundreds a run, with the daemon's
heartbeats) and syncs it to disk, as DuckDB does its checkpoints: about 10 ms each on the shared
disk, 0.3 ms in /dev/shm (a test of own traces: 20 s of its 130 s under load). What the tests
prove does not depend on where the files are. The logs are kept in the test's tmp_path.
"""

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MEMORY = Path("/dev/shm")
MINIMUM_FREE = 1 << 30  # a run's databases and Dagster storage: tens of MB, with room to spare


def has_room(minimum: int = MINIMUM_FREE) -> bool:
    """Whether /dev/shm exists with `minimum` bytes free (a container's default is 64 MB)."""
    return MEMORY.is_dir() and shutil.disk_usage(MEMORY).free >= minimum


@contextmanager
def in_memory(keep: Path) -> Iterator[Path]:
    """A fresh folder in /dev/shm (`keep` itself where there is none, or where it is small, as a
    container's default 64 MB is), removed on exit after its `*.log` files are copied into `keep`."""
    if not has_room():
        yield keep
        return
    folder = Path(tempfile.mkdtemp(prefix="rag-loop-e2e-", dir=MEMORY))
    try:
        yield folder
    finally:
        for log in folder.rglob("*.log"):
            target = keep / log.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, target)
        shutil.rmtree(folder, ignore_errors=True)
