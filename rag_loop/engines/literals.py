"""One compiled SQL per stage shape, whatever its days and its numbers: a stage's settings with
their dates moved to a sentinel era and, in settings that declare them literals (`Literals`),
their numbers and `Text`s replaced by placeholders, compiled once; for each call the era's date
literals are moved back and the placeholders replaced by the values' own SQL spelling
(`to_placeholders`, `Placed.back`).

Dates move one of two ways (`to_sentinel_era`):
- a day list (the days a stage computes or reads: strictly increasing dates in a tuple), when
  it holds every date of the settings: each of its days to its own slot, SPACING days apart,
  and the list padded to a power of two slots (LEAST_SLOTS at least), the slots past its end
  standing for its last day. Every count and spacing of days up to that many is one shape. A
  literal within REACH days of a slot moves back to as many days from that slot's day, and the
  dates an `IN` list then repeats go (a day named twice is a day named once). The build may use
  such a list only as a set of days: membership, its first and last day, each day's neighbours
  (a window after or before it) — never the days between two of them nor the gaps. A literal
  further from its slot (the days between two) cannot move back: the stage compiles directly.
- any other dates: all by one shift, the earliest on SENTINEL (the same gaps between them). The
  stages' expressions only compare dates, take them in ranges and cut instants to days, so
  shifting every date of the settings by N days shifts exactly the SQL literals made from them
  by N days.

A number can steer the Python that builds an expression (a `ceil`, a branch), which no
placeholder would follow: only settings whose build turns their numbers into SQL literals and
nothing else say so (`Literals`). Building and compiling an Ibis expression takes 0.1–0.5 s; a
drift day, a day-by-day run or a policy's new rates would otherwise pay it each time. The
engine checks a stage's first compile against compiling its settings as given
(rag_loop.engines.engine.DuckDBEngine._sql).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlglot.expressions as sge

SENTINEL = date(2400, 1, 1)
SPACING = 64  # days between a day list's slots
REACH = SPACING // 2 - 1  # a literal's most days from its slot: one further sits between two slots
LEAST_SLOTS = 16  # a list of up to 16 days (a day, a week, a novelty window) is one shape
MOST_SLOTS = 2048  # their era ends before 2800 (`_SENTINEL_ERA`); a longer list moves by one shift
# Ibis 12's spelling of date and instant literals: DuckDB's (and Spark's dates), Spark's instants
_LITERAL = re.compile(r"\b(MAKE_DATE|MAKE_TIMESTAMPTZ|MAKE_TIMESTAMP)\((\d+), (\d+), (\d+)")
_ISO_INSTANT = re.compile(r"(CAST\(')(\d{4})-(\d\d)-(\d\d)(T[\d:.]+(?:[+-]\d\d:\d\d)?' AS TIMESTAMP)")
# a year of the sentinel era, not the digits after a decimal point (seconds 0.2477)
_SENTINEL_ERA = re.compile(r"(?<![\w.])2[3-9]\d\d\b")
_GENERATED_NAME = re.compile(r"\bibis_[a-z_]+_[a-z0-9]{26}\b")  # fresh on every compile (unnest)
_DATE = r"MAKE_DATE\(\d+, \d+, \d+\)"
_IN_DATES = re.compile(rf"\bIN \(({_DATE}(?:, {_DATE})*)\)")


def _found(value: Any, wanted: Callable[[Any], bool]) -> list:
    """The parts of settings (dataclasses, tuples, lists, mappings) that are `wanted`, outermost
    first: a wanted part's own parts are not looked into."""
    if wanted(value):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, tuple | list):
        parts = list(value)
    elif isinstance(value, Mapping):
        parts = list(value.values())
    else:
        return []
    return [found for part in parts for found in _found(part, wanted)]


def dates_in(value: Any) -> list[date]:
    """Every date and datetime in settings (dataclasses, tuples, lists, mappings)."""
    return _found(value, lambda part: isinstance(part, date))


def _rebuilt(value: Any, new: Callable[[Any], Any]) -> Any:
    """`value` (settings: dataclasses, tuples, lists, mappings) with each part that `new` gives
    a replacement for (not None) replaced; a part without a date is kept as it is."""
    if not dates_in(value):
        return value
    replacement = new(value)
    if replacement is not None:
        return replacement
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _rebuilt(getattr(value, f.name), new)
                                             for f in dataclasses.fields(value) if f.init})
    if isinstance(value, tuple | list):
        return type(value)(_rebuilt(item, new) for item in value)
    if isinstance(value, Mapping):
        return type(value)({key: _rebuilt(item, new) for key, item in value.items()})
    return value


def shifted(value: Any, days: int) -> Any:
    """`value` (settings: dataclasses, tuples, lists, mappings) with every date and datetime
    in it `days` days later (a datetime at the same time of day); a part without a date is kept."""
    return _rebuilt(value, lambda part: part + timedelta(days=days) if isinstance(part, date) else None)


def _is_day_list(value: Any) -> bool:
    return (isinstance(value, tuple) and len(value) > 0
            and all(type(d) is date for d in value) and all(a < b for a, b in zip(value, value[1:])))


def _day_lists(value: Any) -> list[tuple[date, ...]]:
    return _found(value, _is_day_list)


def _slots(days: int) -> int:
    """A day list's slots: the power of two at or above its count, LEAST_SLOTS at least."""
    return max(LEAST_SLOTS, 1 << (days - 1).bit_length())


def to_sentinel_era(settings: Any) -> tuple[Any, int | tuple[date, ...]]:
    """The settings moved to the sentinel era, and how (the module's docstring): a day list's
    days when each went to its slot, else the days all moved. 0, and the settings themselves,
    when they hold no date, or an instant of a zone other than UTC (moved, its offset could
    change with daylight saving)."""
    found = dates_in(settings)
    if not found or any(isinstance(d, datetime) and d.tzinfo not in (None, UTC) for d in found):
        return settings, 0
    lists = _day_lists(settings)
    if len(lists) == 1 and len(lists[0]) == len(found) and len(found) <= MOST_SLOTS:
        slots = tuple(SENTINEL + timedelta(days=SPACING * i) for i in range(_slots(len(found))))
        return _rebuilt(settings, lambda part: slots if _is_day_list(part) else None), lists[0]
    earliest = min(d.date() if isinstance(d, datetime) else d for d in found)
    days = (SENTINEL - earliest).days
    return shifted(settings, days), days


def _date_back(moved: int | tuple[date, ...]) -> Callable[[date], date | None]:
    """A date of the sentinel era moved back (`to_sentinel_era`'s `moved`); None when it cannot be."""
    if isinstance(moved, int):
        return lambda era: era - timedelta(days=moved)

    def back(era: date) -> date | None:
        days = (era - SENTINEL).days
        slot = (days + SPACING // 2) // SPACING
        offset = days - slot * SPACING
        if not 0 <= slot < _slots(len(moved)) or abs(offset) > REACH:
            return None
        return moved[min(slot, len(moved) - 1)] + timedelta(days=offset)
    return back


def from_sentinel_era(sql: str, moved: int | tuple[date, ...]) -> str | None:
    """The SQL compiled from settings moved to the sentinel era (`to_sentinel_era`'s `moved`: the
    days of the shift, or the day list), with its date literals moved back and, for a day list,
    the dates each `IN` list repeats dropped; None when a date of the sentinel era is left that
    cannot be moved back or is not such a literal (compile directly)."""
    if moved == 0:
        return sql
    date_back, lost = _date_back(moved), []

    def back(match: re.Match, spelled: Callable[[re.Match, date], str]) -> str:
        if int(match[2]) < SENTINEL.year - 100:  # not made from the settings
            return match[0]
        original = date_back(date(int(match[2]), int(match[3]), int(match[4])))
        if original is None:
            lost.append(match[0])
            return match[0]
        return spelled(match, original)
    original = _LITERAL.sub(lambda m: back(m, lambda m, d: f"{m[1]}({d.year}, {d.month}, {d.day}"), sql)
    original = _ISO_INSTANT.sub(lambda m: back(m, lambda m, d: f"{m[1]}{d.isoformat()}{m[5]}"), original)
    if isinstance(moved, tuple):
        original = _IN_DATES.sub(lambda m: f"IN ({', '.join(dict.fromkeys(re.findall(_DATE, m[1])))})", original)
    return None if lost or _SENTINEL_ERA.search(original) else original


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
    """How settings were moved to their canonical form: their dates (`to_sentinel_era`'s
    `moved`), and each placeholder's token in the SQL with the value it stands for."""

    moved: int | tuple[date, ...]
    values: tuple[tuple[str, int | float | Text], ...]

    def back(self, sql: str, dialect: str) -> str | None:
        """The SQL compiled (for `dialect`, Ibis's name of it) from the canonical settings, as
        compiled from the settings themselves; None when a date cannot be moved back."""
        moved = from_sentinel_era(sql, self.moved)
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
    canonical, moved = to_sentinel_era(settings)
    values: list[tuple[str, int | float | Text]] = []
    canonical = _placed(canonical, values, inside=False)
    if not moved and not values:
        return settings, None
    return canonical, Placed(moved, tuple(values))


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
