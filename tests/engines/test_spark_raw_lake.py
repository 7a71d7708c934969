"""A lake-backed deployment on Spark: its ingestion is the lake's on DuckDB
(rag_loop.ingest.lake, `SparkEngine.ingest`), with the same rows as an embedded deployment; a
lake from before a column takes it in the next run, and a stage on Spark reads the older files
and the newer (`trace_signals` as on DuckDB)."""

import shutil

import duckdb

from rag_loop.engines.engine import SparkEngine
from rag_loop.ingest import ingest_directory
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.lake import Lake, create_lake_views
from tests.engines.conftest import needs_spark
from tests.engines.test_spark import assert_same_rows
from tests.store.test_lake_ingest import NOW, small_folder, tables

pytestmark = needs_spark


def test_a_lake_from_before_a_column_takes_it_in_the_next_run(session, tmp_path):
    """The lake's raw_traces table (its schema and files) and view as a rag-loop from before
    `retrieval_unreadable` left them: the Spark engine's next ingestion adds the column to the
    table and stores its new traces with it, and the view has it again (NULL in the older
    files), as an embedded deployment's table does."""
    directory, lake = tmp_path / "traces", tmp_path / "lake"
    engine = SparkEngine(session, lake)
    with duckdb.connect() as embedded, duckdb.connect(str(tmp_path / "older.duckdb")) as older:
        small_folder(directory, "a")
        assert engine.ingest(older, directory, now=NOW).files == ingest_directory(embedded, directory, now=NOW).files
        assert tables(older) == tables(embedded)
        columns = [c for c, *_ in older.execute("DESCRIBE raw_traces").fetchall() if c != "retrieval_unreadable"]
        rows = Lake.of(lake).dataset("raw_traces").to_table().drop_columns(["retrieval_unreadable"])
        shutil.rmtree(lake / "raw_traces")
        Lake.of(lake).write("raw_traces", rows)
        assert "retrieval_unreadable" not in Lake.of(lake).schema("raw_traces").names
        create_lake_views(older, Lake.of(lake), {"raw_traces": columns})
        assert "retrieval_unreadable" not in {c for c, *_ in older.execute("DESCRIBE raw_traces").fetchall()}
        small_folder(directory, "b")
        assert engine.ingest(older, directory, now=NOW).files == ingest_directory(embedded, directory, now=NOW).files
        assert tables(older) == tables(embedded)
        assert older.execute("SELECT count(*) FROM raw_traces WHERE retrieval_unreadable IS NULL").fetchall() == [(3,)]
        compute_signals(embedded, SignalSettings())  # a stage on Spark reads the older files and the newer
        compute_signals(older, SignalSettings(), engine)
        assert_same_rows(older.execute("SELECT * FROM trace_signals").df(),
                         embedded.execute("SELECT * FROM trace_signals").df(), "trace_id")


def test_an_empty_control_table_is_a_frame_with_its_columns(session, tmp_path):
    """A small table of the control database with no rows yet (e.g. no release, no label) is
    read by a Spark stage as its columns and no rows, lists and structs included (pyarrow
    cannot rebuild such a column from no chunks at all)."""
    with duckdb.connect() as con:
        con.execute("CREATE TABLE labels_seen (trace_id VARCHAR, labelled_at TIMESTAMPTZ, tags VARCHAR[], "
                    "grade STRUCT(metric VARCHAR, passed BOOLEAN))")
        frame = SparkEngine(session, tmp_path / "lake")._frame(con, "labels_seen")
        assert frame.columns == ["trace_id", "labelled_at", "tags", "grade"] and frame.count() == 0
