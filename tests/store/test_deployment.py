"""`rag-loop lake migrate`: the trace-sized tables move between the DuckDB file and the lake only
when asked, both ways, idempotently, with every row; a run refuses a table in the other home."""

from datetime import date

import duckdb
import pytest
from click.testing import CliRunner

from rag_loop.cli import main
from rag_loop.store.deployment import TRACE_SIZED, WrongHome, require_home
from rag_loop.store.lake import Lake
from rag_loop.store.tables import relation_kind
from tests.engines.test_lake import _world


def _snapshot(con) -> dict[str, list]:
    return {t: con.execute(f'SELECT * FROM "{t}" ORDER BY ALL').fetchall() for t in TRACE_SIZED
            if relation_kind(con, t)}


def test_migrate_moves_every_row_both_ways_and_a_second_run_moves_nothing(tmp_path):
    database, lake = tmp_path / "w.duckdb", Lake.of(tmp_path / "o'brien lake")
    with _world(database, [(0, 2, True, "a'b"), (86_400_000_000, 1, False, "c")]) as con:
        con.execute("CREATE TABLE trace_signals AS SELECT trace_id, CAST(timezone('UTC', \"timestamp\") AS DATE) "
                    "AS day FROM raw_traces")
        before = _snapshot(con)
    runner = CliRunner()
    first = runner.invoke(main, ["lake", "migrate", "--to", "lake", "--lake", lake.root, "--db", str(database)])
    assert first.exit_code == 0, first.output
    assert "raw_traces: 2 rows moved to the lake" in first.output
    again = runner.invoke(main, ["lake", "migrate", "--to", "lake", "--db", str(database)],
                          env={"RAG_LOOP_LAKE": lake.root})
    assert "nothing to move" in again.output
    with duckdb.connect(str(database)) as con:
        assert all(relation_kind(con, t) == "view" for t in before)
        assert _snapshot(con) == before
        assert lake.days("raw_traces") == [date(2026, 11, 1), date(2026, 11, 2)]
        with pytest.raises(WrongHome, match="migrate --to embedded"):
            require_home(con, None, "raw_traces")
        with pytest.raises(WrongHome, match="another trace lake"):
            require_home(con, Lake.of(tmp_path / "elsewhere"), "raw_traces")
    back = runner.invoke(main, ["lake", "migrate", "--to", "embedded", "--lake", lake.root, "--db", str(database)])
    assert back.exit_code == 0 and "rows moved to the DuckDB file" in back.output
    with duckdb.connect(str(database)) as con:
        assert all(relation_kind(con, t) == "table" for t in before)
        assert _snapshot(con) == before
        with pytest.raises(WrongHome, match="migrate --to lake"):
            require_home(con, lake, "raw_traces")
        require_home(con, None, "raw_traces")
    missing = runner.invoke(main, ["lake", "migrate", "--to", "lake", "--lake", lake.root,
                                   "--db", str(tmp_path / "none.duckdb")])
    assert missing.exit_code != 0 and "no database" in missing.output
