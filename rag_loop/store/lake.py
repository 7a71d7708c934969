"""The trace lake: trace-sized tables as Delta Lake tables (delta-rs), partitioned by UTC day
(`<lake>/<table>/day=YYYY-MM-DD/*.parquet` under the table's `_delta_log`), plus the small
tables the stages join (`documents`, unpartitioned).

Every write is one Delta commit: readers see the table's previous version or the new one,
never part of a write, and a write killed half way leaves files no version lists (`vacuum`
removes them). Rows of whole days are replaced by predicate (`write`), files Spark's executors
wrote are committed by the driver (`commit_files`), columns added later come with the format's
schema evolution (older files read NULL there), and readers take a version's file list, never a
folder glob. The lake is a local folder or an object store URI (`s3://bucket/prefix`, with
delta-rs's `storage_options`).
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as fs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Field, Schema, write_deltalake
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

from rag_loop.store.files import quoted
from rag_loop.store.tables import relation_kind, transaction

DAY = "day"
# the connection's variable holding the root and storage options of the lake it was attached to
# (`attach`): in the connection's memory only, never in the database file
OPTIONS_VARIABLE = "rag_loop_lake_options"
ROW_GROUP_ROWS = 1 << 20  # rows of a row group `write_file` writes (pyarrow's default)
# what a connection attached to an object-store lake keeps of its reads (`_immutable_files`)
OPEN_FILES = 1024  # streams
CACHED_READS = 64 << 20  # bytes of ranges read
CACHED_READ = 4 << 20  # the largest range kept


@dataclass(frozen=True)
class LakeFile:
    """A data file written in a table's folder and not committed yet (no version lists it):
    its path there (`day=YYYY-MM-DD/<name>`), its size and its rows."""

    relative: str
    size: int
    rows: int


@dataclass(frozen=True)
class Lake:
    """Where the lake's tables live: a local folder or an object store URI, and delta-rs's
    storage options for it (credentials, endpoint, region)."""

    root: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, lake: Lake | Path | str) -> Lake:
        """`lake` as a Lake (a local path made absolute)."""
        if isinstance(lake, Lake):
            return lake
        text = str(lake)
        return cls(text if "://" in text else str(Path(text).absolute()))

    @property
    def local(self) -> bool:
        return "://" not in self.root

    def uri(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{table}"

    def path(self, table: str = "") -> Path:
        """A local lake's folder (of `table`): where Spark's executors write."""
        if not self.local:
            raise ValueError(f"the lake {self.root} is not a local folder")
        return Path(self.root) / table

    def options(self) -> dict[str, str] | None:
        return dict(self.storage_options) or None

    def delta(self, table: str) -> DeltaTable | None:
        """The table's current version, None while it does not exist."""
        try:
            return DeltaTable(self.uri(table), storage_options=self.options())
        except TableNotFoundError:
            return None

    def filesystem(self) -> tuple[fs.FileSystem, str]:
        """An Arrow filesystem of the lake and its root's path there: for what delta-rs does not
        list (the lake's tables, the files a table's folder holds). On S3, from the storage
        options (endpoint, keys, region), else the AWS environment."""
        if self.local:
            return fs.LocalFileSystem(), self.root
        if self.root.startswith(("s3://", "s3a://")):
            options = {**{k: v for k, v in os.environ.items() if k.startswith("AWS_")},
                       **{k.upper(): v for k, v in self.storage_options.items()}}
            endpoint = options.get("AWS_ENDPOINT_URL") or options.get("AWS_ENDPOINT")
            scheme, _, host = endpoint.partition("://") if endpoint else ("https", "", None)
            return (fs.S3FileSystem(access_key=options.get("AWS_ACCESS_KEY_ID"),
                                    secret_key=options.get("AWS_SECRET_ACCESS_KEY"),
                                    session_token=options.get("AWS_SESSION_TOKEN"),
                                    region=options.get("AWS_REGION") or options.get("AWS_DEFAULT_REGION"),
                                    endpoint_override=host, scheme=scheme,
                                    allow_delayed_open=True),  # a small file: one PUT, not three requests
                    self.root.split("://", 1)[1].rstrip("/"))
        return fs.FileSystem.from_uri(self.root)

    def attach(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """`con` able to read the lake's files: an object store's through its Arrow filesystem
        (DuckDB's own httpfs cannot be installed offline); a local lake needs nothing. Every
        connection that reads a lake-backed deployment's views is attached once; the connection
        keeps the lake's storage options in memory (rag_loop.store.deployment.recorded_lake)."""
        con.execute(f"SET VARIABLE {OPTIONS_VARIABLE} = MAP(?::VARCHAR[], ?::VARCHAR[])",
                    [["root", *self.storage_options], [self.root, *self.storage_options.values()]])
        if not self.local:
            scheme = self.root.split("://", 1)[0]
            if scheme not in {f.split("://")[0] for f in con.list_filesystems()}:
                con.register_filesystem(_immutable_files(scheme, self.filesystem()[0]))
        return con

    def tables(self) -> list[str]:
        """The lake's Delta tables: its subfolders holding a `_delta_log` (a folder of other
        files, `.staging`, is none), by name."""
        system, base = self.filesystem()
        folders = [i.path for i in system.get_file_info(fs.FileSelector(base, allow_not_found=True))
                   if i.type == fs.FileType.Directory]
        return sorted(path.rsplit("/", 1)[-1] for path in folders
                      if system.get_file_info(f"{path}/_delta_log").type == fs.FileType.Directory)

    def stored_files(self, table: str) -> dict[str, int]:
        """The data files the table's folder holds (its log aside), listed or not, relative, with
        their sizes: what vacuum may delete beside what the version lists."""
        system, base = self.filesystem()
        folder = f"{base}/{table}"
        infos = system.get_file_info(fs.FileSelector(folder, recursive=True, allow_not_found=True))
        relative = {i.path.removeprefix(folder + "/"): i.size for i in infos if i.type == fs.FileType.File}
        return {path: size for path, size in relative.items() if not path.startswith("_delta_log/")}

    def days(self, table: str, delta: DeltaTable | None = None) -> list[date]:
        """The days the table's current version (or its version `delta`) has rows of, in order."""
        return sorted({d for d in _added(delta or self.delta(table)).get(f"partition.{DAY}", []) if d is not None})

    def files(self, table: str, days: Iterable[date] | None = None, delta: DeltaTable | None = None) -> list[str]:
        """The files of the table's current version, or of its version `delta` (of `days` only),
        as URIs (local: paths)."""
        delta = delta or self.delta(table)
        if delta is None:
            return []
        wanted = None if days is None else sorted(d.isoformat() for d in days)
        if wanted == []:
            return []
        uris = delta.file_uris(None if wanted is None else [(DAY, "in", wanted)])
        return sorted(unquote(uri) if self.local else uri for uri in uris)  # delta-rs escapes a local path

    def day_fingerprints(self, table: str) -> dict[date, str]:
        """Per day, the names and sizes of its files in the current version: a write that changes
        a day's rows adds a file of a new name, so the fingerprint changes with them; read from
        the log, no data file opened."""
        added = _added(self.delta(table))
        per_day: dict[date, list[str]] = {}
        for path, size, day in zip(added.get("path", []), added.get("size_bytes", []),
                                   added.get(f"partition.{DAY}", []), strict=True):
            per_day.setdefault(day, []).append(f"{path}:{size}")
        return {day: " ".join(sorted(files)) for day, files in per_day.items() if day is not None}

    def schema(self, table: str) -> pa.Schema | None:
        delta = self.delta(table)
        return None if delta is None else pa.schema(delta.schema().to_arrow())

    def dataset(self, table: str) -> ds.Dataset:
        """The table's current version as an Arrow dataset (what DuckDB scans)."""
        delta = self.delta(table)
        if delta is None:
            raise FileNotFoundError(f"no table {table} in the lake {self.root}")
        return delta.to_pyarrow_dataset()

    def write(self, table: str, data: Any, days: Collection[date] | None = None,
              partitioned: bool = True) -> None:
        """`data` (Arrow: a table or a stream of batches) as the table's rows of `days` (every
        row must be of one of them), or as its whole content (`days` None), in one commit;
        columns `data` adds join the table's schema. The table is made on its first write."""
        if days is not None and not days:
            return
        predicate = None if days is None else \
            f"{DAY} IN ({', '.join(repr(d.isoformat()) for d in sorted(days))})"
        delta = self.delta(table) if predicate else None  # the write goes through it: its log not read again
        write_deltalake(self.uri(table) if delta is None else delta, data, mode="overwrite",
                        predicate=predicate if delta is not None else None,  # nothing to replace yet
                        partition_by=[DAY] if partitioned else None, schema_mode="merge",
                        storage_options=self.options())

    def write_file(self, table: str, rows: pa.Table | pa.RecordBatchReader, day: date,
                   name: str | None = None) -> LakeFile:
        """`rows` (without `day`; a stream is written batch by batch) as a new Parquet file of the
        table's `day` folder (named `name`, default a fresh one), through the lake's Arrow
        filesystem (an object store's too), for `commit_files`: no reader sees it until then."""
        system, base = self.filesystem()
        relative = f"{DAY}={day.isoformat()}/{name or new_file_name()}"
        if self.local:  # an object store has no folders to make (a request each)
            system.create_dir(f"{base}/{table}/{DAY}={day.isoformat()}", recursive=True)
        schema, count, pending = delta_types(rows.schema), 0, []
        with system.open_output_stream(f"{base}/{table}/{relative}") as sink:
            with pq.ParquetWriter(sink, schema) as writer:
                for batch in chain(rows.to_batches() if isinstance(rows, pa.Table) else rows, [None]):
                    if batch is not None:
                        pending.append(batch.cast(schema))
                        count += batch.num_rows
                    if pending and (batch is None or sum(b.num_rows for b in pending) >= ROW_GROUP_ROWS):
                        writer.write_table(pa.Table.from_batches(pending, schema))  # one row group: small
                        pending = []  # batches compress badly as row groups of their own
            size = sink.tell()  # the file's bytes, without asking the store
        return LakeFile(relative, size, count)

    def discard(self, table: str, files: Iterable[LakeFile]) -> None:
        """Files `write_file` wrote that will not be committed, deleted (no version lists them)."""
        system, base = self.filesystem()
        for file in files:
            try:
                system.delete_file(f"{base}/{table}/{file.relative}")
            except FileNotFoundError:
                pass

    def commit_files(self, table: str, added: Sequence[Path | LakeFile], removed: Sequence[str],
                     schema: pa.Schema, delta: DeltaTable | None = None) -> DeltaTable | None:
        """Parquet files written in the table's folder, under `day=` folders (`write_file`'s, or
        a local table's paths), added to it and the files `removed` (their paths as the table
        lists them) taken out of it, in one commit; `schema` (with `day`) is the table's after
        it, so a column the files add joins it first (older files read NULL there). `delta`: the
        table as loaded before (its log not read again); returns it brought to the version after
        the commit, or None (a table made)."""
        actions: list[AddAction | RemoveAction] = [
            _add_action(_written(self.path(table), file) if isinstance(file, Path) else file) for file in added]
        now = int(time.time() * 1000)
        delta = delta or self.delta(table)
        listed = _added(delta) if removed else {}  # the removed files' sizes; every file's add action: only then
        sizes = dict(zip(listed.get("path", []), listed.get("size_bytes", []), strict=True))
        actions += [RemoveAction(path, True, now, sizes.get(path), {DAY: _day_of(path)}) for path in removed]
        if delta is None:
            self._create(table, schema, [a for a in actions if isinstance(a, AddAction)])
            return None
        _evolve(delta, schema)
        if actions:
            delta.create_write_transaction(actions, mode="append", schema=delta.schema(), partition_by=[DAY])
            delta.update_incremental()  # the commits since it was loaded: ours, and any other's
        return delta

    def commit_days(self, table: str, added: Sequence[Path], days: Collection[date] | None,
                    schema: pa.Schema) -> None:
        """Parquet files written in a local table's `day=` folders committed in place of its rows
        of `days` (None: all its rows), in one commit (a partition overwrite), which also adds
        the columns of `schema` (with `day`) the table lacks (older files read NULL there)."""
        actions = [_add_action(_written(self.path(table), file)) for file in added]
        delta = self.delta(table)
        if delta is None:
            self._create(table, schema, actions)
        elif days is None or days:
            present = pa.schema(delta.schema().to_arrow())
            wider = pa.schema([*present, *(f.with_nullable(True) for f in delta_types(schema)
                                           if f.name not in present.names)])
            delta.create_write_transaction(actions, mode="overwrite", schema=wider, partition_by=[DAY],
                                           partition_filters=None if days is None else
                                           [(DAY, "in", sorted(d.isoformat() for d in days))])

    def _create(self, table: str, schema: pa.Schema, added: list[AddAction]) -> None:
        """The table made, partitioned by day, with `schema` and the files `added` as version 0."""
        create_table_with_add_actions(self.uri(table), Schema.from_arrow(_day_last(schema)), added,
                                      mode="error", partition_by=[DAY], storage_options=self.options())

    def optimize(self, table: str, target_size: int | None = None, delta: DeltaTable | None = None) -> dict[str, Any]:
        """Small files of each day compacted into fewer (one commit); returns delta-rs's metrics.
        `delta`: the table as loaded before, brought to the version after."""
        delta = delta or self.delta(table)
        return {} if delta is None else delta.optimize.compact(target_size=target_size)

    def vacuum(self, table: str, retention_hours: int = 168, delta: DeltaTable | None = None) -> list[str]:
        """Files no version within `retention_hours` lists deleted (a killed write's too);
        returns them. Readers of a version older than that lose its files. `delta`: the table
        as loaded before."""
        delta = delta or self.delta(table)
        if delta is None:
            return []
        # full: files no version ever listed (a killed write's) too, by their age; without it
        # delta-rs removes only the files a version removed
        removed = delta.vacuum(retention_hours=retention_hours, dry_run=False,
                               enforce_retention_duration=False, full=True)
        return removed + (self._remove_partial_uploads(table, retention_hours) if self.local else [])

    def _remove_partial_uploads(self, table: str, retention_hours: int) -> list[str]:
        """A local write killed mid-file leaves the file's upload as `<name>#<n>` (object_store
        writes there, then renames), which full vacuum does not consider: removed by age too."""
        folder, cutoff = self.path(table), time.time() - retention_hours * 3600
        partial = [p for p in folder.glob("**/*.parquet#*")
                   if "_delta_log" not in p.parts and p.name.rpartition("#")[2].isdigit()
                   and p.stat().st_mtime <= cutoff]
        for path in partial:
            path.unlink(missing_ok=True)
        return [p.relative_to(folder).as_posix() for p in partial]

    def staging(self) -> Path:
        """A fresh folder for one run's intermediate files (a local lake's `.staging`)."""
        return self.path(f".staging/{uuid.uuid4().hex}")


def _immutable_files(scheme: str, system: fs.FileSystem) -> Any:
    """An fsspec filesystem of `system` for DuckDB that asks an object store as little as a
    lake's files allow, since one is never rewritten under its name: a file's size and time once
    (DuckDB asks 3-4 times per file it reads), its stream opened once and only when read (DuckDB
    also opens a file just to ask its size; each open asks the store again: a HEAD), and a range
    read before not asked again (DuckDB reads every file's footer in each statement that binds a
    view of them: each query and DESCRIBE) while `CACHED_READS` bytes of them are kept. One per
    store (an equal `system`) in the process: every connection attached to it shares what it knows."""
    for known_system, files in _FILESYSTEMS:
        if files.protocol == scheme and known_system.equals(system):
            return files
    files = _new_immutable_files(scheme, system)
    _FILESYSTEMS.append((system, files))
    del _FILESYSTEMS[:-8]  # the most recent stores
    return files


_FILESYSTEMS: list[tuple[fs.FileSystem, Any]] = []  # `_immutable_files`'s, the most recent last


def _new_immutable_files(scheme: str, system: fs.FileSystem) -> Any:
    from fsspec.implementations.arrow import ArrowFSWrapper

    known: dict[str, dict[str, Any]] = {}
    reads = _ObjectReads(system)

    class Files(ArrowFSWrapper):
        protocol = scheme

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            path = self._strip_protocol(path)
            entry = known.get(path) or super().info(path, **kwargs)
            if entry["type"] == "file":
                known[path] = entry
            return entry

        def modified(self, path: str) -> Any:
            return self.info(path)["mtime"]

        def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
            if mode != "rb":
                return super()._open(path, mode, *args, **kwargs)
            path = self._strip_protocol(path)
            return _ReadAt(reads, path, self.info(path)["size"])

    return Files(system)


class _ObjectReads:
    """A process's reads of immutable object-store files: their streams (the most recently used
    `OPEN_FILES`; a stream is a size and a path, no socket) and their recent ranges' bytes."""

    def __init__(self, system: fs.FileSystem) -> None:
        self.system = system
        self.streams: OrderedDict[str, pa.NativeFile] = OrderedDict()
        self.ranges: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self.cached = 0  # bytes in `ranges`
        self.lock = threading.Lock()  # DuckDB reads from several threads

    def read(self, path: str, position: int, size: int) -> bytes:
        key = (path, position, size)
        with self.lock:
            if (data := self.ranges.get(key)) is not None:
                self.ranges.move_to_end(key)
                return data
            stream = self.streams.pop(path, None)
        if stream is None:
            stream = self.system.open_input_file(path)
        data = stream.read_at(size, position)
        with self.lock:
            self.streams[path] = stream
            while len(self.streams) > OPEN_FILES:
                self.streams.popitem(last=False)
            if len(data) <= CACHED_READ and key not in self.ranges:
                self.ranges[key] = data
                self.cached += len(data)
                while self.cached > CACHED_READS:
                    self.cached -= len(self.ranges.popitem(last=False)[1])
        return data


class _ReadAt(io.RawIOBase):
    """A file DuckDB reads through fsspec, read by position through `_ObjectReads`."""

    def __init__(self, reads: _ObjectReads, path: str, size: int) -> None:
        super().__init__()
        self._reads, self._path, self._size, self._position = reads, path, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._position = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence] + offset
        return self._position

    def tell(self) -> int:
        return self._position

    def read(self, size: int = -1) -> bytes:
        size = max(0, self._size - self._position if size < 0 else min(size, self._size - self._position))
        data = self._reads.read(self._path, self._position, size) if size else b""
        self._position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def new_file_name() -> str:
    return f"part-{uuid.uuid4().hex}.parquet"


def _added(delta: DeltaTable | None) -> dict[str, list]:
    """The current version's add actions, column by column."""
    return {} if delta is None else pa.table(delta.get_add_actions(flatten=True)).to_pydict()


def _written(folder: Path, path: Path) -> LakeFile:
    """A Parquet file written in a local table's `folder` (by Spark's executors) as a LakeFile."""
    return LakeFile(path.relative_to(folder).as_posix(), path.stat().st_size, pq.ParquetFile(path).metadata.num_rows)


def _add_action(file: LakeFile) -> AddAction:
    return AddAction(file.relative, file.size, {DAY: _day_of(file.relative)}, int(time.time() * 1000),
                     True, json.dumps({"numRecords": file.rows}))


def _day_of(relative: str) -> str | None:
    folder = relative.split("/")[0]
    return folder.removeprefix(f"{DAY}=") if folder.startswith(f"{DAY}=") else None


def _day_last(schema: pa.Schema) -> pa.Schema:
    """The schema with `day` (a date) last, as Delta keeps a partition column."""
    fields = [f for f in delta_types(schema) if f.name != DAY]
    return pa.schema([*fields, pa.field(DAY, pa.date32())])


def delta_types(schema: pa.Schema) -> pa.Schema:
    """The schema with DuckDB's time zone name of a TIMESTAMPTZ (`Etc/UTC`) as Delta takes it
    (`UTC`): delta-rs refuses a schema with the former."""
    def fixed(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            return pa.timestamp(kind.unit, "UTC")
        if pa.types.is_list(kind):
            return pa.list_(kind.value_field.with_type(fixed(kind.value_type)))
        if pa.types.is_struct(kind):
            return pa.struct([f.with_type(fixed(f.type)) for f in kind])
        return kind
    return pa.schema([f.with_type(fixed(f.type)) for f in schema], metadata=schema.metadata)


def _evolve(delta: DeltaTable, schema: pa.Schema) -> None:
    """Columns of `schema` the table lacks added to it (nullable), in one commit."""
    present = {f.name for f in pa.schema(delta.schema().to_arrow())}
    missing = [f for f in delta_types(schema) if f.name not in present]
    if missing:
        delta.alter.add_columns([Field.from_arrow(f.with_nullable(True)) for f in missing])


def files_query(files: Sequence[str], schema: pa.Schema, columns: Sequence[str] | None = None) -> str:
    """DuckDB SQL reading these files of a day-partitioned lake table (`day` from the folder
    names) with `columns` (default the schema's) of the schema's types, NULL where a file lacks
    one (a column added later); no file: the columns and no rows. Opens no file: a view over a
    long history costs what one over a day does to make."""
    types = _duckdb_types(schema)
    typed = ", ".join(f'NULL::{types[c]} AS "{c}"' for c in columns or schema.names)
    if not files:
        return f"SELECT {typed} LIMIT 0"
    listed = ", ".join(f'"{c}"' for c in columns or schema.names)
    return f"SELECT {listed} FROM (SELECT {typed} WHERE false UNION ALL BY NAME SELECT * FROM {read_files(files)})"


def read_files(files: Iterable[str], filename: bool = False) -> str:
    """DuckDB's reader of these files of a day-partitioned lake table: `day` from their folders,
    NULL where a file lacks a column the others have, and each row's file with `filename`."""
    return (f"read_parquet([{', '.join(quoted(f) for f in files)}], hive_partitioning = true, "
            f"hive_types = {{'{DAY}': DATE}}, union_by_name = true{', filename = true' * filename})")


@cache
def _duckdb_types(schema: pa.Schema) -> dict[str, str]:
    """The DuckDB type of each column of an Arrow schema, as DESCRIBE writes it (once per
    schema: a table's view is made again after each write)."""
    with _TYPES_LOCK:
        relation = _scratch().from_arrow(schema.empty_table())
        return dict(zip(relation.columns, map(str, relation.types), strict=True))


_TYPES_LOCK = threading.Lock()  # a connection is not for two threads at once


@cache
def _scratch() -> duckdb.DuckDBPyConnection:
    """An empty in-memory database for `_duckdb_types`, one a process (a new one costs ~14 ms)."""
    return duckdb.connect()


def create_lake_views(con: duckdb.DuckDBPyConnection, lake: Lake, columns: Mapping[str, Sequence[str]],
                      catalog: str | None = None, deltas: Mapping[str, DeltaTable] | None = None) -> None:
    """(Re)create the view of each lake table (name: its columns, in that order) over its
    current version's files (or those of its version in `deltas`, loaded by the caller), in the
    database's schema or in `catalog`'s (a name a temp table of the connection shadows); inside
    the caller's transaction. A writer of the table makes its view again after each commit: the
    view lists that version's files."""
    for name, listed in columns.items():
        view = f'"{catalog}".main."{name}"' if catalog else f'"{name}"'
        delta = (deltas or {}).get(name) or lake.delta(name)  # the schema and the files of one version
        if delta is None:
            raise FileNotFoundError(f"no table {name} in the lake {lake.root}")
        query = files_query(lake.files(name, delta=delta), pa.schema(delta.schema().to_arrow()), listed)
        con.execute(f"CREATE OR REPLACE VIEW {view} AS {query}")


def expose_lake_tables(con: duckdb.DuckDBPyConnection, lake: Lake, columns: Mapping[str, Sequence[str]]) -> None:
    """The database's table of each name (if any) replaced by the view of the lake's table of
    that name (name: its columns), all in one transaction."""
    with transaction(con):
        for name in columns:
            if relation_kind(con, name) == "table":
                con.execute(f'DROP TABLE "{name}"')
        create_lake_views(con, lake, columns)
