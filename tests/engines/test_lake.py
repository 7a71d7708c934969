"""The trace lake of a lake-backed deployment: `migrate` puts every row of the trace tables in
its UTC day of the Delta table, and a second one moves nothing; a stage on DuckDB is stored
where the deployment keeps it (and `migrate` alone moves it), and so is what DuckDB ingests; a
lake-backed deployment's stage is fingerprinted by its files in the Delta log."""

from datetime import UTC, date, datetime, timedelta

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.incremental import table_fingerprints
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.ddl import utc_day
from rag_loop.store.deployment import WrongHome, copy_small_tables, migrate, record_lake
from rag_loop.store.lake import Lake, create_lake_views, files_query
from rag_loop.store.tables import create_tables, relation_kind
from tests.helpers import trace_line

START = datetime(2026, 11, 1, tzinfo=UTC)
KEPT = ("raw_traces", "trace_chunks", "trace_feedback")
traces = st.lists(st.tuples(st.integers(0, 5 * 86_400_000_000 - 1),  # µs into five days
                            st.integers(0, 3), st.booleans(), st.text(max_size=30)), max_size=40)


def _world(path, rows) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(path))
    create_tables(con)
    for n, (offset, chunks, feedback, query) in enumerate(rows):
        trace_id, at = f"t{n}", START + timedelta(microseconds=offset)
        con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query, ingested_at, citations) "
                    "VALUES (?, ?, ?, ?, ?)", [trace_id, at, query, START, [query] if feedback else None])
        for rank in range(chunks):
            con.execute("INSERT INTO trace_chunks (trace_id, chunk_id, rank, score, day) VALUES (?, ?, ?, ?, ?)",
                        [trace_id, f"c{rank}", rank, rank / 3, at.date()])
        if feedback:
            con.execute("INSERT INTO trace_feedback VALUES (?, 'negative', NULL, ?, ?)", [trace_id, query, at.date()])
    return con


def _read(lake: Lake, table: str) -> str:
    return files_query(lake.files(table), lake.schema(table))


def _same_rows(con, lake, table, expected) -> bool:
    """Whether the lake's `table` holds exactly the rows of the database's `expected`."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW from_lake AS {_read(lake, table)}")
    columns = ", ".join(f'"{c}"' for c, *_ in con.execute(f"DESCRIBE {expected}").fetchall())
    one_way = con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM {expected} EXCEPT ALL "
                          f"SELECT {columns} FROM from_lake)").fetchall()[0][0]
    other_way = con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM from_lake EXCEPT ALL "
                            f"SELECT {columns} FROM {expected})").fetchall()[0][0]
    return one_way == other_way == 0


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=traces)
# no rows; and the edges the draws reached: the first and last µs of a day and of the five, no
# chunk or three, feedback or none, an empty and a quoting query
@example(rows=[])
@example(rows=[(0, 0, False, ""), (86_400_000_000 - 1, 3, True, "l'\"é\n"), (86_400_000_000, 1, True, ""),
               (5 * 86_400_000_000 - 1, 2, False, "x" * 30)])
def test_every_row_migrates_to_its_day_and_a_second_migrate_moves_nothing(tmp_path_factory, rows):
    root = tmp_path_factory.mktemp("lake")
    con = _world(root / "db.duckdb", rows)
    lake = Lake.of(root / "lake")
    for table in KEPT:
        con.execute(f"CREATE TABLE before_{table} AS SELECT * FROM {table}")
    migrate(con, lake, "lake")
    days = {(START + timedelta(microseconds=r[0])).date() for r in rows}
    for table in KEPT:
        assert _same_rows(con, lake, table, f"before_{table}"), table
    assert set(lake.days("raw_traces")) == days
    assert con.execute(f"SELECT count(*) FROM ({_read(lake, 'raw_traces')}) "
                       "WHERE day <> CAST(timezone('UTC', \"timestamp\") AS DATE)").fetchall() == [(0,)]
    versions = {table: lake.delta(table).version() for table in KEPT}
    assert migrate(con, lake, "lake") == {}
    assert {table: lake.delta(table).version() for table in KEPT} == versions  # no commit at all


def test_a_quote_in_the_path_is_no_sql(tmp_path):
    con = _world(tmp_path / "db.duckdb", [(0, 1, True, "a"), (86_400_000_000, 1, False, "b")])
    for table in ("raw_traces", "trace_chunks"):
        con.execute(f"CREATE TABLE before_{table} AS SELECT * FROM {table}")
    lake = Lake.of(tmp_path / "o'brien" / "lake")
    assert migrate(con, lake, "lake")["raw_traces"] == 2
    assert _same_rows(con, lake, "raw_traces", "before_raw_traces")
    assert _same_rows(con, lake, "trace_chunks", "before_trace_chunks")
    assert copy_small_tables(con, lake) == {"documents": 0}


def test_a_stage_on_duckdb_is_stored_where_the_deployment_keeps_it_and_never_moved(tmp_path):
    """Embedded: the database's table. Lake-backed: the lake's Delta table, the database holding
    a view of it; a whole run and a day's run alike. A table in the other home is refused, not
    moved: `migrate` moves it, both ways, and a second migrate moves nothing."""
    with _world(tmp_path / "w.duckdb", [(0, 2, True, "a"), (86_400_000_000, 1, False, "b")]) as con:
        compute_signals(con, SignalSettings(), DuckDBEngine())
        embedded = con.execute("SELECT * FROM trace_signals ORDER BY trace_id").fetchall()
        lake = Lake.of(tmp_path / "lake")
        with pytest.raises(WrongHome, match="migrate --to lake"):
            compute_signals(con, SignalSettings(), DuckDBEngine(lake))
        assert migrate(con, lake, "lake")["trace_signals"] == 2
        assert migrate(con, lake, "lake") == {}  # all there already
        assert relation_kind(con, "trace_signals") == "view" and lake.days("trace_signals") == \
            [date(2026, 11, 1), date(2026, 11, 2)]
        compute_signals(con, SignalSettings(), DuckDBEngine(lake))
        compute_signals(con, SignalSettings(), DuckDBEngine(lake), days=[date(2026, 11, 2)])
        assert relation_kind(con, "trace_signals") == "view"
        assert con.execute("SELECT * FROM trace_signals ORDER BY trace_id").fetchall() == embedded
        with pytest.raises(WrongHome, match="migrate --to embedded"):
            compute_signals(con, SignalSettings(), DuckDBEngine())
        (tmp_path / "traces").mkdir()  # ingestion into the lake, on DuckDB
        (tmp_path / "traces" / "c.jsonl").write_text(trace_line("c", timestamp="2026-11-03T08:00:00Z") + "\n")
        assert DuckDBEngine(lake).ingest(con, tmp_path / "traces").total().ingested == 1
        assert relation_kind(con, "raw_traces") == "view" and date(2026, 11, 3) in lake.days("raw_traces")
        assert migrate(con, lake, "embedded") == {"raw_traces": 3, "trace_chunks": 3, "trace_spans": 0,
                                                  "trace_feedback": 1, "otlp_spans": 0, "otlp_traces": 0,
                                                  "trace_signals": 2}
        assert migrate(con, lake, "embedded") == {}
        assert relation_kind(con, "raw_traces") == relation_kind(con, "trace_signals") == "table"
        assert con.execute("SELECT * FROM trace_signals ORDER BY trace_id").fetchall() == embedded
        compute_signals(con, SignalSettings(), DuckDBEngine(), days=[date(2026, 11, 1)])
        assert con.execute("SELECT * FROM trace_signals ORDER BY trace_id").fetchall() == embedded


def test_a_lake_backed_stage_is_fingerprinted_by_its_files_without_reading_them(tmp_path):
    """In a database that records a lake, a trace-sized table (a view of the lake's, as a stage
    leaves it) gets per-day fingerprints from the Delta log: a rewritten day alone changes, and
    no data file is opened. The same view in a database that records no lake is hashed as a
    table is: the deployment, not the view, says where the rows live."""
    with _world(tmp_path / "w.duckdb", [(0, 1, False, "a"), (86_400_000_000, 1, False, "b")]) as con:
        lake = Lake.of(tmp_path / "o'brien" / "lake")
        con.execute(f"CREATE TABLE trace_signals AS SELECT trace_id, {utc_day()} AS day FROM raw_traces")
        lake.write("trace_signals", con.sql("SELECT * FROM trace_signals").to_arrow_table())
        hashed = table_fingerprints(con, "trace_signals")
        con.execute("DROP TABLE trace_signals")
        create_lake_views(con, lake, {"trace_signals": ["trace_id", "day"]})
        assert table_fingerprints(con, "trace_signals") == hashed  # no lake recorded: read and hashed
        record_lake(con, lake)
        before = table_fingerprints(con, "trace_signals")
        assert set(before) == {date(2026, 11, 1), date(2026, 11, 2)} and before != hashed
        lake.write("trace_signals", con.sql("SELECT 'c' AS trace_id, DATE '2026-11-02' AS day").to_arrow_table(),
                   days=[date(2026, 11, 2)])
        after = table_fingerprints(con, "trace_signals")
        assert after[date(2026, 11, 1)] == before[date(2026, 11, 1)]
        assert after[date(2026, 11, 2)] != before[date(2026, 11, 2)]
        for path in lake.files("trace_signals"):
            with open(path, "wb") as garbage:
                garbage.write(b"not a parquet file")
        assert set(table_fingerprints(con, "trace_signals")) == set(before)
