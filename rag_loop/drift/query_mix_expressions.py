"""Drift counts that grow with traffic, one Ibis expression each for DuckDB and Spark
(rag_loop.drift.figures turns them into the day's figures): the query mix per day, dimension
and value over a day and its baseline window. It reads trace_signals and raw_traces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

import ibis
import ibis.expr.types as ir

from rag_loop.engines.functions import Functions, day_range, on_days

INPUTS = ("trace_signals", "raw_traces")
MIX_DIMENSIONS = ("language", "query_type", "tenant", "length")


@dataclass(frozen=True)
class MixWindow:
    """The days counted and the query-length buckets (low, high, label), in words."""

    start: date
    day: date
    buckets: tuple[tuple[int, int, str], ...]


@ibis.udf.scalar.builtin(name="trim")
def trim_spaces(text: str) -> str: ...  # spaces only, on both engines (Ibis's strip takes all whitespace)


def mix_counts_expression(tables: Mapping[str, ir.Table], window: MixWindow, fn: Functions) -> ir.Table:
    """Per day, dimension (language, query_type, tenant, length bucket) and value: queries."""
    signals, traces = tables["trace_signals"], tables["raw_traces"]
    traces = traces.filter(on_days(fn, traces["timestamp"], day_range(window.start, window.day)))
    queries = traces.select(q_trace_id=traces.trace_id, query=traces.original_query)
    joined = signals.filter(signals.day.between(window.start, window.day)).join(
        queries, signals.trace_id == queries.q_trace_id)
    words = trim_spaces(joined.query).split(" ").length()
    length = ibis.cases(*[((words >= low) & (words <= high), label) for low, high, label in window.buckets])
    rows = joined.select(day=joined.day, language=joined.language.fill_null("(none)"),
                         query_type=joined.query_type.fill_null("(none)"), tenant=joined.tenant.fill_null("(none)"),
                         length=length)
    parts = [rows.group_by(["day", rows[d].name("value")]).aggregate(n=rows.count())
             .mutate(dimension=ibis.literal(d), dimension_order=ibis.literal(i, "int64"))
             for i, d in enumerate(MIX_DIMENSIONS)]
    counts = ibis.union(*parts)
    return counts.order_by(["dimension_order", "day", "value"]).select("day", "dimension", "value", "n")
