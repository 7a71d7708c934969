"""raw_traces, its child tables, otlp_spans and otlp_traces in a lake-backed deployment's Delta
lake during an ingestion run (rag_loop.ingest.lake), so that a day's traces, chunks, trace
states and OTLP spans never pass into the control database. They are partitioned by day
(rag_loop.store.lake); the database has views of their current versions' files under the
tables' names. A span's day is its start's (`span_day`), not its trace's: the trace is not known
until it is assembled; a trace state's is the day it was assembled on.

During a run those names are temp tables of the connection (`LakeTraces.shadowing`), which
shadow the views: ingestion reads and writes them by name, as the embedded path does its
tables. OTLP assembly reads and removes stored rows by SQL: the lake's spans and states of the
pending traces (`load_pending`), and its rows of the traces ready for assembly (`load`), are
loaded into the temp tables first, read by DuckDB from the files of the days concerned only
(a ready trace's raw_traces row is on the day of its earliest span, one of its spans' days), so
that every verdict sees every stored copy it needs; the run's own new spans, which its first
flush keeps loaded, are not read back.

Before the run's transaction commits, `flush` writes what changed: a trace id some of whose
stored rows changed or went (an OTLP trace assembled again) is removed from the files that held
it (each such file is replaced by a new one without its rows), and the new rows (and a trace's
rows added beside its unchanged ones: a late span) are added as one new file per day, written
through the lake's Arrow filesystem (local or an object store), under new names no version
lists, then committed by one Delta commit per table that adds them and removes the files they
replace; the views are made again over the new versions' files. A failure before a table's
commit leaves it at its previous version (the files written for it are deleted; any left
behind are listed by no version, and `vacuum` removes them); a failure between the tables'
commits or after them, before the control database's commit, leaves rows in the lake whose
files are not marked ingested, which the next run reads again and drops as read before (the
first-copy-wins rule for a record read again from the same line).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
from deltalake import DeltaTable

from rag_loop.store.ddl import ADDED_COLUMNS, CHILD_TABLES, KEPT_IN_LAKE, span_day
from rag_loop.store.deployment import ROW_DAY
from rag_loop.store.files import quoted
from rag_loop.store.lake import (
    DAY,
    Lake,
    LakeFile,
    create_lake_views,
    delta_types,
    new_file_name,
    read_files,
)

# the temp tables of the trace ids whose rows are loaded (a child table's: `_lake_loaded WHERE children`);
# `_lake_loaded_pending`: the pending ids whose states were looked up (load_pending)
LOADED_BY_TABLE = {"raw_traces": "_lake_loaded", "otlp_spans": "_lake_loaded_spans",
                   "otlp_traces": "_lake_loaded_pending"}
LOADED = ("_lake_loaded", "_lake_loaded_pending", "_lake_loaded_spans")
PENDING_BEFORE = "_lake_pending_before"  # the trace ids pending when the run began
# tables whose rows a run only adds (none is changed or removed; first copy wins keeps the key
# unique): what changed is the rows of a key not loaded, found without comparing whole rows
APPEND_ONLY = {"otlp_spans": "trace_id, span_id"}


def relative_file(path: str | Path) -> str:
    """A file of a day-partitioned lake table (a path or URI, as `Lake.files` lists it) as the
    table lists it: `day=YYYY-MM-DD/<name>`."""
    return "/".join(str(path).rstrip("/").split("/")[-2:])


@dataclass
class LakeTraces:
    """The kept tables of an ingestion run into the lake (see the module): `load` the lake's
    rows of some trace ids (`load_pending`: the pending traces' spans and states) into the
    connection's shadowing temp tables, `flush` what the run changed."""

    lake: Lake
    # the files whose rows flush(keep_spans=True) kept loaded, as the table lists them
    kept_files: dict[str, set[str]] = field(default_factory=dict, init=False)
    schemas: dict[str, pa.Schema] = field(default_factory=dict, init=False)  # the run's columns, with day
    # each kept table as loaded once in the run (`delta`), brought forward by the run's commits
    deltas: dict[str, DeltaTable | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.lake = Lake.of(self.lake)

    def delta(self, table: str) -> DeltaTable | None:
        """The table's version the run reads: loaded on first use (each load reads the log), then
        the version after each of the run's commits. Another writer's commit in between (a
        compaction) leaves files the run reads listed by the version before it: same rows."""
        if self.deltas.get(table) is None:
            self.deltas[table] = self.lake.delta(table)
        return self.deltas[table]

    @contextmanager
    def shadowing(self, con: duckdb.DuckDBPyConnection) -> Iterator[LakeTraces]:
        """The kept tables' names as empty temp tables for the block (the database's views stay
        as they are). Each kept table of the lake has every column the run writes (a lake from
        before a column gets it: its older files read NULL there); a view's columns are all its
        table's (create_lake_views takes their types from its schema), so only a table whose
        view lacks one is loaded here."""
        catalog = _kept_columns(con)
        for table in KEPT_IN_LAKE:
            viewed = catalog[table]
            columns = ", ".join(f'"{name}" {kind}' for name, kind in viewed)
            con.execute(f'CREATE OR REPLACE TEMP TABLE "{table}" ({columns})')
            con.execute(f'CREATE OR REPLACE TEMP TABLE "{_before(table)}" ({columns}, _day DATE, _file VARCHAR)')
            for column in ADDED_COLUMNS.get(table, ()):  # a lake from before a column: its files lack it
                if column.split()[0] in (name for name, _ in viewed):
                    continue
                for name in (table, _before(table)):
                    con.execute(f'ALTER TABLE temp.main."{name}" ADD COLUMN IF NOT EXISTS {column}')
            schema = delta_types(con.sql(f'SELECT * FROM temp.main."{table}" LIMIT 0').to_arrow_table().schema)
            self.schemas[table] = schema if DAY in schema.names else schema.append(pa.field(DAY, pa.date32()))
            if set(schema.names) - {name for name, _ in viewed}:  # no commit if the table has them all
                self.deltas[table] = self.lake.commit_files(table, [], [], self.schemas[table], self.delta(table))
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_loaded (trace_id VARCHAR, children BOOLEAN)")
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_loaded_pending (trace_id VARCHAR)")
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_loaded_spans (trace_id VARCHAR)")
        con.execute(f"CREATE OR REPLACE TEMP TABLE {PENDING_BEFORE} AS SELECT DISTINCT trace_id FROM otlp_pending")
        try:
            yield self
        finally:
            for table in (*KEPT_IN_LAKE, *_before_tables(), *LOADED, PENDING_BEFORE):
                con.execute(f'DROP TABLE IF EXISTS temp.main."{table}"')

    def stored(self, table: str, columns: str, days: Iterable[date]) -> str:
        """DuckDB SQL of `columns` of the lake's `table` rows on `days` (its current version's
        files of those days): the stored copies first copy wins reads."""
        days = list(days)
        files = self.lake.files(table, days, self.delta(table)) if days else []  # no day: the log not read
        if not files:
            return f"SELECT {columns} FROM temp.main.\"{table}\" WHERE false"
        return f"SELECT {columns} FROM {read_files(files, filename=True)}"

    def load(self, con: duckdb.DuckDBPyConnection, trace_ids: str, children_of: str | None = None) -> None:
        """The lake's raw_traces rows of the trace ids `trace_ids` (SQL) selects, and the child
        tables' rows of those of them `children_of` selects (the only ones whose children the
        run may change: a trace assembled again; it must be a subset), into the temp tables;
        each loaded once until the next flush; inside the caller's transaction. The ids are
        ready OTLP traces: a stored row of one is on one of its spans' days (all loaded by
        `load_pending`), the days read."""
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_ids AS
                        SELECT DISTINCT trace_id FROM ({trace_ids}) WHERE trace_id IS NOT NULL
                        EXCEPT SELECT trace_id FROM _lake_loaded""")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_children AS
                        SELECT DISTINCT trace_id FROM ({children_of or "SELECT NULL AS trace_id"})
                        WHERE trace_id IS NOT NULL EXCEPT SELECT trace_id FROM _lake_loaded WHERE children""")
        try:
            con.execute("INSERT INTO _lake_loaded SELECT trace_id, false FROM _lake_ids")
            days = [d for (d,) in con.execute(f"SELECT DISTINCT {span_day()} FROM otlp_spans "
                                              "SEMI JOIN _lake_ids USING (trace_id)").fetchall()]
            self._load_rows(con, "raw_traces", "_lake_ids", days)
            con.execute("UPDATE _lake_loaded SET children = true "
                        "WHERE trace_id IN (SELECT trace_id FROM _lake_children)")
            days = [d for (d,) in con.execute(f'SELECT DISTINCT _day FROM "{_before("raw_traces")}" '
                                              "SEMI JOIN _lake_children USING (trace_id)").fetchall()]
            for table in CHILD_TABLES:  # a child row is in its trace's day
                self._load_rows(con, table, "_lake_children", days)
        finally:
            con.execute("DROP TABLE _lake_ids; DROP TABLE _lake_children")

    def load_pending(self, con: duckdb.DuckDBPyConnection) -> None:
        """The lake's otlp_traces and otlp_spans rows of the pending trace ids (otlp_pending)
        into the temp tables and their copies as loaded, each trace's once until the next
        flush; inside the caller's transaction. A trace's otlp_traces row (one, on the day it
        was assembled) is looked for in every day. Its spans are read from the days otlp_pending
        lists for it (where its spans since its last assembly are), and, for a trace assembled
        before of whose spans fewer are found there than that assembly had (its spans were on
        other days), from every other day too: the days read, not the whole history, unless a
        trace needs it. A trace first seen in this run (not pending when it began, never
        assembled) whose spans the run's first flush kept loaded (`flush(keep_spans=True)`)
        has no other span: none is read."""
        con.execute("""CREATE OR REPLACE TEMP TABLE _lake_wanted AS
                       SELECT trace_id, day FROM otlp_pending ANTI JOIN _lake_loaded_pending USING (trace_id)""")
        try:
            if not con.execute("SELECT count(*) FROM _lake_wanted").fetchall()[0][0]:
                return  # the log not read
            if not (days := self.lake.days("otlp_spans", self.delta("otlp_spans"))):
                return
            con.execute("CREATE OR REPLACE TEMP TABLE _lake_ids AS SELECT DISTINCT trace_id FROM _lake_wanted")
            self._load_rows(con, "otlp_traces", "_lake_ids", None)
            con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_unloaded AS SELECT * FROM _lake_wanted
                            WHERE trace_id IN (SELECT trace_id FROM {PENDING_BEFORE})
                               OR trace_id IN (SELECT trace_id FROM "{_before('otlp_traces')}")
                               OR trace_id NOT IN (SELECT trace_id FROM _lake_loaded_spans)""")
            listed = {d for (d,) in con.execute("SELECT DISTINCT day FROM _lake_unloaded").fetchall()}
            if listed:
                con.execute("CREATE OR REPLACE TEMP TABLE _lake_ids AS SELECT DISTINCT trace_id FROM _lake_unloaded")
                first = days if None in listed else sorted(listed & set(days))  # NULL: from before days were kept
                self._load_rows(con, "otlp_spans", "_lake_ids", first)
                if rest := sorted(set(days) - set(first)):
                    self._load_short(con, rest)
                con.execute("""INSERT INTO _lake_loaded_spans SELECT DISTINCT trace_id FROM _lake_unloaded
                               EXCEPT SELECT trace_id FROM _lake_loaded_spans""")
            con.execute("INSERT INTO _lake_loaded_pending SELECT DISTINCT trace_id FROM _lake_wanted")
        finally:
            con.execute("DROP TABLE IF EXISTS _lake_wanted; DROP TABLE IF EXISTS _lake_unloaded; "
                        "DROP TABLE IF EXISTS _lake_ids")

    def _load_short(self, con: duckdb.DuckDBPyConnection, rest: list[date]) -> None:
        """The spans on `rest` of the wanted traces assembled before of whose spans fewer are
        loaded than that assembly had."""
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_ids AS
            SELECT trace_id FROM otlp_traces SEMI JOIN _lake_unloaded USING (trace_id)
            WHERE spans > (SELECT count(*) FROM "{_before('otlp_spans')}" b
                           WHERE b.trace_id = otlp_traces.trace_id)""")
        self._load_rows(con, "otlp_spans", "_lake_ids", rest)

    def _load_rows(self, con: duckdb.DuckDBPyConnection, table: str, ids: str, days: list[date] | None) -> None:
        """The lake's rows of `table` on `days` (None: every day) whose trace id is in the temp
        table `ids`, read by DuckDB from its current version's files, into the temp table and
        its copy as loaded (with each row's day and file, as the table lists it); not those of
        the files whose rows the temp tables kept (`flush(keep_spans=True)`)."""
        if days == []:  # the log not read
            return
        kept = self.kept_files.get(table, set())
        files = [path for path in self.lake.files(table, days, self.delta(table)) if relative_file(path) not in kept]
        if not files:
            return
        derived = f", {DAY}" if table in ROW_DAY else ""  # its day is computed from its columns
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_rows AS
                        SELECT * EXCLUDE (filename{derived}), {DAY} AS _day,
                               regexp_extract(filename, '[^/]+/[^/]+$') AS _file
                        FROM {read_files(files, filename=True)} SEMI JOIN {ids} USING (trace_id)""")
        con.execute(f'INSERT INTO "{_before(table)}" BY NAME SELECT * FROM _lake_rows')
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * EXCLUDE (_day, _file) FROM _lake_rows')
        con.execute("DROP TABLE _lake_rows")

    def flush(self, con: duckdb.DuckDBPyConnection, keep_spans: bool = False) -> None:
        """Write what the run changed in the temp tables to the lake (see the module): new
        files, then one commit per table that changed; then make the views of those tables
        again and empty the temp tables; inside the caller's transaction, before it commits.
        With `keep_spans`, otlp_spans keeps its rows, now loaded as stored in the files just
        committed: the assembly after need not read the run's new spans back."""
        added: dict[str, list[LakeFile]] = {table: [] for table in KEPT_IN_LAKE}  # new files
        removed: dict[str, list[str]] = {table: [] for table in KEPT_IN_LAKE}  # files replaced, as listed
        filled = con.execute(" UNION ALL ".join(  # what each table holds: one statement (each costs ~1 ms)
            f"""SELECT '{table}', EXISTS (FROM "{table}"), EXISTS (FROM "{_before(table)}")"""
            for table in KEPT_IN_LAKE)).fetchall()
        try:
            for table, rows, loaded in filled:
                if rows or loaded:  # else nothing loaded, nothing new (most tables of a run)
                    self._changes(con, table, added[table], removed[table], loaded,
                                  keep=keep_spans and table == "otlp_spans")
        except BaseException:
            for table, files in added.items():  # no version lists them
                self.lake.discard(table, files)
            raise
        changed = [table for table in KEPT_IN_LAKE if added[table] or removed[table]]
        for n, table in enumerate(changed):
            try:
                self.deltas[table] = self.lake.commit_files(table, added[table], removed[table],
                                                            self.schemas[table], self.delta(table))
            except BaseException:
                for later in changed[n + 1:]:
                    self.lake.discard(later, added[later])
                raise
        catalog, views, wanted = _view_and_temp_columns(con)
        stale = [table for table in KEPT_IN_LAKE if table in changed  # a new version: other files
                 or wanted[table] != views[table]]  # from before a column
        if stale:
            create_lake_views(con, self.lake, {table: wanted[table] for table in stale}, catalog,
                              {table: self.deltas[table] for table in changed if self.deltas.get(table)})
        kept = ("otlp_spans", _before("otlp_spans"), LOADED_BY_TABLE["otlp_spans"]) if keep_spans else ()
        for table in (*KEPT_IN_LAKE, *_before_tables(), *LOADED):
            if table not in kept:
                con.execute(f'DELETE FROM "{table}"')
        if not keep_spans:
            self.kept_files.clear()

    def _changes(self, con: duckdb.DuckDBPyConnection, table: str, added: list[LakeFile], removed: list[str],
                 stored: bool, keep: bool) -> None:
        """Write the new files of `table` (adding each to `added`) and list the files they
        replace in `removed`: for each file that held a trace id some of whose loaded rows are
        gone or changed, a new file without that id's rows (none if no row remains); and one
        new file per day with the rows of the ids not loaded (new), all rows of those changed,
        and the rows added to a loaded id whose loaded rows all stay (a late span). `stored`:
        whether any of its rows were loaded (if not, every row is new). With `keep`, the
        table's rows become loaded as in those files (flush's `keep_spans`)."""
        before = _before(table)
        columns = ", ".join(f'"{name}"' for (name, *_) in con.execute(f'DESCRIBE "{table}"').fetchall())
        loaded = f"SELECT trace_id FROM {LOADED_BY_TABLE.get(table, '_lake_loaded WHERE children')}"
        now = f'SELECT {columns} FROM "{table}" SEMI JOIN ({loaded}) USING (trace_id)'
        then = f'SELECT {columns} FROM "{before}"'
        if not stored:  # no row changes or goes: what the formulas below give, without comparing
            new = f'SELECT {columns} FROM "{table}"'
        elif table in APPEND_ONLY:  # no stored row changes or goes: the rows of keys not stored are new
            new = f'SELECT {columns} FROM "{table}" ANTI JOIN "{before}" USING ({APPEND_ONLY[table]})'
        else:
            con.execute(f"CREATE OR REPLACE TEMP TABLE _lake_changed AS "
                        f"SELECT DISTINCT trace_id FROM ({then} EXCEPT ALL {now})")
            for day, name in con.execute(f'SELECT DISTINCT _day, _file FROM "{before}" '
                                         "SEMI JOIN _lake_changed USING (trace_id) ORDER BY ALL").fetchall():
                remaining = (f"SELECT * FROM read_parquet({quoted(self.lake.uri(table) + '/' + name)}, "
                             "hive_partitioning = false) ANTI JOIN _lake_changed USING (trace_id)")
                if con.execute(f"SELECT count(*) FROM ({remaining})").fetchall()[0][0]:
                    write_lake_file(con, self.lake, table, remaining, day, added)
                removed.append(name)
            new = f"""SELECT {columns} FROM "{table}" ANTI JOIN ({loaded}) USING (trace_id)
                      UNION ALL
                      SELECT {columns} FROM "{table}" SEMI JOIN _lake_changed USING (trace_id)
                      UNION ALL
                      SELECT * FROM ({now} EXCEPT ALL {then}) ANTI JOIN _lake_changed USING (trace_id)"""
        con.execute(f"CREATE OR REPLACE TEMP TABLE _lake_added AS {new}")
        day = ROW_DAY.get(table, DAY)
        listed = columns if table in ROW_DAY else f"* EXCLUDE ({DAY})"
        part = new_file_name()
        for (added_day,) in con.execute(f"SELECT DISTINCT {day} FROM _lake_added ORDER BY 1").fetchall():
            write_lake_file(con, self.lake, table, f"SELECT {listed} FROM _lake_added WHERE {day} = $1",
                            added_day, added, [added_day], part)
        if keep:  # an append-only table: no loaded row changed or went
            con.execute(f"""INSERT INTO "{before}" BY NAME SELECT *, {day} AS _day,
                            '{DAY}=' || strftime({day}, '%Y-%m-%d') || '/' || $1 AS _file
                            FROM _lake_added""", [part])
            con.execute(f"""INSERT INTO {LOADED_BY_TABLE[table]} SELECT DISTINCT trace_id FROM _lake_added
                            EXCEPT SELECT trace_id FROM {LOADED_BY_TABLE[table]}""")
            self.kept_files.setdefault(table, set()).update(
                file.relative for file in added if file.relative.endswith("/" + part))
        con.execute("DROP TABLE _lake_added; DROP TABLE IF EXISTS _lake_changed")


def write_lake_file(con: duckdb.DuckDBPyConnection, lake: Lake, table: str, query: str, day: date,
                    written: list[LakeFile], parameters: list | None = None, name: str | None = None) -> LakeFile:
    """`query`'s rows as a new file of the lake table's `day` folder (`name`, default a fresh
    one), listed in `written` (to be committed, or deleted if the flush fails): no version lists
    it, so no reader sees it until the table's commit."""
    file = lake.write_file(table, con.sql(query, params=parameters).to_arrow_reader(), day, name)
    written.append(file)
    return file


def _kept_columns(con: duckdb.DuckDBPyConnection, database: str | None = None,
                  schema: str | None = None) -> dict[str, list[tuple[str, str]]]:
    """Each kept table's columns (name, type, in order) in `database`'s `schema` (default: the
    current ones), in one catalog query: a DESCRIBE of a view of the lake reads every file's footer."""
    kept: dict[str, list[tuple[str, str]]] = {table: [] for table in KEPT_IN_LAKE}
    for table, name, kind in con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() "
            "WHERE database_name = coalesce(?, current_database()) AND schema_name = coalesce(?, current_schema()) "
            "ORDER BY table_name, column_index", [database, schema]).fetchall():
        if table in kept:
            kept[table].append((name, kind))
    return kept


def _view_and_temp_columns(con: duckdb.DuckDBPyConnection) -> tuple[str, dict[str, list[str]], dict[str, list[str]]]:
    """The current database's name, and the names of each kept table's columns in its main
    schema (the views) and in the temp one (the run's tables), in order: one catalog query."""
    (catalog,), = con.execute("SELECT current_database()").fetchall()
    columns: dict[str, dict[str, list[str]]] = {database: {table: [] for table in KEPT_IN_LAKE}
                                                for database in (catalog, "temp")}
    for database, table, name in con.execute(
            "SELECT database_name, table_name, column_name FROM duckdb_columns() "
            "WHERE database_name IN (?, 'temp') AND schema_name = 'main' AND table_name IN (SELECT unnest(?)) "
            "ORDER BY database_name, table_name, column_index", [catalog, list(KEPT_IN_LAKE)]).fetchall():
        columns[database][table].append(name)
    return catalog, columns[catalog], columns["temp"]


def _before(table: str) -> str:
    return f"_lake_before_{table}"


def _before_tables() -> list[str]:
    return [_before(table) for table in KEPT_IN_LAKE]
