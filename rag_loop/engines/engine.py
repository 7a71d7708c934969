"""Where a portable stage runs: DuckDB on the control database (the default), or Spark on the
trace lake. A stage builds its Ibis expression from `engine.inputs(...)` with
`engine.functions`, and `engine.run` stores the result where the deployment keeps the table
(rag_loop.store.deployment): in an embedded deployment as the control database's table; in a
lake-backed one as the lake's Delta table, which the control database reads through a view of
the same name. On Spark the executors write its files (nothing passes through the driver) and
the driver commits them; Spark runs only over a lake. Neither engine moves a table between
homes: `rag-loop lake migrate` does."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import ibis
import ibis.expr.types as ir
import pandas as pd
import pyarrow as pa

from rag_loop.engines import sql_cache
from rag_loop.engines.functions import DUCKDB, SPARK, Functions
from rag_loop.engines.literals import Placed, same_sql, to_placeholders
from rag_loop.ingest.lake import ingest_directory_into_lake
from rag_loop.ingest.pipeline import IngestReport, ingest_directory
from rag_loop.store.ddl import CHILD_TABLES
from rag_loop.store.deployment import require_home
from rag_loop.store.lake import DAY, Lake, expose_lake_tables
from rag_loop.store.tables import add_child_days, has_table, transaction

# Spark settings every session needs: instants in UTC (the day of a trace), Parquet timestamps
# that DuckDB reads as instants, no UI; ANSI mode stays on (a bad cast fails instead of
# silently becoming NULL or -1)
SPARK_SETTINGS = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.ansi.enabled": "true",
}
LOCAL_SETTINGS = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                  "spark.sql.shuffle.partitions": "4", "spark.driver.bindAddress": "127.0.0.1",
                  "spark.driver.host": "127.0.0.1"}


Build = Callable[[Mapping[str, ir.Table], Any, Functions], ir.Table]


class Engine(ABC):
    """Runs the portable stages' Ibis expressions."""

    functions: Functions

    def run(self, con: duckdb.DuckDBPyConnection, name: str, inputs: Sequence[str], build: Build,
            settings: Any, days: Collection[date] | None = None) -> int:
        """Stage `name`: `build(tables, settings, functions)` on the inputs, stored as table `name`;
        with `days`, only its rows of those days, which replace theirs (the stage's `build` reads
        what those days need). Returns the rows stored (of `days`, when given)."""
        expression = build(self.inputs(con, inputs), settings, self.functions)
        if days is None:
            return self.materialize(con, name, expression)
        return self.replace_days(con, name, expression.filter(expression.day.isin(sorted(days))), days)

    @abstractmethod
    def replace_days(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table,
                     days: Collection[date]) -> int:
        """Store the expression's rows (all of `days`) in place of those days' rows of table
        `name`, in one transaction; returns the rows of those days."""

    @abstractmethod
    def frame(self, con: duckdb.DuckDBPyConnection, inputs: Sequence[str], build: Build, settings: Any) -> pd.DataFrame:
        """A small result (an aggregate) of `build(tables, settings, functions)`, in memory."""

    lake: Lake | None

    def ingest(self, con: duckdb.DuckDBPyConnection, directory: Path, **options: Any) -> IngestReport:
        """Ingest the new trace files of `directory` (the options of rag_loop.ingest.pipeline.
        ingest_directory) where the deployment keeps the traces: the database (embedded), or the
        lake (rag_loop.ingest.lake). Ingestion runs on DuckDB whatever the engine (Spark's own
        ingestion lost every native and incremental run measured, tied an OTLP backfill, and could
        not write an object store): the
        same rows and report either way."""
        if self.lake is None:
            return ingest_directory(con, directory, **options)
        return ingest_directory_into_lake(con, directory, self.lake, **options)

    @abstractmethod
    def inputs(self, con: duckdb.DuckDBPyConnection, names: Sequence[str]) -> dict[str, ir.Table]:
        """The stage's input tables."""

    @abstractmethod
    def materialize(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table) -> int:
        """Store the expression's rows as table `name` of the control database; returns the count."""


class DuckDBEngine(Engine):
    """The stages on the control database itself, in the run's process. A stage's table lives
    where the deployment keeps it: in the database (embedded, no lake), or in the trace lake
    (lake-backed: written there in one commit, the database holding a view of it)."""

    functions = DUCKDB
    _compiled: dict[Hashable, str] = {}  # SQL per stage shape (`_sql`): Ibis builds and compiles in 0.1-0.5 s
    _movable: dict[Build, bool] = {}  # per stage: its placed settings move back (`_moves_back`)

    def __init__(self, lake: Lake | Path | None = None):
        self.lake = None if lake is None else Lake.of(lake)

    def run(self, con: duckdb.DuckDBPyConnection, name: str, inputs: Sequence[str], build: Build,
            settings: Any, days: Collection[date] | None = None) -> int:
        sql = self._sql(con, name, inputs, build, settings)
        return self._store(con, name, sql, days)

    def replace_days(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table,
                     days: Collection[date]) -> int:
        return self._store(con, name, ibis.to_sql(expression, dialect="duckdb"), days)

    def _store(self, con: duckdb.DuckDBPyConnection, name: str, sql: str, days: Collection[date] | None) -> int:
        """The stage's rows (of `days`, replacing theirs; all when None) stored in its home."""
        self._lambdas(con)
        require_home(con, self.lake)
        if self.lake is not None:
            return self._store_in_lake(self.lake.attach(con), name, sql, days)
        if days is None:
            con.execute(f'CREATE OR REPLACE TABLE "{name}" AS {sql}')
            return con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]
        wanted = f"SELECT * FROM ({sql}) WHERE day IN (SELECT unnest($days::DATE[]))"
        with transaction(con):
            con.execute(f'CREATE TABLE IF NOT EXISTS "{name}" AS SELECT * FROM ({sql}) WHERE false')
            con.execute(f'DELETE FROM "{name}" WHERE day IN (SELECT unnest($days::DATE[]))', {"days": sorted(days)})
            con.execute(f'INSERT INTO "{name}" BY NAME {wanted}', {"days": sorted(days)})
        return _rows_of_days(con, name, days)

    def _store_in_lake(self, con: duckdb.DuckDBPyConnection, name: str, sql: str,
                       days: Collection[date] | None) -> int:
        wanted = sql if days is None else f"SELECT * FROM ({sql}) WHERE day IN (SELECT unnest($days::DATE[]))"
        shown = has_table(con, name)  # a lake table the database does not show (another database's) goes whole
        rows = con.sql(wanted, params=None if days is None else {"days": sorted(days)})
        columns = rows.columns
        self.lake.write(name, rows.to_arrow_reader(), days=days if shown else None)
        expose_lake_tables(con, self.lake, {name: columns})
        return con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0] if days is None \
            else _rows_of_days(con, name, days)

    def frame(self, con: duckdb.DuckDBPyConnection, inputs: Sequence[str], build: Build, settings: Any) -> pd.DataFrame:
        self._lambdas(con)
        return con.execute(self._sql(con, "", inputs, build, settings)).df()

    def _sql(self, con: duckdb.DuckDBPyConnection, name: str, inputs: Sequence[str], build: Build,
             settings: Any) -> str:
        """The stage's SQL, compiled once per stage, input schemas and settings up to their dates
        and placed numbers (rag_loop.engines.literals.to_placeholders). A stage's first compile
        with placed settings is checked against compiling its settings as given; a stage whose
        check fails is compiled as given (tests/engines/test_literals.py proves the stages' other
        shapes and values). The SQL of a stage of rag_loop, and its passed check, are kept across
        processes too (rag_loop.engines.sql_cache)."""
        if set(inputs) & set(CHILD_TABLES):  # a database from before their `day`, not ingested into since
            add_child_days(con)
        canonical, placed = to_placeholders(settings)
        if placed is not None and not self._movable.get(build, True):
            canonical, placed = settings, None
        schemas = tuple(tuple(con.execute(f'DESCRIBE "{t}"').fetchall()) for t in inputs)
        key = (name, build, repr(canonical), schemas)
        if key not in self._compiled:
            if len(self._compiled) > 64:
                self._compiled.clear()
            saved = sql_cache.stage_key(type(self), name, build, canonical, schemas)
            template = None if saved is None else sql_cache.read(saved)
            if template is None:
                template = self._compile(con, inputs, build, canonical)
                if placed is not None and build not in self._movable:
                    self._movable[build] = self._checked(con, inputs, build, settings, template, placed)
                    if not self._movable[build]:
                        return self._compile(con, inputs, build, settings)
                if saved is not None:
                    sql_cache.write(saved, template)
            self._compiled[key] = template
        sql = self._compiled[key] if placed is None else placed.back(self._compiled[key], "duckdb")
        return sql if sql is not None else self._compile(con, inputs, build, settings)

    def _checked(self, con: duckdb.DuckDBPyConnection, inputs: Sequence[str], build: Build, settings: Any,
                 template: str, placed: Placed) -> bool:
        """`_moves_back`, once a stage of rag_loop and code version: a check passed in another
        process is kept (rag_loop.engines.sql_cache) as this process's is in `_movable`."""
        saved = sql_cache.stage_key(type(self), "<moves back>", build, None, ())
        if saved is not None and sql_cache.read(saved) == "passed":
            return True
        passed = self._moves_back(con, inputs, build, settings, template, placed)
        if passed and saved is not None:
            sql_cache.write(saved, "passed")
        return passed

    def _moves_back(self, con: duckdb.DuckDBPyConnection, inputs: Sequence[str], build: Build, settings: Any,
                    template: str, placed: Placed) -> bool:
        """Whether the stage compiled on its canonical settings (`template`), moved back, is the
        stage compiled on the settings (up to the names Ibis makes up afresh)."""
        back = placed.back(template, "duckdb")
        return back is not None and same_sql(back, self._compile(con, inputs, build, settings))

    def _compile(self, con: duckdb.DuckDBPyConnection, inputs: Sequence[str], build: Build, settings: Any) -> str:
        # one line: a pretty SQL breaks lines by their length, which a placeholder's differs from its value's
        return ibis.to_sql(build(self.inputs(con, inputs), settings, self.functions), dialect="duckdb", pretty=False)

    def inputs(self, con: duckdb.DuckDBPyConnection, names: Sequence[str]) -> dict[str, ir.Table]:
        backend = ibis.duckdb.from_connection(con)
        return {name: backend.table(name) for name in names}

    def materialize(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table) -> int:
        return self._create(con, name, ibis.to_sql(expression, dialect="duckdb"))

    @staticmethod
    def _lambdas(con: duckdb.DuckDBPyConnection) -> None:
        con.execute("SET lambda_syntax = 'ENABLE_SINGLE_ARROW'")  # Ibis 12 writes x -> f(x)


@dataclass
class SparkEngine(Engine):
    """The stages on Spark over the trace lake at `lake`: the inputs are the lake's tables, the
    result is written there by the executors, one file per day, and the control database gets a
    view of those files under the stage's name (for the stages after it that run on DuckDB):
    a trace-sized result is never copied into the control database."""

    session: Any  # pyspark.sql.SparkSession
    lake: Lake
    functions: Functions = field(default=SPARK, init=False)
    _cached: list[tuple[str, Any]] = field(default_factory=list, init=False, repr=False)  # `reuse`'s

    def __post_init__(self) -> None:
        self.lake = Lake.of(self.lake)
        self.backend = ibis.pyspark.connect(self.session)
        self.functions = replace(SPARK, reuse=self.reuse)

    def reuse(self, table: ir.Table) -> ir.Table:
        """`table` cached by the executors (in memory, spilling to disk) when the query first
        reads it, released after the query (`_caching`): one computation for all its readings.
        Not Ibis's `cache()`, which fails on Spark Connect (it expects the frame cached at once)."""
        name = f"rag_loop_reused_{uuid.uuid4().hex}"
        frame = self.session.sql(str(self.backend.compile(table))).cache()
        frame.createOrReplaceTempView(name)
        self._cached.append((name, frame))
        return self.backend.table(name)

    @contextmanager
    def _caching(self) -> Iterator[None]:
        try:
            yield
        finally:
            while self._cached:
                name, frame = self._cached.pop()
                self.session.catalog.dropTempView(name)
                frame.unpersist()

    def run(self, con: duckdb.DuckDBPyConnection, name: str, inputs: Sequence[str], build: Build,
            settings: Any, days: Collection[date] | None = None) -> int:
        with self._caching():
            return super().run(con, name, inputs, build, settings, days)

    def inputs(self, con: duckdb.DuckDBPyConnection, names: Sequence[str]) -> dict[str, ir.Table]:
        """Each table from the lake where it is there, else from the control database (the small
        tables: documents, trace_novelty; shipped to the executors)."""
        tables = {}
        for name in names:
            view = f"rag_loop_{name}"
            self._frame(con, name).createOrReplaceTempView(view)
            tables[name] = self.backend.table(view)
        return tables

    def frame(self, con: duckdb.DuckDBPyConnection, inputs: Sequence[str], build: Build, settings: Any) -> pd.DataFrame:
        with self._caching():
            expression = build(self.inputs(con, inputs), settings, self.functions)
            schema = expression.schema()
            result = _as_declared(self.session.sql(str(self.backend.compile(expression))), schema).toPandas()
        for column, dtype in schema.items():  # as DuckDB's .df() gives them: µs, instants in UTC
            if dtype.is_date():
                result[column] = pd.to_datetime(result[column]).astype("datetime64[us]")
            elif dtype.is_timestamp():
                result[column] = pd.to_datetime(result[column], utc=True).astype("datetime64[us, UTC]")
        result.attrs.clear()  # Spark Connect's plan metrics, which pandas cannot write to Parquet
        return result

    def _frame(self, con: duckdb.DuckDBPyConnection, name: str):
        """The lake's table `name` (its current version's files, `day` from their folders), else
        the control database's (a small table, shipped to the executors)."""
        from pyspark.sql import functions
        from pyspark.sql.pandas.types import from_arrow_schema
        schema = self.lake.schema(name)
        if schema is None:
            table = con.table(name).arrow().read_all()  # with its schema: Spark Connect infers none from no rows
            if table.num_rows == 0:  # one empty chunk a column: pyarrow cannot rebuild a column of none
                table = table.schema.empty_table()
            return self.session.createDataFrame(table, schema=from_arrow_schema(table.schema))
        files = self.lake.files(name)
        partitioned = DAY in self.lake.delta(name).metadata().partition_columns
        if not files:  # the columns, no rows
            columns = from_arrow_schema(pa.schema([f for f in schema if f.name != DAY]))
            frame = self.session.createDataFrame([], schema=columns)
            return frame.withColumn(DAY, functions.lit(None).cast("date")) if partitioned else frame
        reader = self.session.read
        if partitioned:  # every column, NULL where a file from before it lacks one; `day` from the folders
            reader = reader.schema(from_arrow_schema(pa.schema([f for f in schema if f.name != DAY])))
            reader = reader.option("basePath", str(self.lake.path(name)))
        return reader.parquet(*files)

    def materialize(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table) -> int:
        require_home(con, self.lake)
        self._write_days(name, expression, None)
        return self._expose(con, name, expression)

    def replace_days(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table,
                     days: Collection[date]) -> int:
        """As `Engine.replace_days`. A lake table the database does not show (another
        database's) is replaced whole."""
        require_home(con, self.lake)
        self._write_days(name, expression, days if has_table(con, name) else None)
        self._expose(con, name, expression)
        return _rows_of_days(con, name, days)

    def _expose(self, con: duckdb.DuckDBPyConnection, name: str, expression: ir.Table) -> int:
        """The database's `name` becomes a view of the lake's table (the rows stay there: a
        trace-sized table is never copied into the control database); returns its rows."""
        expose_lake_tables(con, self.lake, {name: expression.columns})
        return con.execute(f'SELECT count(*) FROM "{name}"').fetchall()[0][0]

    def _write_days(self, name: str, expression: ir.Table, days: Collection[date] | None) -> None:
        """The expression's rows written by the executors, one file per day, then committed by
        the driver in place of the table's rows of `days` (None: all), in one Delta commit:
        readers see all of the old days or all of the new."""
        staging, folder = self.lake.staging(), self.lake.path(name)
        added = []
        try:
            for written in self._write_files(expression, staging):
                target = folder / written.parent.name / f"part-{uuid.uuid4().hex}.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(written, target)  # not read until committed
                added.append(target)
            self.lake.commit_days(name, added, days, _instants_in_utc(expression.schema().to_pyarrow()))
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _write_files(self, expression: ir.Table, staging: Path) -> list[Path]:
        """The expression's rows as Parquet files in `staging`'s `day=` folders, one per day,
        written by the executors (nothing passes through the driver)."""
        frame = _as_declared(self.session.sql(str(self.backend.compile(expression))), expression.schema())
        frame.repartition(DAY).write.partitionBy(DAY).parquet(str(staging))
        return sorted(staging.glob(f"{DAY}=*/*.parquet"))


def _rows_of_days(con: duckdb.DuckDBPyConnection, name: str, days: Collection[date]) -> int:
    return con.execute(f'SELECT count(*) FROM "{name}" WHERE day IN (SELECT unnest($days::DATE[]))',
                       {"days": sorted(days)}).fetchall()[0][0]


def _as_declared(frame, schema):
    """The Spark frame with its integers as wide as the expression declares (Spark's `size` is
    an INT where Ibis, and DuckDB, say BIGINT), so the lake's files carry the declared types."""
    from ibis.backends.sql.datatypes import PySparkType
    from pyspark.sql import functions
    return frame.select(*[functions.col(c).cast(PySparkType.to_string(t)).alias(c) if t.is_integer()
                          else functions.col(c) for c, t in schema.items()])


def _instants_in_utc(schema):
    """Spark's timestamps are instants: give the zone-less ones UTC."""
    return pa.schema([f.with_type(pa.timestamp("us", "UTC")) if pa.types.is_timestamp(f.type) and f.type.tz is None
                      else f for f in schema])


def spark_session(master: str = "local[2]", settings: Mapping[str, str] | None = None, app_name: str = "rag-loop"):
    """A Spark session for rag-loop: `local[N]`, a cluster master URL, or Spark Connect
    (`sc://host:15002`); pyspark is imported here only. On a cluster the executors' Python
    (PYSPARK_PYTHON) must have rag-loop installed."""
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.appName(app_name)
    if master.startswith("sc://"):
        builder = builder.remote(master)
        wanted = {**SPARK_SETTINGS, **(settings or {})}
    else:
        builder = builder.master(master)
        local = master.startswith("local")
        wanted = {**SPARK_SETTINGS, **(LOCAL_SETTINGS if local else {}), **(settings or {})}
        if local:  # Python workers on this interpreter: ingestion's tasks import rag_loop
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in wanted.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
