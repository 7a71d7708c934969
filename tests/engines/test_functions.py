"""The registry's DuckDB spellings (tests/engines/test_spark.py: Spark's give the same values)."""

import random
import unicodedata
from datetime import UTC, datetime, timedelta

import duckdb
import ibis
import pandas as pd

from rag_loop.engines.engine import DuckDBEngine
from rag_loop.engines.functions import ACCENTED, BASES, DUCKDB

# what production queries hold: Vietnamese, other accented scripts, marks typed apart, symbols
ALPHABET = (ACCENTED + "abcdđĐ xyzXYZ 0123456789 ?!.,;:'\"-_/\\@#%&*()[]{}<>\t\n"
            + "漢字かな한국어 🙂👍🏽 \u200b\u202e\u00a0ﬁ")


def _texts(count: int = 400, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(["", " "]) + "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 24)))
            for _ in range(count)] + [unicodedata.normalize("NFD", "Hồ Chí Minh Đà Nẵng Ñoño Ελληνικά Ёлка")]


def _instants(count: int = 200, seed: int = 7) -> list[datetime]:
    rng = random.Random(seed)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    return [start + timedelta(microseconds=rng.randrange(0, 14 * 86_400_000_000)) for _ in range(count)] + [
        datetime(2026, 11, 1, 23, 59, 59, 999_999, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)]


def _frame() -> pd.DataFrame:
    texts, instants = _texts(), _instants()
    rows = max(len(texts), len(instants))
    return pd.DataFrame({"i": range(rows), "text": (texts * 2)[:rows],
                         "instant": pd.to_datetime((instants * 3)[:rows], utc=True)})


def _expression(table, fn):
    return table.select("i", folded=fn.fold_accents(table.text.lower()), us=fn.epoch_us(table["instant"]),
                        day=fn.utc_day(table["instant"]), draw=fn.uniform(fn.md5(table.text), 1))


def _folded(text: str) -> str:
    """Lower-cased, every combining mark dropped (what both engines must give)."""
    marks = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", marks)


def _on_duckdb(frame: pd.DataFrame) -> pd.DataFrame:
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE functions_input AS SELECT i, text, instant FROM frame")
    table = DuckDBEngine().inputs(con, ["functions_input"])["functions_input"]
    return ibis.duckdb.from_connection(con).execute(_expression(table, DUCKDB)).sort_values("i").reset_index(drop=True)


def test_the_spark_accent_table_is_what_duckdb_strips():
    assert len(ACCENTED) > len(BASES) > 700  # the Latin, Greek, Cyrillic letters; the marks are deleted
    with duckdb.connect() as con:
        stripped = con.execute("SELECT strip_accents(?)", [ACCENTED[:len(BASES)]]).fetchall()[0][0]
    assert stripped == BASES


def test_duckdb_folds_accents_measures_microseconds_and_draws_uniforms():
    frame = _frame()
    got = _on_duckdb(frame)
    assert got.folded.tolist() == [_folded(t) for t in frame.text]
    last = frame.index[frame["instant"] == pd.Timestamp("2026-11-01 23:59:59.999999", tz="UTC")][0]
    assert got.us[last] % 1_000_000 == 999_999 and str(got.day[last].date()) == "2026-11-01"
    assert got.draw.between(0, 1, inclusive="left").all() and got.draw.nunique() > 100
