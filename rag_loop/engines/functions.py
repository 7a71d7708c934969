"""The few functions the portable stages need that DuckDB and Spark spell differently, one
registry per engine. A stage takes a `Functions` and builds one Ibis expression for both;
`tests/engines/test_functions.py` checks the two versions agree.

- `fold_accents`: lower-case words compared without accents (rephrase similarity). DuckDB has
  `strip_accents`; Spark has none, so it `translate`s every precomposed Latin, Greek and
  Cyrillic letter to its base letter and deletes combining marks (`ACCENTED`, `BASES`, built
  from Unicode's decompositions). Letters outside those blocks keep their accents on Spark.
- `epoch_us`: an instant in microseconds since the epoch (the 90 s rephrase window needs
  sub-second precision; Spark's `unix_seconds` drops it).
- `utc_day`: the UTC calendar day of an instant (the Spark session runs in UTC).
- `uniform`: a uniform draw in [0, 1) from 8 hex digits of an md5 (the sampling streams).
- `distinct`: a list's distinct values without NULLs (`list_distinct` / `array_distinct`).
- `reuse`: a part of the expression read several times, computed once (Spark: cached).

`bit_xor`, an aggregate both spell alike, is here too: Ibis compiles it for DuckDB only.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import ibis
import ibis.expr.types as ir

_BLOCKS = (range(0x00C0, 0x0250), range(0x0370, 0x0500), range(0x1E00, 0x2000))
_COMBINING = range(0x0300, 0x0370)


def _accent_table() -> tuple[str, str]:
    accented, bases = [], []
    for block in _BLOCKS:
        for code in block:
            letter = chr(code)
            decomposed = unicodedata.normalize("NFD", letter)
            base = unicodedata.normalize("NFC", "".join(c for c in decomposed if unicodedata.category(c) != "Mn"))
            if base != letter and len(base) == 1:
                accented.append(letter)
                bases.append(base)
    marks = "".join(chr(code) for code in _COMBINING)  # past the end of `bases`: deleted
    return "".join(accented) + marks, "".join(bases)


ACCENTED, BASES = _accent_table()


@ibis.udf.scalar.builtin(name="strip_accents")
def _strip_accents(text: str) -> str: ...


@ibis.udf.scalar.builtin(name="translate")
def _translate(text: str, source: str, target: str) -> str: ...


@ibis.udf.scalar.builtin(name="epoch_us")
def _duckdb_epoch_us(instant: ibis.dtype("timestamp('UTC')")) -> int: ...  # noqa: F821


@ibis.udf.scalar.builtin(name="unix_micros")
def _spark_epoch_us(instant: ibis.dtype("timestamp")) -> int: ...  # noqa: F821


@ibis.udf.scalar.builtin(name="timezone")
def _at_zone(zone: str, instant: ibis.dtype("timestamp('UTC')")) -> ibis.dtype("timestamp"): ...  # noqa: F821


@ibis.udf.scalar.builtin(name="to_date")
def _spark_to_date(instant: ibis.dtype("timestamp")) -> ibis.dtype("date"): ...  # noqa: F821


@ibis.udf.scalar.builtin(name="list_distinct")
def _list_distinct(values: ibis.dtype("array<string>")) -> ibis.dtype("array<string>"): ...  # noqa: F821


@ibis.udf.scalar.builtin(name="array_distinct")
def _array_distinct(values: ibis.dtype("array<string>")) -> ibis.dtype("array<string>"): ...  # noqa: F821


@ibis.udf.scalar.builtin(name="md5")
def _md5(text: str) -> str: ...


@ibis.udf.scalar.builtin(name="conv")
def _spark_conv(text: str, source_base: int, target_base: int) -> str: ...


@ibis.udf.agg.builtin(name="bit_xor")
def bit_xor(value: ibis.dtype("int64")) -> ibis.dtype("int64"): ...  # noqa: F821


def day_range(start: date, end: date) -> list[date]:
    """The days from `start` to `end`, both included."""
    return [start + timedelta(days=k) for k in range((end - start).days + 1)]


def on_days(fn: Functions, instant: ir.TimestampValue, days: Collection[date]) -> ir.BooleanValue:
    """`instant` falls on one of `days` (UTC). A range on the instant comes first: both engines
    skip the row groups (and Parquet files) outside it, so a day's run reads about that day,
    not the whole history."""
    start = datetime.combine(min(days), time(), tzinfo=UTC)
    end = datetime.combine(max(days) + timedelta(days=1), time(), tzinfo=UTC)
    return (instant >= start) & (instant < end) & fn.utc_day(instant).isin(sorted(days))


def double(value: float) -> ir.FloatingValue:
    """A DOUBLE literal: both engines read a bare `0.3` as a DECIMAL, whose arithmetic they
    size differently; a cast from its text is exact and the same on both."""
    return ibis.literal(repr(float(value))).cast("float64")


@dataclass(frozen=True)
class Functions:
    """One engine's spelling of the functions above."""

    engine: str
    fold_accents: Callable[[ir.StringValue], ir.StringValue]
    epoch_us: Callable[[ir.TimestampValue], ir.IntegerValue]
    utc_day: Callable[[ir.TimestampValue], ir.DateValue]
    hex_to_int: Callable[[ir.StringValue], ir.IntegerValue]
    # the distinct values of a list of strings, NULLs dropped (Ibis's own `unique` keeps a NULL
    # and spells it with the list three times over, which multiplies what feeds it)
    distinct: Callable[[ir.ArrayValue], ir.ArrayValue]
    # a table the expression reads several times: DuckDB computes such a CTE once by itself;
    # Spark inlines it and computes it again from the files at every reading, so the Spark
    # engine has it cached for the one query (`SparkEngine.reuse`)
    reuse: Callable[[ir.Table], ir.Table] = lambda table: table

    def md5(self, text: ir.StringValue) -> ir.StringValue:
        return _md5(text)

    def uniform(self, digest: ir.StringValue, position: int) -> ir.FloatingValue:
        """A uniform in [0, 1) from the `position`-th 8 hex digits of `digest`."""
        return self.hex_to_int(digest.substr(8 * position, 8)).cast("float64") / 4294967296.0


DUCKDB = Functions(
    engine="duckdb",
    fold_accents=_strip_accents,
    epoch_us=_duckdb_epoch_us,
    utc_day=lambda instant: _at_zone("UTC", instant).cast("date"),
    hex_to_int=lambda digits: (ibis.literal("0x") + digits).cast("uint64").cast("int64"),
    distinct=_list_distinct,
)

SPARK = Functions(
    engine="spark",
    fold_accents=lambda text: _translate(text, ACCENTED, BASES),
    epoch_us=_spark_epoch_us,
    utc_day=_spark_to_date,
    hex_to_int=lambda digits: _spark_conv(digits, 16, 10).cast("int64"),
    distinct=_array_distinct,
)
