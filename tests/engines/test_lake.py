"""The trace lake: every row of the trace tables lands in its UTC day's file, an unchanged day
is not rewritten, a failed export leaves each day whole (old or new) and is redone, a stage
stored on DuckDB retires its Spark copy, a Spark stage's view is fingerprinted by its files,
and a day of several files (Spark ingestion's) is read and fingerprinted whole."""

from datetime import UTC, date, datetime, timedelta

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.engines import lake as lake_module
from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.incremental import table_fingerprints
from rag_loop.engines.lake import (
    DAY_OF,
    day_file,
    day_file_fingerprints,
    day_files,
    export_lake,
    export_table,
    lake_days,
    lake_query,
    lake_view_folder,
    mark_lake_view,
    read_lake,
    write_parquet,
)
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.ddl import utc_day
from rag_loop.store.tables import create_tables

START = datetime(2026, 11, 1, tzinfo=UTC)
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


def _same_rows(con, lake, table) -> bool:
    read_lake(con, lake, table).create_view("from_lake", replace=True)
    columns = ", ".join(f'"{c}"' for c, *_ in con.execute(f"DESCRIBE {table}").fetchall())
    one_way = con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM {table} EXCEPT ALL "
                          f"SELECT {columns} FROM from_lake)").fetchall()[0][0]
    other_way = con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM from_lake EXCEPT ALL "
                            f"SELECT {columns} FROM {table})").fetchall()[0][0]
    return one_way == other_way == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=traces)
def test_every_row_is_in_its_days_file_and_a_second_export_writes_nothing(tmp_path_factory, rows):
    root = tmp_path_factory.mktemp("lake")
    con = _world(root / "db.duckdb", rows)
    lake = root / "lake"
    first = export_lake(con, lake)
    days = {(START + timedelta(microseconds=r[0])).date() for r in rows}
    assert first == {"days_written": len(days), "days_unchanged": 0}
    for table in (*DAY_OF, "documents"):
        assert _same_rows(con, lake, table), table
    assert set(lake_days(lake, "raw_traces")) == days
    read_lake(con, lake, "raw_traces").create_view("lake_traces", replace=True)
    assert con.execute("SELECT count(*) FROM lake_traces WHERE day <> CAST(timezone('UTC', \"timestamp\") AS DATE)"
                       ).fetchall() == [(0,)]
    assert export_lake(con, lake) == {"days_written": 0, "days_unchanged": len(days)}
    assert not list(lake.rglob(".*.tmp"))  # nothing staged is left behind


def test_a_changed_day_alone_is_rewritten(tmp_path):
    con = _world(tmp_path / "db.duckdb", [(0, 1, True, "a"), (86_400_000_000, 2, False, "b")])
    lake = tmp_path / "lake"
    export_lake(con, lake)
    untouched = day_file(lake, "raw_traces", date(2026, 11, 1)).stat().st_mtime_ns
    con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query, ingested_at) "
                "VALUES ('late', '2026-11-02 10:00:00+00', 'c', '2026-11-03 00:00:00+00')")
    assert export_lake(con, lake) == {"days_written": 1, "days_unchanged": 1}
    assert day_file(lake, "raw_traces", date(2026, 11, 1)).stat().st_mtime_ns == untouched
    assert _same_rows(con, lake, "raw_traces")


def test_an_export_that_fails_half_way_leaves_whole_days_and_is_redone(tmp_path, monkeypatch):
    con = _world(tmp_path / "db.duckdb", [(0, 1, True, "a"), (86_400_000_000, 1, True, "b")])
    lake = tmp_path / "lake"
    export_lake(con, lake)
    con.execute("UPDATE raw_traces SET original_query = original_query || '!', ingested_at = now()")
    real_replace, calls = lake_module.os.replace, []

    def failing(source, target):
        calls.append(target)
        if len(calls) == 2:
            raise OSError("disk full")
        real_replace(source, target)
    monkeypatch.setattr(lake_module.os, "replace", failing)
    with pytest.raises(OSError):
        export_lake(con, lake)
    monkeypatch.setattr(lake_module.os, "replace", real_replace)
    queries = sorted(q for (q,) in read_lake(con, lake, "raw_traces").select("original_query").fetchall())
    assert queries in (["a!", "b"], ["a", "b!"])  # one day new, the other still old: each whole
    assert not list(lake.rglob(".*.tmp"))
    assert export_lake(con, lake)["days_written"] == 2  # the fingerprints were not saved: all redone
    assert _same_rows(con, lake, "raw_traces")


def test_an_unreadable_fingerprint_file_rewrites_every_day_and_a_quote_in_the_path_is_no_sql(tmp_path):
    con = _world(tmp_path / "db.duckdb", [(0, 1, True, "a"), (86_400_000_000, 1, False, "b")])
    lake = tmp_path / "o'brien" / "lake"
    assert export_lake(con, lake)["days_written"] == 2
    (lake / "_days.json").write_text("{not json")
    assert export_lake(con, lake) == {"days_written": 2, "days_unchanged": 0}
    assert _same_rows(con, lake, "raw_traces") and _same_rows(con, lake, "trace_chunks")


def test_a_stage_stored_on_duckdb_removes_its_older_spark_copy_from_the_lake(tmp_path):
    """Else a later Spark run would read the lake's older rows instead of the database's."""
    with _world(tmp_path / "w.duckdb", [(0, 2, True, "leave days")]) as con:
        lake = tmp_path / "lake"
        export_lake(con, lake)
        older = day_file(lake, "trace_signals", date(2026, 11, 1))  # as the Spark engine writes it
        older.parent.mkdir(parents=True)
        older.write_bytes(b"an earlier run's rows")
        compute_signals(con, SignalSettings(), DuckDBEngine(lake))
        assert not (lake / "trace_signals").exists()
        assert lake_days(lake, "raw_traces") == [date(2026, 11, 1)]  # the lake's own tables stay
        assert con.execute("SELECT count(*) FROM trace_signals").fetchall() == [(1,)]


def test_a_spark_stages_view_is_fingerprinted_by_its_day_files_without_reading_them(tmp_path):
    """A view of the lake's day files (as the Spark engine leaves a stage) gets per-day
    fingerprints from the files themselves: a rewritten day alone changes, and a file that
    could not even be read is not opened. An unmarked view is hashed as a table is."""
    with _world(tmp_path / "w.duckdb", [(0, 1, False, "a"), (86_400_000_000, 1, False, "b")]) as con:
        lake = tmp_path / "o'brien" / "lake"
        con.execute(f"CREATE TABLE stage AS SELECT trace_id, {utc_day()} AS day FROM raw_traces")
        export_table(con, lake, "stage")
        hashed = table_fingerprints(con, "stage")
        con.execute("DROP TABLE stage")
        con.execute(f"CREATE VIEW stage AS {lake_query(lake, 'stage')}")
        assert table_fingerprints(con, "stage") == hashed  # not marked: read and hashed
        mark_lake_view(con, '"stage"', lake / "stage")
        assert lake_view_folder(con, "stage") == lake / "stage"
        before = table_fingerprints(con, "stage")
        assert set(before) == {date(2026, 11, 1), date(2026, 11, 2)} and before != hashed
        write_parquet(con, "SELECT 'c' AS trace_id", day_file(lake, "stage", date(2026, 11, 2)))
        after = table_fingerprints(con, "stage")
        assert after[date(2026, 11, 1)] == before[date(2026, 11, 1)]
        assert after[date(2026, 11, 2)] != before[date(2026, 11, 2)]
        day_file(lake, "stage", date(2026, 11, 1)).write_bytes(b"not a parquet file")
        assert set(table_fingerprints(con, "stage")) == set(before)


def test_a_day_of_several_files_is_read_whole_fingerprinted_by_each_and_exported_as_one(tmp_path):
    con = _world(tmp_path / "db.duckdb", [(0, 1, True, "a"), (3_600_000_000, 1, False, "b")])
    lake = tmp_path / "lake"
    export_lake(con, lake)
    day, folder = date(2026, 11, 1), lake.resolve() / "raw_traces"
    before = day_file_fingerprints(folder)
    first = day_file(lake, "raw_traces", day)  # split in two, as Spark ingestion leaves a day
    rows = f"SELECT * FROM read_parquet('{first}', hive_partitioning = false)"
    write_parquet(con, f"{rows} WHERE trace_id = 't1'", first.with_name("part-1234.parquet"))
    write_parquet(con, f"{rows} WHERE trace_id = 't0'", first)
    assert len(day_files(lake, "raw_traces", day)) == 2 and _same_rows(con, lake, "raw_traces")
    assert day_file_fingerprints(folder)[day] != before[day]
    assert export_lake(con, lake)["days_written"] == 1  # its rows did not change: its files did
    assert day_files(lake, "raw_traces", day) == [first] and _same_rows(con, lake, "raw_traces")


def test_a_column_added_to_a_table_rewrites_every_day_and_older_files_read_as_null(tmp_path):
    """A newer rag-loop adds a column: the next export writes every day again with it (the days'
    rows did not change, their columns did). A day file from before it, as Spark ingestion
    leaves them beside newer ones, reads as NULL in that column, not as a missing column."""
    con = _world(tmp_path / "db.duckdb", [(0, 1, True, "a"), (86_400_000_000, 2, False, "b")])
    lake = tmp_path / "lake"
    export_lake(con, lake)
    con.execute("ALTER TABLE raw_traces ADD COLUMN added_later VARCHAR DEFAULT 'new'")
    assert export_lake(con, lake) == {"days_written": 2, "days_unchanged": 0}
    assert export_lake(con, lake) == {"days_written": 0, "days_unchanged": 2}
    assert _same_rows(con, lake, "raw_traces")
    older = day_file(lake, "raw_traces", date(2026, 11, 1))  # one day's file without the column
    write_parquet(con, f"SELECT * EXCLUDE (added_later) FROM read_parquet('{older}', hive_partitioning = false)",
                  older)
    assert con.execute(f"SELECT day, added_later FROM ({lake_query(lake, 'raw_traces')}) ORDER BY day").fetchall() \
        == [(date(2026, 11, 1), None), (date(2026, 11, 2), "new")]
