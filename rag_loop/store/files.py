"""Files a stage writes beside the database: written whole or not at all."""

from __future__ import annotations

import hashlib
import os
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq


def write_atomically(path: Path, text: str, mode: int | None = None, durable: bool = False) -> Path:
    """Write `text` to a temporary file beside `path`, then rename it over `path`: a reader sees
    the old file or the new one, never half of one. `mode` sets the permissions (a temporary
    file is 0600); `durable` fsyncs the file and the folder, so the rename survives a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if durable:
        fsync_directory(path.parent)
    return path


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable."""
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def directory_fingerprint(directory: Path, list_files: Callable[[Path], Sequence[Path]]) -> str:
    """Changes whenever a listed file is added, grows or is touched (a sensor's cursor); a file
    removed while the folder is listed is left out, not an error."""
    files = list_files(directory) if directory.is_dir() else []
    listing = "\n".join(f"{p.relative_to(directory)}:{s.st_size}:{s.st_mtime_ns}"
                        for p in files if (s := _stat(p)) is not None)
    return hashlib.sha256(listing.encode()).hexdigest()


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def write_parquet_atomically(table: pa.Table, path: Path) -> None:
    """A Parquet file that readers see whole or not at all (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, temporary)
    temporary.replace(path)


def write_parquet(con: duckdb.DuckDBPyConnection, query: str, target: Path, parameters: list | None = None) -> None:
    """`query`'s rows as the Parquet file `target` (a run's staging file), which readers see
    whole or not at all: DuckDB writes it hidden beside `target`, then it is renamed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{uuid.uuid4().hex}.tmp")
    try:
        con.execute(f"COPY ({query}) TO {quoted(staged)} (FORMAT parquet)", parameters or [])
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


def quoted(path: Path | str) -> str:
    """A path or URI as a SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"
