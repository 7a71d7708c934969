"""Replacing days of a table: idempotent, and a failure leaves the table as it was."""

from datetime import date

import duckdb
import pandas as pd
import pytest

from rag_loop.store.tables import replace_days

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
