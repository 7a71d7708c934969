"""Replacing days of a table: idempotent, and a failure leaves the table as it was; an older
database's child tables get their `day`."""

from datetime import date

import duckdb
import pandas as pd
import pytest

from rag_loop.engines.engine import DuckDBEngine
from rag_loop.store.ddl import ADDED_COLUMNS, INGESTION_DDL
from rag_loop.store.tables import create_tables, replace_days
from tests.helpers import misplaced_child_rows

DAYS = [date(2026, 11, 1), date(2026, 11, 2)]


def test_replacing_days_twice_gives_the_same_rows_and_a_failure_changes_nothing():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (day DATE, n BIGINT)")
    con.execute("INSERT INTO t VALUES ('2026-11-01', 1), ('2026-11-02', 2), ('2026-11-03', 3)")
    rows = pd.DataFrame({"day": pd.to_datetime(DAYS), "n": [10, 20]})
    for _ in range(2):
        replace_days(con, "t", DAYS, rows)
        assert con.execute("SELECT n FROM t ORDER BY day").fetchall() == [(10,), (20,), (3,)]
    with pytest.raises(duckdb.Error):  # a column the table does not have
        replace_days(con, "t", DAYS, rows.assign(unknown=1))
    assert con.execute("SELECT n FROM t ORDER BY day").fetchall() == [(10,), (20,), (3,)]
    replace_days(con, "t", DAYS[:1], rows.iloc[:0])  # the transaction was closed: this runs
    assert con.execute("SELECT n FROM t ORDER BY day").fetchall() == [(20,), (3,)]


def test_an_older_database_gets_its_child_rows_days_from_their_traces():
    """A database from before the child tables had `day`: a DuckDB stage reading one, or
    create_tables, gives each row its trace's UTC day and makes the column NOT NULL, as a new
    database has it; a row without a trace keeps the column nullable instead of failing."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Asia/Ho_Chi_Minh'")  # the day is UTC's, whatever the session's
    con.execute(INGESTION_DDL.replace(", day DATE NOT NULL", ""))
    assert "day" not in {c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'trace_chunks'").fetchall()}
    con.execute("""INSERT INTO raw_traces (trace_id, "timestamp", original_query) VALUES
                   ('a', '2026-11-01 23:30:00+00', 'q'), ('b', '2026-11-02 00:30:00+07', 'q')""")
    con.execute("INSERT INTO trace_chunks (trace_id, chunk_id) VALUES ('a', 'c1'), ('b', 'c2')")
    con.execute("INSERT INTO trace_feedback (trace_id, rating) VALUES ('a', 'negative'), ('orphan', 'positive')")
    chunk_days = DuckDBEngine().frame(con, ("trace_chunks",), lambda t, _, fn: t["trace_chunks"].select("day"), None)
    assert sorted(chunk_days["day"].dt.date) == [date(2026, 11, 1)] * 2  # a stage reading it first adds it
    create_tables(con)
    assert misplaced_child_rows(con) == [("trace_feedback", "orphan", None)]
    assert con.execute("SELECT trace_id, day FROM trace_chunks ORDER BY 1").fetchall() == [
        ("a", date(2026, 11, 1)), ("b", date(2026, 11, 1))]
    nullable = dict(con.execute("SELECT table_name, is_nullable FROM duckdb_columns() WHERE column_name = 'day' "
                                "AND table_name IN ('trace_chunks', 'trace_spans', 'trace_feedback')").fetchall())
    assert nullable == {"trace_chunks": False, "trace_spans": False, "trace_feedback": True}
    create_tables(con)  # again: nothing changes
    assert con.execute("SELECT count(*) FROM trace_chunks WHERE day IS NULL").fetchall() == [(0,)]



def _catalog(con) -> set[tuple]:
    return set(con.execute("SELECT table_name, column_name, data_type, is_nullable FROM duckdb_columns() "
                           "WHERE NOT internal AND schema_name = current_schema()").fetchall())


def test_a_database_from_before_a_table_or_column_gets_it():
    """create_tables' shortcut for an up-to-date database (one catalog query) still gives a
    database made before a table or a column was declared that table or column."""
    con = duckdb.connect()
    create_tables(con)
    new = _catalog(con)
    added = [(table, column.split()[0]) for table, columns in ADDED_COLUMNS.items() for column in columns]
    for table, column in added:
        con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        create_tables(con)
        assert _catalog(con) == new, (table, column)
    for table in sorted({t for t, *_ in new}):
        con.execute(f"DROP TABLE {table}")
        create_tables(con)
        assert _catalog(con) == new, table
