"""The counts behind `quality_estimates`, one Ibis expression for DuckDB and Spark: per day and
slice value, the population, the random stream and the selected traces, and per outcome their
failures and the Horvitz–Thompson weighted failures (rag_loop.selection.estimates turns those
few rows into rates and intervals). It reads trace_signals and failure_candidates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date

import ibis
import ibis.expr.types as ir

from rag_loop.engines.functions import Functions, double, on_days

INPUTS = ("trace_signals", "failure_candidates")
SEPARATOR = " × "


@dataclass(frozen=True)
class SliceCounts:
    """The slices (each its columns; none: the whole population) and the outcomes counted."""

    slices: tuple[tuple[str, ...], ...]
    outcomes: tuple[str, ...]
    days: tuple[date, ...] | None = None  # None: every day


def slice_counts_expression(tables: Mapping[str, ir.Table], wanted: SliceCounts, fn: Functions) -> ir.Table:
    """Wide counts, one row per slice, day and slice value (`slice_order`: the slice's place in
    `wanted.slices`), `<outcome>|<measure>` columns: every slice in one query; of `wanted.days`
    only, when given (every count is within a day)."""
    if wanted.days is not None:
        tables = {name: table.filter(table.day.isin(list(wanted.days))) for name, table in tables.items()}
    parts = [_one_slice(tables, dims, wanted.outcomes).mutate(slice_order=ibis.literal(i, "int64"))
             for i, dims in enumerate(wanted.slices)]
    return ibis.union(*parts).order_by(["slice_order", "day", "slice_value"])


def _one_slice(tables: Mapping[str, ir.Table], dims: tuple[str, ...], outcomes: tuple[str, ...]) -> ir.Table:
    signals, candidates = tables["trace_signals"], tables["failure_candidates"]
    chosen = candidates.select(c_trace_id=candidates.trace_id, c_by_random=candidates.by_random,
                               c_inclusion=candidates.inclusion_probability)
    joined = signals.left_join(chosen, signals.trace_id == chosen.c_trace_id)
    rows = joined.select(
        *[signals[c] for c in _columns(dims, outcomes)], any_signal=signals.signal_count > 0,
        by_random=chosen.c_by_random.fill_null(False), selected=chosen.c_trace_id.notnull(),
        weight=double(1.0) / chosen.c_inclusion)
    values = [rows[d].cast("string").fill_null("(none)") for d in dims]
    slice_value = ibis.literal("all") if not values else _joined(values)
    measures: dict[str, ir.Value] = {
        "population_n": rows.count(), "random_n": rows.count(where=rows.by_random),
        "selected_n": rows.count(where=rows.selected)}
    for outcome in outcomes:
        failed = rows[outcome]
        measures[f"{outcome}|population_failures"] = rows.count(where=failed)
        measures[f"{outcome}|random_failures"] = rows.count(where=rows.by_random & failed)
        measures[f"{outcome}|ht_weighted_failures"] = rows.weight.sum(where=rows.selected & failed).fill_null(
            double(0.0))
        measures[f"{outcome}|selected_failures"] = rows.count(where=rows.selected & failed)
    return rows.group_by([rows.day, slice_value.name("slice_value")]).aggregate(**measures)


def _columns(dims: tuple[str, ...], outcomes: tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys(["day", *dims, *(o for o in outcomes if o != "any_signal"), "signal_count"]))


def _joined(values: Sequence[ir.StringValue]) -> ir.StringValue:
    text = values[0]
    for value in values[1:]:
        text = text.concat(SEPARATOR, value)
    return text


@dataclass(frozen=True)
class DaySlices:
    """One day and the slices (each its columns; none: the whole population) counted on it."""

    day: date
    slices: tuple[tuple[str, ...], ...]


def population_expression(tables: Mapping[str, ir.Table], wanted: DaySlices, fn: Functions) -> ir.Table:
    """The day's traces per slice (" × ".join of its columns, or "all") and slice value."""
    signals = tables["trace_signals"]
    rows = signals.filter(signals.day == wanted.day)
    parts = []
    for dims in wanted.slices:
        values = [rows[d].cast("string").fill_null("(none)") for d in dims]
        value = ibis.literal("all") if not values else _joined(values)
        parts.append(rows.group_by(value.name("slice_value")).aggregate(population_n=rows.count())
                     .mutate(slice=ibis.literal(SEPARATOR.join(dims) if dims else "all")))
    return ibis.union(*parts).select("slice", "slice_value", "population_n")


def app_cost_expression(tables: Mapping[str, ir.Table], day: date, fn: Functions) -> ir.Table:
    """The application's requests and cost on a UTC day."""
    traces = tables["raw_traces"]
    today = traces.filter(on_days(fn, traces["timestamp"], [day]))
    return today.aggregate(requests=today.count(), app_cost_usd=today.cost_usd.sum().fill_null(double(0.0)))
