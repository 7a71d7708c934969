"""raw_traces, its child tables, otlp_spans and otlp_traces in the trace lake: where Spark
ingestion keeps them, so that a day's hundreds of millions of traces, chunks and trace states
and billions of OTLP spans never pass into the control database. They are Delta Lake tables
partitioned by day (rag_loop.store.lake); the database has marked views of their current
versions' files under the tables' names (every reader reads them as before); a run of Spark
ingestion adds one file to each day it stores rows of. A span's day is its start's
(`span_day`), not its trace's: the trace is not known until it is assembled; a trace state's
is the day it was assembled on.

Ingestion itself is the DuckDB path's (rag_loop.ingest): it reads and writes these tables by
name. During a Spark ingestion run those names are temp tables of the connection, which
shadow the views. First copy wins for a file's traces (spans) reads the stored copies' keys
from the lake with Spark (`LakeTraces.stored`: the files of the table's current version): the
ones kept are new, and go into the temp tables. OTLP assembly reads and removes stored rows by
SQL: the lake's spans and states of the pending traces (`LakeTraces.load_pending`), and its
rows of the traces ready for assembly (`LakeTraces.load`), are loaded into the temp tables
first, found by Spark, so that every verdict sees every stored copy it needs; the run's own
new spans, which its first flush keeps loaded, are not read back. Before the run's
transaction commits, `LakeTraces.flush` writes what changed: a trace id some of whose stored
rows changed or went (an OTLP trace assembled again) is removed from the files that held it
(each such file is replaced by a new one without its rows), and the new rows (and a trace's
rows added beside its unchanged ones: a late span) are added as one new file per day. The new
files are written under new names in the tables' day folders, which no version lists (no
reader sees them), then committed by one Delta commit per table that adds them and removes the
files they replace; the views are made again over the new versions' files. A failure before a
table's commit leaves it at its previous version (the files written for it are deleted; any
left behind are listed by no version, and `vacuum` removes them); a failure between the
tables' commits or after them, before the control database's commit, leaves rows in the lake
whose files are not marked ingested, which the next run reads again and drops as read before
(the first-copy-wins rule for a record read again from the same line).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from rag_loop.store.ddl import ADDED_COLUMNS, CHILD_TABLES, KEPT_IN_LAKE
from rag_loop.store.deployment import ROW_DAY, require_home
from rag_loop.store.files import quoted, write_parquet
from rag_loop.store.lake import DAY, Lake, create_lake_views, delta_types, expose_lake_tables, in_lake
from rag_loop.store.tables import create_tables

PART = "part-0.parquet"  # a staging folder's one file
# the temp tables of the trace ids whose rows are loaded (a child table's: `_lake_loaded WHERE children`);
# `_lake_loaded_pending`: the pending ids whose states were looked up (load_pending)
LOADED_BY_TABLE = {"raw_traces": "_lake_loaded", "otlp_spans": "_lake_loaded_spans",
                   "otlp_traces": "_lake_loaded_pending"}
LOADED = ("_lake_loaded", "_lake_loaded_pending", "_lake_loaded_spans")
PENDING_BEFORE = "_lake_pending_before"  # the trace ids pending when the run began
# each kept table's rows with their day
KEPT_DAY_OF = {table: f"SELECT *, {ROW_DAY[table]} AS day FROM {table}" if table in ROW_DAY
               else f"SELECT * FROM {table}" for table in KEPT_IN_LAKE}


def expose_kept_tables(con: duckdb.DuckDBPyConnection, lake: Lake | Path) -> None:
    """Each kept table (KEPT_IN_LAKE) as a view of this lake's Delta table of its name. The
    home of a table is the deployment's configuration, never a run's decision (rag_loop.store.
    deployment): a kept table of the database with rows, or a view of another lake, is refused
    (WrongHome: `rag-loop lake migrate` moves it), before anything is written. An empty one (a
    new database's) becomes a view of the lake's table, written empty (one commit each; rows
    another database left there go); the views replace the tables in one transaction."""
    lake = Lake.of(lake)
    create_tables(con)
    for table in KEPT_IN_LAKE:
        require_home(con, lake, table)
    columns = {}
    for table in [table for table in KEPT_IN_LAKE if not in_lake(con, lake, table)]:
        rows = con.sql(f"SELECT * FROM ({KEPT_DAY_OF[table]}) WHERE day IS NOT NULL")
        lake.write(table, rows.to_arrow_reader(), days=None)
        columns[table] = [name for (name, *_) in con.execute(f'DESCRIBE "{table}"').fetchall()]
    if columns:
        expose_lake_tables(con, lake, columns)


def relative_file(path: str | Path) -> str:
    """A file of a day-partitioned lake table (a path or URI, as `Lake.files` lists it) as the
    table lists it: `day=YYYY-MM-DD/<name>`."""
    return "/".join(str(path).rstrip("/").split("/")[-2:])


def spark_columns(con: duckdb.DuckDBPyConnection, relation: str) -> Any:
    """The Spark schema of the database relation `relation` (SQL: a quoted, maybe qualified,
    name) but `day`, which Spark takes from the day folders: what to read a lake table's files
    with, so that a file from before a column gives NULL there (Spark would otherwise take one
    file's columns for all). pyspark is imported here only."""
    from pyspark.sql.pandas.types import from_arrow_schema
    listed = ", ".join(f'"{c}"' for c, *_ in con.execute(f"DESCRIBE {relation}").fetchall() if c != DAY)
    return from_arrow_schema(con.sql(f"SELECT {listed} FROM {relation} LIMIT 0").to_arrow_table().schema)


@dataclass
class LakeTraces:
    """The kept tables of a Spark ingestion run (see the module): `load` the lake's rows of some
    trace ids (`load_pending`: the pending traces' spans and states) into the connection's
    shadowing temp tables, `flush` what the run changed."""

    session: Any  # pyspark.sql.SparkSession
    lake: Lake
    run: Path  # the run's staging folder
    loads: int = field(default=0, init=False)
    # the files whose rows flush(keep_spans=True) kept loaded, as the table lists them
    kept_files: dict[str, set[str]] = field(default_factory=dict, init=False)
    schemas: dict[str, pa.Schema] = field(default_factory=dict, init=False)  # the run's columns, with day

    def __post_init__(self) -> None:
        self.lake = Lake.of(self.lake)

    @contextmanager
    def shadowing(self, con: duckdb.DuckDBPyConnection) -> Iterator[LakeTraces]:
        """The kept tables' names as empty temp tables for the block (the database's views stay
        as they are). Each kept table of the lake exists, with every column the run writes (a
        lake from before a column gets it: its older files read NULL there)."""
        for table in KEPT_IN_LAKE:
            con.execute(f'CREATE OR REPLACE TEMP TABLE "{table}" AS SELECT * FROM "{table}" LIMIT 0')
            con.execute(f'CREATE OR REPLACE TEMP TABLE "{_before(table)}" AS '
                        f'SELECT *, NULL::DATE AS _day, NULL::VARCHAR AS _file FROM "{table}" LIMIT 0')
            for column in ADDED_COLUMNS.get(table, ()):  # a lake from before a column: its files lack it
                for name in (table, _before(table)):
                    con.execute(f'ALTER TABLE temp.main."{name}" ADD COLUMN IF NOT EXISTS {column}')
            schema = delta_types(con.sql(f'SELECT * FROM temp.main."{table}" LIMIT 0').to_arrow_table().schema)
            self.schemas[table] = schema if DAY in schema.names else schema.append(pa.field(DAY, pa.date32()))
            self.lake.commit_files(table, [], [], self.schemas[table])  # no commit if nothing is missing
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_loaded (trace_id VARCHAR, children BOOLEAN)")
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_loaded_pending (trace_id VARCHAR)")
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_loaded_spans (trace_id VARCHAR)")
        con.execute(f"CREATE OR REPLACE TEMP TABLE {PENDING_BEFORE} AS SELECT DISTINCT trace_id FROM otlp_pending")
        try:
            yield self
        finally:
            for table in (*KEPT_IN_LAKE, *_before_tables(), *LOADED, PENDING_BEFORE):
                con.execute(f'DROP TABLE IF EXISTS temp.main."{table}"')

    def stored(self, table: str = "raw_traces") -> Any | None:
        """The lake's `table` (raw_traces, otlp_spans, ...) as a Spark frame of its current
        version's files (None while it has none), with `day`: the stored copies that first copy
        wins reads, found by Spark without loading them."""
        from pyspark.sql.pandas.types import from_arrow_schema

        files = self.lake.files(table)
        if not files:
            return None
        schema = self.lake.schema(table)
        return (self.session.read.schema(from_arrow_schema(schema.remove(schema.get_field_index(DAY))))
                .option("basePath", str(self.lake.path(table))).parquet(*files))

    def load(self, con: duckdb.DuckDBPyConnection, trace_ids: str, children_of: str | None = None) -> None:
        """The lake's raw_traces rows of the trace ids `trace_ids` (SQL) selects, and the child
        tables' rows of those of them `children_of` selects (the only ones whose children the
        run may change: a trace assembled again; it must be a subset), into the temp tables;
        each loaded once until the next flush; inside the caller's transaction."""
        days = self.lake.days("raw_traces")
        if not days:
            return
        self.loads += 1
        folder = self.run / f"loaded-{self.loads}"
        wanted = {"ids": f"""SELECT trace_id FROM ({trace_ids}) WHERE trace_id IS NOT NULL
                             EXCEPT SELECT trace_id FROM _lake_loaded""",
                  "children": f"""SELECT trace_id FROM ({children_of or "SELECT NULL AS trace_id"})
                                  WHERE trace_id IS NOT NULL
                                  EXCEPT SELECT trace_id FROM _lake_loaded WHERE children"""}
        counts = {}
        for name, query in wanted.items():
            write_parquet(con, f"SELECT DISTINCT trace_id FROM ({query})", folder / name / "part-0.parquet")
            counts[name] = con.execute(f"SELECT count(*) FROM read_parquet({quoted(folder / name / '*.parquet')})"
                                       ).fetchall()[0][0]
        if counts["ids"]:
            con.execute(f"INSERT INTO _lake_loaded SELECT trace_id, false FROM "
                        f"read_parquet({quoted(folder / 'ids' / '*.parquet')})")
            self._load_rows(con, "raw_traces", self.session.read.parquet(str(folder / "ids")), days, folder)
        if counts["children"]:
            chosen = f"read_parquet({quoted(folder / 'children' / '*.parquet')})"
            con.execute(f"UPDATE _lake_loaded SET children = true WHERE trace_id IN (SELECT trace_id FROM {chosen})")
            days = {d for (d,) in con.execute(f'SELECT DISTINCT _day FROM "{_before("raw_traces")}" '
                                              f"SEMI JOIN {chosen} USING (trace_id)").fetchall()}
            ids = self.session.read.parquet(str(folder / "children"))
            for table in CHILD_TABLES:  # a child row is in its trace's day
                self._load_rows(con, table, ids, sorted(days & set(self.lake.days(table))), folder)

    def load_pending(self, con: duckdb.DuckDBPyConnection) -> None:
        """The lake's otlp_traces and otlp_spans rows of the pending trace ids (otlp_pending)
        into the temp tables and their copies as loaded, each trace's once until the next
        flush; inside the caller's transaction. A trace's otlp_traces row (one, on the day it
        was assembled) is found by its key in every day, as first copy wins finds a stored
        copy. Its spans are read from the days otlp_pending lists for it (where its spans since
        its last assembly are), and, for a trace assembled before of whose spans fewer are
        found there than that assembly had (its spans were on other days), from every other
        day too: the days read, not the whole history, unless a trace needs it. A trace first
        seen in this run (not pending when it began, never assembled) whose spans the run's
        first flush kept loaded (`flush(keep_spans=True)`) has no other span: none is read."""
        days = self.lake.days("otlp_spans")
        if not days:
            return
        self.loads += 1
        folder = self.run / f"pending-{self.loads}"
        con.execute("""CREATE OR REPLACE TEMP TABLE _lake_wanted AS
                       SELECT trace_id, day FROM otlp_pending ANTI JOIN _lake_loaded_pending USING (trace_id)""")
        try:
            if not con.execute("SELECT count(*) FROM _lake_wanted").fetchall()[0][0]:
                return  # no Spark job for a run with nothing pending (or all of it loaded)
            write_parquet(con, "SELECT DISTINCT trace_id FROM _lake_wanted", folder / "ids" / PART)
            ids = self.session.read.parquet(str(folder / "ids"))
            if (states := self.stored("otlp_traces")) is not None:
                found = states.select("trace_id", "day").join(ids, "trace_id", "left_semi").select("day").distinct()
                self._load_rows(con, "otlp_traces", ids, sorted(row.day for row in found.collect()),
                                folder / "states")
            con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_unloaded AS SELECT * FROM _lake_wanted
                            WHERE trace_id IN (SELECT trace_id FROM {PENDING_BEFORE})
                               OR trace_id IN (SELECT trace_id FROM "{_before('otlp_traces')}")
                               OR trace_id NOT IN (SELECT trace_id FROM _lake_loaded_spans)""")
            listed = {d for (d,) in con.execute("SELECT DISTINCT day FROM _lake_unloaded").fetchall()}
            if listed:
                write_parquet(con, "SELECT DISTINCT trace_id FROM _lake_unloaded", folder / "unloaded" / PART)
                first = days if None in listed else sorted(listed & set(days))  # NULL: from before days were kept
                self._load_rows(con, "otlp_spans", self.session.read.parquet(str(folder / "unloaded")), first,
                                folder / "listed")
                if rest := sorted(set(days) - set(first)):
                    self._load_short(con, rest, folder)
                con.execute("""INSERT INTO _lake_loaded_spans SELECT DISTINCT trace_id FROM _lake_unloaded
                               EXCEPT SELECT trace_id FROM _lake_loaded_spans""")
            con.execute("INSERT INTO _lake_loaded_pending SELECT DISTINCT trace_id FROM _lake_wanted")
        finally:
            con.execute("DROP TABLE IF EXISTS _lake_wanted; DROP TABLE IF EXISTS _lake_unloaded")

    def _load_short(self, con: duckdb.DuckDBPyConnection, rest: list[date], folder: Path) -> None:
        """The spans on `rest` of the wanted traces assembled before of whose spans fewer are
        loaded than that assembly had."""
        short = folder / "short" / PART
        write_parquet(con, f"""
            SELECT trace_id FROM otlp_traces SEMI JOIN _lake_unloaded USING (trace_id)
            WHERE spans > (SELECT count(*) FROM "{_before('otlp_spans')}" b
                           WHERE b.trace_id = otlp_traces.trace_id)""", short)
        if con.execute(f"SELECT count(*) FROM read_parquet({quoted(short)})").fetchall()[0][0]:
            self._load_rows(con, "otlp_spans", self.session.read.parquet(str(short.parent)), rest, folder / "rest")

    def _load_rows(self, con: duckdb.DuckDBPyConnection, table: str, ids: Any, days: list[date],
                   folder: Path) -> None:
        """The lake's rows of `table` on `days` with these ids, found by Spark in the files of
        its current version, into the temp table and its copy as loaded (with each row's day
        and file, as the table lists it); not those of the files whose rows the temp tables
        kept (`flush(keep_spans=True)`)."""
        from pyspark.sql import functions

        kept = self.kept_files.get(table, set())
        files = [path for path in self.lake.files(table, days) if relative_file(path) not in kept]
        if not files:
            return
        rows = (self.session.read.schema(spark_columns(con, f'temp.main."{table}"'))  # the run's columns
                .option("basePath", str(self.lake.path(table)))
                .parquet(*files)
                .withColumn("_file", functions.concat(  # before a join hides it
                    functions.lit(f"{DAY}="), functions.date_format(DAY, "yyyy-MM-dd"), functions.lit("/"),
                    functions.col("_metadata.file_name")))
                .withColumn("_day", functions.col(DAY))
                .join(ids, "trace_id", "left_semi"))
        if table in ROW_DAY:  # its day is computed from its columns, not one of them
            rows = rows.drop(DAY)
        target = folder / table
        rows.write.parquet(str(target))
        if any(target.glob("*.parquet")):
            loaded = f"read_parquet({quoted(target / '*.parquet')})"
            con.execute(f'INSERT INTO "{_before(table)}" BY NAME SELECT * FROM {loaded}')
            con.execute(f'INSERT INTO "{table}" BY NAME SELECT * EXCLUDE (_day, _file) FROM {loaded}')

    def flush(self, con: duckdb.DuckDBPyConnection, keep_spans: bool = False) -> None:
        """Write what the run changed in the temp tables to the lake (see the module): new
        files, then one commit per table that changed; then make the views of those tables
        again and empty the temp tables; inside the caller's transaction, before it commits.
        With `keep_spans`, otlp_spans keeps its rows, now loaded as stored in the files just
        committed: the assembly after need not read the run's new spans back."""
        added: dict[str, list[Path]] = {table: [] for table in KEPT_IN_LAKE}  # new files, in the table's folder
        removed: dict[str, list[str]] = {table: [] for table in KEPT_IN_LAKE}  # files replaced, as listed
        try:
            for table in KEPT_IN_LAKE:
                self._changes(con, table, added[table], removed[table], keep=keep_spans and table == "otlp_spans")
        except BaseException:
            _delete(path for paths in added.values() for path in paths)  # no version lists them
            raise
        changed = [table for table in KEPT_IN_LAKE if added[table] or removed[table]]
        for n, table in enumerate(changed):
            try:
                self.lake.commit_files(table, added[table], removed[table], self.schemas[table])
            except BaseException:
                _delete(path for later in changed[n + 1:] for path in added[later])
                raise
        catalog = con.execute("SELECT current_database()").fetchall()[0][0]
        views = {table: [name for (name, *_) in con.execute(f'DESCRIBE "{catalog}".main."{table}"').fetchall()]
                 for table in KEPT_IN_LAKE}
        wanted = {table: [name for (name, *_) in con.execute(f'DESCRIBE temp.main."{table}"').fetchall()]
                  for table in KEPT_IN_LAKE}
        stale = [table for table in KEPT_IN_LAKE if table in changed  # a new version: other files
                 or wanted[table] != views[table]]  # from before a column
        if stale:
            create_lake_views(con, self.lake, {table: wanted[table] for table in stale}, catalog)
        kept = ("otlp_spans", _before("otlp_spans"), LOADED_BY_TABLE["otlp_spans"]) if keep_spans else ()
        for table in (*KEPT_IN_LAKE, *_before_tables(), *LOADED):
            if table not in kept:
                con.execute(f'DELETE FROM "{table}"')
        if not keep_spans:
            self.kept_files.clear()

    def _changes(self, con: duckdb.DuckDBPyConnection, table: str, added: list[Path], removed: list[str],
                 keep: bool) -> None:
        """Write the new files of `table` (adding each to `added`) and list the files they
        replace in `removed`: for each file that held a trace id some of whose loaded rows are
        gone or changed, a new file without that id's rows (none if no row remains); and one
        new file per day with the rows of the ids not loaded (new), all rows of those changed,
        and the rows added to a loaded id whose loaded rows all stay (a late span). With
        `keep`, the table's rows become loaded as in those files (flush's `keep_spans`)."""
        before = _before(table)
        folder = self.lake.path(table)
        columns = ", ".join(f'"{name}"' for (name, *_) in con.execute(f'DESCRIBE "{table}"').fetchall())
        loaded = f"SELECT trace_id FROM {LOADED_BY_TABLE.get(table, '_lake_loaded WHERE children')}"
        now = f'SELECT {columns} FROM "{table}" SEMI JOIN ({loaded}) USING (trace_id)'
        then = f'SELECT {columns} FROM "{before}"'
        con.execute(f"CREATE OR REPLACE TEMP TABLE _lake_changed AS "
                    f"SELECT DISTINCT trace_id FROM ({then} EXCEPT ALL {now})")
        replaced = {}  # a file rewritten: its name as listed -> its replacement's
        for day, name in con.execute(f'SELECT DISTINCT _day, _file FROM "{before}" '
                                     "SEMI JOIN _lake_changed USING (trace_id) ORDER BY ALL").fetchall():
            remaining = (f"SELECT * FROM read_parquet({quoted(folder / name)}, hive_partitioning = false) "
                         "ANTI JOIN _lake_changed USING (trace_id)")
            if con.execute(f"SELECT count(*) FROM ({remaining})").fetchall()[0][0]:
                target = folder / f"{DAY}={day.isoformat()}" / _new_name()
                write_lake_file(con, remaining, target, added)
                replaced[name] = relative_file(target)
            removed.append(name)
        con.execute(f"""CREATE OR REPLACE TEMP TABLE _lake_added AS
                        SELECT {columns} FROM "{table}" ANTI JOIN ({loaded}) USING (trace_id)
                        UNION ALL
                        SELECT {columns} FROM "{table}" SEMI JOIN _lake_changed USING (trace_id)
                        UNION ALL
                        SELECT * FROM ({now} EXCEPT ALL {then}) ANTI JOIN _lake_changed USING (trace_id)""")
        day = ROW_DAY.get(table, DAY)
        listed = columns if table in ROW_DAY else f"* EXCLUDE ({DAY})"
        part = _new_name()
        for (added_day,) in con.execute(f"SELECT DISTINCT {day} FROM _lake_added ORDER BY 1").fetchall():
            write_lake_file(con, f"SELECT {listed} FROM _lake_added WHERE {day} = $1",
                            folder / f"{DAY}={added_day.isoformat()}" / part, added, [added_day])
        if keep:
            kept = self.kept_files.setdefault(table, set())
            for name, replacement in replaced.items():  # the rows left in a rewritten file are there now
                con.execute(f'UPDATE "{before}" SET _file = $1 WHERE _file = $2', [replacement, name])
                if name in kept:
                    kept.discard(name)
                    kept.add(replacement)
            con.execute(f'DELETE FROM "{before}" WHERE trace_id IN (SELECT trace_id FROM _lake_changed)')
            con.execute(f"""INSERT INTO "{before}" BY NAME SELECT *, {day} AS _day,
                            '{DAY}=' || strftime({day}, '%Y-%m-%d') || '/' || $1 AS _file
                            FROM _lake_added""", [part])
            con.execute(f"""INSERT INTO {LOADED_BY_TABLE[table]} SELECT DISTINCT trace_id FROM _lake_added
                            EXCEPT SELECT trace_id FROM {LOADED_BY_TABLE[table]}""")
            kept.update(relative_file(path) for path in added if path.name == part)
        con.execute("DROP TABLE _lake_added; DROP TABLE _lake_changed")


def write_lake_file(con: duckdb.DuckDBPyConnection, query: str, target: Path, written: list[Path],
                    parameters: list | None = None) -> None:
    """`query`'s rows as the new file `target` in a lake table's day folder, listed in `written`
    first (to be committed, or deleted if the flush fails): no version lists it, so no reader
    sees it until the table's commit."""
    written.append(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY ({query}) TO {quoted(target)} (FORMAT parquet)", parameters or [])


def _new_name() -> str:
    return f"part-{uuid.uuid4().hex}.parquet"


def _delete(paths: Iterable[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _before(table: str) -> str:
    return f"_lake_before_{table}"


def _before_tables() -> list[str]:
    return [_before(table) for table in KEPT_IN_LAKE]
