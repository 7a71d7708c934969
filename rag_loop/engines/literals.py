"""One compiled SQL per stage shape, whatever its days and its numbers: a stage's settings with
their dates moved to a sentinel era (the same gaps between them) and, in settings that declare
them literals (`Literals`), their numbers and `Text`s replaced by placeholders, compiled once;
for each call the era's date literals are moved back and the placeholders replaced by the
values' own SQL spelling (`to_placeholders`, `Placed.back`).

The stages' expressions only compare dates, take them in ranges and cut instants to days, so
shifting every date of the settings by N days shifts exactly the SQL literals made from them
by N days. A number can steer the Python that builds an expression (a `ceil`, a branch), which
no placeholder would follow: only settings whose build turns their numbers into SQL literals
and nothing else say so (`Literals`). Building and compiling an Ibis expression takes
0.1–0.5 s; a drift day, a day-by-day run or a policy's new rates would otherwise pay it each time.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlglot.expressions as sge

SENTINEL = date(2400, 1, 1)
# Ibis 12's spelling of date and instant literals: DuckDB's (and Spark's dates), Spark's instants
_LITERAL = re.compile(r"\b(MAKE_DATE|MAKE_TIMESTAMPTZ|MAKE_TIMESTAMP)\((\d+), (\d+), (\d+)")
_ISO_INSTANT = re.compile(r"(CAST\(')(\d{4})-(\d\d)-(\d\d)(T[\d:.]+(?:[+-]\d\d:\d\d)?' AS TIMESTAMP)")
# a year of the sentinel era, not the digits after a decimal point (seconds 0.2477)
_SENTINEL_ERA = re.compile(r"(?<![\w.])2[3-9]\d\d\b")
_GENERATED_NAME = re.compile(r"\bibis_[a-z_]+_[a-z0-9]{26}\b")  # fresh on every compile (unnest)


def dates_in(value: Any) -> list[date]:
    """Every date and datetime in settings (dataclasses, tuples, lists, mappings)."""
    if isinstance(value, date):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [d for f in dataclasses.fields(value) for d in dates_in(getattr(value, f.name))]
    if isinstance(value, tuple | list):
        return [d for item in value for d in dates_in(item)]
    if isinstance(value, Mapping):
        return [d for item in value.values() for d in dates_in(item)]
    return []


def shifted(value: Any, days: int) -> Any:
    """`value` (settings: dataclasses, tuples, lists, mappings) with every date and datetime
    in it `days` days later; a part without a date is kept as it is."""
    if not dates_in(value):
        return value
    if isinstance(value, date):  # datetime too: the same time of day
        return value + timedelta(days=days)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: shifted(getattr(value, f.name), days)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, tuple | list):
        return type(value)(shifted(item, days) for item in value)
    if isinstance(value, Mapping):
        return type(value)({key: shifted(item, days) for key, item in value.items()})
    return value


def to_sentinel_era(settings: Any) -> tuple[Any, int]:
    """The settings with their earliest date on SENTINEL, and how many days they moved (0, and
    the settings themselves, when they hold no date, or an instant of a zone other than UTC:
    moved, its offset could change with daylight saving)."""
    found = dates_in(settings)
    if not found or any(isinstance(d, datetime) and d.tzinfo not in (None, UTC) for d in found):
        return settings, 0
    earliest = min(d.date() if isinstance(d, datetime) else d for d in found)
    days = (SENTINEL - earliest).days
    return shifted(settings, days), days


def from_sentinel_era(sql: str, days: int) -> str | None:
    """The SQL compiled from settings moved `days` days, with its date literals moved back; None
    when a number of the sentinel era is left that is not such a literal (compile directly)."""
    if days == 0:
        return sql

    def back(match: re.Match) -> str:
        if int(match[2]) < SENTINEL.year - 100:  # not made from the settings
            return match[0]
        moved = date(int(match[2]), int(match[3]), int(match[4])) - timedelta(days=days)
        return f"{match[1]}({moved.year}, {moved.month}, {moved.day}"

    def back_iso(match: re.Match) -> str:
        if int(match[2]) < SENTINEL.year - 100:
            return match[0]
        moved = date(int(match[2]), int(match[3]), int(match[4])) - timedelta(days=days)
        return f"{match[1]}{moved.isoformat()}{match[5]}"
    original = _ISO_INSTANT.sub(back_iso, _LITERAL.sub(back, sql))
    return None if _SENTINEL_ERA.search(original) else original


def same_sql(first: str, second: str) -> bool:
    """The two SQL texts say the same, up to the names Ibis makes up afresh on each compile."""
    def named_in_order(sql: str) -> str:
        names: dict[str, str] = {}
        return _GENERATED_NAME.sub(lambda m: names.setdefault(m[0], f"ibis_generated_{len(names)}"), sql)
    return named_in_order(first) == named_in_order(second)


class Literals:
    """A mixin for a stage's settings (a dataclass) whose build turns its numbers and `Text`s
    into SQL literals and nothing else (no branch, no arithmetic in Python on them): those are
    placed (`to_placeholders`), so the stage compiles once whatever they are. Other settings'
    numbers stay part of the stage's shape."""


class Text(str):
    """A string setting that is a value the SQL quotes (a salt, a fingerprint), in `Literals`
    settings: placed like a number. A plain `str` stays part of the shape (a column name, a label)."""


_PLACED_INT = 7_919_000_000_000  # + the placeholder's number: an int64, a token found nowhere else
_PLACED_TEXT = "rlplaceholder"  # + its number + "q": ends where it ends, whatever follows it


@dataclass(frozen=True)
class Placed:
    """How settings were moved to their canonical form: `days` of date shift, and each
    placeholder's token in the SQL with the value it stands for."""

    days: int
    values: tuple[tuple[str, int | float | Text], ...]

    def back(self, sql: str, dialect: str) -> str | None:
        """The SQL compiled (for `dialect`, Ibis's name of it) from the canonical settings, as
        compiled from the settings themselves; None when a date cannot be moved back."""
        moved = from_sentinel_era(sql, self.days)
        if moved is None or not self.values:
            return moved
        values = dict(self.values)

        def spelled(match: re.Match) -> str:
            value = values.get(match[0])
            quoted = match.start() > 0 and moved[match.start() - 1] == "'"
            return match[0] if value is None else _spelled(value, dialect, quoted)
        # a placeholder the build wrote otherwise (an int made a float's text: `7919….0`) cannot be taken back
        if {m.start() for m in _LEFT_OVER.finditer(moved)} - {m.start() for m in _TOKENS.finditer(moved)}:
            return None
        return _TOKENS.sub(spelled, moved)


# a placeholder's token, not part of a longer name or number
_TOKENS = re.compile(rf"{_PLACED_TEXT}\d+q|(?<![\w.])(?:0\.70710678\d{{5}}1|7919\d{{9}})(?![\w.])")
_LEFT_OVER = re.compile(rf"{_PLACED_TEXT}\d+q|0\.70710678\d{{5}}1|7919\d{{9}}")


def _spelled(value: int | float | Text, dialect: str, quoted: bool) -> str:
    """How Ibis writes the value as a literal: a Text inside its quotes; a number as sqlglot
    writes it, or in a string (rag_loop.engines.functions.double's text, an f-string) as Python
    does."""
    if quoted and not isinstance(value, Text):
        return repr(float(value)) if isinstance(value, float) else str(int(value))
    import ibis.backends.sql.compilers as compilers
    written = sge.convert(str(value) if isinstance(value, Text) else value)
    text = written.sql(dialect=getattr(compilers, dialect).compiler.dialect)
    return text[1:-1] if isinstance(value, Text) else text


def to_placeholders(settings: Any) -> tuple[Any, Placed | None]:
    """The settings in canonical form: dates moved to the sentinel era (`to_sentinel_era`), and
    in `Literals` settings each finite number and `Text` replaced by a placeholder of its type
    (a float in (0, 1), so the settings' own checks of rates pass); None when nothing moved."""
    canonical, days = to_sentinel_era(settings)
    values: list[tuple[str, int | float | Text]] = []
    canonical = _placed(canonical, values, inside=False)
    if not days and not values:
        return settings, None
    return canonical, Placed(days, tuple(values))


def _placed(value: Any, values: list, inside: bool) -> Any:
    if inside and isinstance(value, Text):
        token = Text(f"{_PLACED_TEXT}{len(values)}q")
    elif inside and isinstance(value, float) and math.isfinite(value):
        token = float(f"0.70710678{len(values):05d}1")  # its repr keeps every digit
    elif inside and isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2 ** 62:
        token = _PLACED_INT + len(values)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = inside or isinstance(value, Literals)
        return dataclasses.replace(value, **{f.name: _placed(getattr(value, f.name), values, inner)
                                             for f in dataclasses.fields(value) if f.init})
    elif inside and isinstance(value, tuple | list):
        return type(value)(_placed(item, values, inside) for item in value)
    elif inside and isinstance(value, Mapping):
        return type(value)({key: _placed(item, values, inside) for key, item in value.items()})
    else:
        return value
    values.append((repr(token) if isinstance(token, float) else str(token), value))
    return token
