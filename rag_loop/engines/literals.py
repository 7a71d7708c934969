"""One compiled SQL per stage shape, whatever its days: a stage's settings with their dates
moved to a sentinel era (the same gaps between them), compiled once, and the era's date
literals moved back for each call.

The stages' expressions only compare dates, take them in ranges and cut instants to days, so
shifting every date of the settings by N days shifts exactly the SQL literals made from them
by N days. Compiling an Ibis expression takes 50–250 ms; a drift day or a day-by-day run
would otherwise pay it for each new set of days.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any

SENTINEL = date(2400, 1, 1)
# Ibis 12's DuckDB spelling of date and instant literals
_LITERAL = re.compile(r"\b(MAKE_DATE|MAKE_TIMESTAMPTZ|MAKE_TIMESTAMP)\((\d+), (\d+), (\d+)")
_SENTINEL_ERA = re.compile(r"\b2[3-9]\d\d\b")
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
    the settings themselves, when they hold no date)."""
    found = dates_in(settings)
    if not found:
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
    original = _LITERAL.sub(back, sql)
    return None if _SENTINEL_ERA.search(original) else original


def same_sql(first: str, second: str) -> bool:
    """The two SQL texts say the same, up to the names Ibis makes up afresh on each compile."""
    def named_in_order(sql: str) -> str:
        names: dict[str, str] = {}
        return _GENERATED_NAME.sub(lambda m: names.setdefault(m[0], f"ibis_generated_{len(names)}"), sql)
    return named_in_order(first) == named_in_order(second)
