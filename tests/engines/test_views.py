"""A stage of a lake-backed deployment switched between engines in any order keeps a whole run's
rows, always in the lake (the database holding a view of its files). The Spark engine's own lake and view code
runs here with DuckDB in place of Spark's executors (`LakeOnDuckDB`), so this needs no Java;
tests/engines/test_spark.py runs the same switches on real Spark."""

from dataclasses import dataclass, field
from datetime import date

import duckdb
import ibis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.engines.engine import DuckDBEngine, SparkEngine
from rag_loop.engines.functions import DUCKDB, Functions
from rag_loop.engines.incremental import table_fingerprints
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.deployment import migrate
from rag_loop.store.files import write_parquet
from rag_loop.store.lake import Lake
from rag_loop.store.tables import relation_kind
from tests.engines.test_lake import _world

DAYS = [date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 3)]
ROWS = [(d * 86_400_000_000 + n * 3_600_000_000, n % 3, n % 2 == 0, f"query {d} {n}")
        for d in range(3) for n in range(4)]


@dataclass
class LakeOnDuckDB(SparkEngine):
    """SparkEngine's lake and view handling; its executors' work (the expression's rows, one
    file per day) done by DuckDB on the control database."""

    functions: Functions = field(default=DUCKDB, init=False)

    def __post_init__(self) -> None:
        self.lake = Lake.of(self.lake)
        self.con: duckdb.DuckDBPyConnection | None = None

    def inputs(self, con, names):
        self.con = con
        return DuckDBEngine().inputs(con, names)

    def _write_files(self, expression, staging) -> list:
        self.con.execute("SET lambda_syntax = 'ENABLE_SINGLE_ARROW'")
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE _rows AS {ibis.to_sql(expression, dialect='duckdb')}")
        written = [d for (d,) in self.con.execute("SELECT DISTINCT day FROM _rows ORDER BY 1").fetchall()]
        for day in written:
            write_parquet(self.con, "SELECT * EXCLUDE (day) FROM _rows WHERE day = ?",
                          staging / f"day={day.isoformat()}" / "part-0.parquet", [day])
        return sorted(staging.glob("day=*/*.parquet"))


def _rows(con) -> list[tuple]:
    return con.execute("SELECT * EXCLUDE (day), day FROM trace_signals ORDER BY trace_id").fetchall()


runs = st.lists(st.tuples(st.booleans(), st.none() | st.sets(st.sampled_from(DAYS), min_size=1)),
                min_size=1, max_size=4)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs=runs)
# the shapes the draws covered, kept whatever they draw: each engine after the other, whole after
# daily and daily after whole, one day and several
@example(runs=[(True, None), (False, {DAYS[1]}), (True, {DAYS[0], DAYS[2]}), (False, None)])
@example(runs=[(False, set(DAYS)), (True, {DAYS[2]}), (True, None)])
def test_any_order_of_engines_whole_or_daily_keeps_a_whole_runs_rows(tmp_path_factory, runs):
    root = tmp_path_factory.mktemp("views")
    with _world(root / "w.duckdb", ROWS) as con:
        lake = Lake.of(root / "lake")
        compute_signals(con, SignalSettings())
        expected = _rows(con)
        migrate(con, lake, "lake")
        for on_spark, days in runs:
            engine = LakeOnDuckDB(None, lake) if on_spark else DuckDBEngine(lake)
            compute_signals(con, SignalSettings(), engine, days=sorted(days) if days else None)
            assert _rows(con) == expected
            assert relation_kind(con, "trace_signals") == "view"  # the rows are only in the lake, whole
            assert lake.days("trace_signals") == DAYS
            assert table_fingerprints(con, "trace_signals") == lake.day_fingerprints("trace_signals")
