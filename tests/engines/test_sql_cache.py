"""The DuckDB engine's SQL kept across processes (rag_loop.engines.sql_cache): a fresh process
compiles none of a stage it already compiled for the same shape, and anything the SQL depends
on (an input's schema, the settings' shape, rag_loop's code) gives a new compile; an entry that
cannot be read is ignored."""

from datetime import date
from pathlib import Path
from unittest.mock import patch

import duckdb
import pytest

from rag_loop.engines import sql_cache
from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.functions import day_range
from rag_loop.engines.literals import LEAST_SLOTS, same_sql, to_placeholders
from rag_loop.selection import sampling_expressions as sampling
from rag_loop.store.tables import create_tables

INPUTS = ("raw_traces",)
BUILD = sampling.novelty_sample_expression  # cheap to compile, its days placed, `per_group` its shape


@pytest.fixture
def con(tmp_path):
    connection = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(connection)
    yield connection
    connection.close()


@pytest.fixture
def compiles(tmp_path, monkeypatch):
    """The settings the engine compiled since the last fresh process (`fresh`), with the cache
    in tmp_path."""
    monkeypatch.setenv(sql_cache.VARIABLE, str(tmp_path / "cache"))
    compiled, compile = [], DuckDBEngine._compile

    def recorded(self, con, inputs, build, settings) -> str:
        compiled.append(settings)
        return compile(self, con, inputs, build, settings)
    with patch.object(DuckDBEngine, "_compile", recorded), fresh(compiled):
        yield compiled


def fresh(compiled: list | None = None):
    """What a new process starts with: no SQL in memory, no stage checked, nothing compiled."""
    if compiled is not None:
        compiled.clear()
    return patch.multiple(DuckDBEngine, _compiled={}, _movable={})


def sql(con, settings) -> str:
    return DuckDBEngine()._sql(con, "trace_novelty", INPUTS, BUILD, settings)


def direct(con, settings) -> str:
    with patch.dict("os.environ", {sql_cache.VARIABLE: ""}), fresh():
        return sql(con, settings)


def test_a_fresh_process_compiles_nothing_for_a_stage_shape_compiled_before(con, compiles):
    first = sql(con, sampling.SampleDays(40, (date(2026, 11, 2),)))
    assert len(compiles) == 2  # the canonical settings, and as given for its check
    with fresh(compiles), patch.object(sql_cache.os, "utime", side_effect=PermissionError):  # read-only: still read
        later = sampling.SampleDays(40, (date(2025, 3, 28), date(2025, 3, 30), date(2025, 4, 20)))  # other days
        got = sql(con, later)
        assert compiles == []  # the same shape: a day list of another count and spacing
    assert same_sql(got, direct(con, later)) and not same_sql(got, first)


def test_a_changed_schema_or_setting_shape_compiles_anew(con, compiles):
    settings = sampling.SampleDays(40, (date(2026, 11, 2),))
    sql(con, settings)
    with fresh(compiles):
        other = sampling.SampleDays(41, settings.days)  # another shape: its number is not placed
        got = sql(con, other)
        assert compiles == [to_placeholders(other)[0]]  # its check passed in the first process: not again
        assert same_sql(got, direct(con, other))
    with fresh(compiles):
        longer = sampling.SampleDays(40, tuple(day_range(date(2026, 10, 1), date(2026, 10, LEAST_SLOTS + 1))))
        got = sql(con, longer)
        assert compiles == [to_placeholders(longer)[0]]  # more days than the slots of one
        assert same_sql(got, direct(con, longer))
    con.execute("ALTER TABLE raw_traces ADD COLUMN extra VARCHAR")
    with fresh(compiles):
        assert same_sql(sql(con, settings), direct(con, settings)) and compiles


def test_changed_code_compiles_anew(con, compiles, tmp_path):
    settings = sampling.SampleDays(40, (date(2026, 11, 2),))
    sql(con, settings)
    with fresh(compiles), patch.object(sql_cache, "code_fingerprint", lambda: "another version"):
        sql(con, settings)
        assert compiles
    package = tmp_path / "package"
    (package / "inner").mkdir(parents=True)
    (package / "inner" / "stage.py").write_text("x = 1\n")
    before = sql_cache.fingerprint(package)
    (package / "inner" / "stage.py").write_text("x = 2\n")
    changed = sql_cache.fingerprint(package)
    (package / "more.py").write_text("")
    assert len({before, changed, sql_cache.fingerprint(package)}) == 3


@pytest.mark.parametrize("damage", ["truncated", "another key", "not json"])
def test_an_entry_that_cannot_be_read_is_compiled_anew_and_rewritten(con, compiles, tmp_path, damage):
    settings = sampling.SampleDays(40, (date(2026, 11, 2),))
    sql(con, settings)
    [entry] = [e for e in (tmp_path / "cache").glob("*.json") if "trace_novelty" in e.read_text()]  # not the check's
    text = entry.read_text()
    entry.write_text({"truncated": text[:len(text) // 2], "not json": "\x00garbage",
                      "another key": text.replace("trace_novelty", "other_stage")}[damage])
    with fresh(compiles):
        assert same_sql(sql(con, settings), direct(con, settings)) and compiles
    with fresh(compiles):
        sql(con, settings)
        assert compiles == []  # rewritten whole


def test_a_stage_that_failed_its_check_or_a_folder_that_cannot_be_written_keeps_nothing(con, compiles, tmp_path):
    settings = sampling.SampleDays(40, (date(2026, 11, 2),))
    with patch.object(DuckDBEngine, "_moves_back", return_value=False):
        assert same_sql(sql(con, settings), direct(con, settings))
        assert not (tmp_path / "cache").exists()
        with fresh(compiles):  # nor is its failed check kept: checked again
            sql(con, settings)
            assert len(compiles) == 2  # canonical, then as given (the check itself is patched)
    (tmp_path / "file").write_text("")
    with fresh(compiles), patch.dict("os.environ", {sql_cache.VARIABLE: str(tmp_path / "file" / "cache")}):
        assert same_sql(sql(con, settings), direct(con, settings))


def test_only_what_the_key_sees_is_kept():
    """A build or settings the key cannot describe whole get no entry; the folder follows the
    environment."""
    settings = sampling.SampleDays(40, None)

    def local(tables, wanted, fn):
        return BUILD(tables, wanted, fn)
    assert sql_cache.stage_key(DuckDBEngine, "s", BUILD, settings, ()) is not None
    assert sql_cache.stage_key(DuckDBEngine, "s", local, settings, ()) is None  # not rag_loop's
    assert sql_cache.stage_key(DuckDBEngine, "s", BUILD, object(), ()) is None  # an address
    assert sql_cache.stage_key(type("Mine", (DuckDBEngine,), {}), "s", BUILD, settings, ()) is None
    assert sql_cache.cache_folder({sql_cache.VARIABLE: ""}) is None
    assert sql_cache.cache_folder({"XDG_CACHE_HOME": "/x"}) == Path("/x/rag-loop/sql")
