"""`failure_candidates` as one Ibis expression for DuckDB and Spark (rag_loop.selection.sampling
has the streams, the draws and the budget's thinning). It reads trace_signals and
trace_novelty."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import ibis
import ibis.expr.types as ir

from rag_loop.engines.functions import Functions, bit_xor, double, on_days
from rag_loop.engines.literals import Literals, Text
from rag_loop.schema import Priority

STREAMS = ("random", "bad_signal", "risk", "novelty")
DIAGNOSTIC_STREAMS = STREAMS[1:]
INPUTS = ("trace_signals", "trace_novelty")


def _rate(column: ir.StringValue, rates: Mapping[str, float]) -> ir.FloatingValue:
    if not rates:
        return double(0.0)
    return column.substitute({k: double(v) for k, v in rates.items()}, else_=double(0.0))


@dataclass(frozen=True)
class Draws(Literals):
    """What candidates_expression reads of a rag_loop.selection.sampling.SamplingPolicy: its
    rates, the day's capacities it implies and its fingerprint, each turned into a SQL literal
    and nothing else (so a policy's new figures reuse the stage's compiled SQL)."""

    salt: Text
    random_rate: float
    signal_rates: Mapping[str, float]
    query_type_rates: Mapping[str, float]
    risk_level_rates: Mapping[str, float]
    capacity: int | None  # traces a day (None: no budget)
    random_cap: int | None  # the random stream's share of it (None: never capped)
    high_risk_query_types: tuple[str, ...]
    fingerprint: Text

    @classmethod
    def of(cls, policy: Any) -> Draws:
        """The draws of a SamplingPolicy."""
        def rates(mapping: Mapping[str, float]) -> dict[str, float]:
            return {name: float(rate) for name, rate in mapping.items()}  # a rate of 1 is 1.0: one shape
        return cls(Text(policy.salt), float(policy.random_rate), rates(policy.signal_rates),
                   rates(policy.query_type_rates), rates(policy.risk_level_rates), policy.daily_capacity(),
                   policy.random_capacity(), tuple(policy.high_risk_query_types), Text(policy.fingerprint()))


def candidates_expression(tables: Mapping[str, ir.Table], policy, fn: Functions) -> ir.Table:
    """The selected traces with their streams, rates, thinning and inclusion probability.
    `policy` is a `Draws`, or a rag_loop.selection.sampling.SamplingPolicy (its `Draws`)."""
    policy = policy if isinstance(policy, Draws) else Draws.of(policy)
    signals, novelty = tables["trace_signals"], tables["trace_novelty"]
    rates = novelty.group_by(n_trace_id=novelty.trace_id).aggregate(rate=novelty.rate.max())
    s = signals.left_join(rates, signals.trace_id == rates.n_trace_id)
    digest = fn.md5(ibis.literal(f"{policy.salt}:") + signals.trace_id)
    no_signal = double(1.0)
    for signal, rate in policy.signal_rates.items():
        no_signal = no_signal * (double(1.0) - ibis.ifelse(signals[signal], double(rate), double(0.0)))
    drawn = s.select(
        signals.trace_id, signals.day, signals.signals, signals.signal_count, signals.thumbs_down,
        signals.query_type, signals.risk_level,
        p_random=double(policy.random_rate), p_bad_signal=double(1.0) - no_signal,
        p_risk=ibis.greatest(_rate(signals.query_type, policy.query_type_rates),
                             _rate(signals.risk_level, policy.risk_level_rates)),
        p_novelty=ibis.least(ibis.greatest(rates.rate.fill_null(double(0.0)), double(0.0)), double(1.0)),
        **{f"u_{stream}": fn.uniform(digest, i) for i, stream in enumerate(STREAMS)})
    # a trace not drawn by `random` is drawn by a diagnostic stream iff f > min_s(u_s / p_s)
    threshold = ibis.least(*[ibis.ifelse(drawn[f"p_{s}"] > 0, drawn[f"u_{s}"] / drawn[f"p_{s}"],
                                         ibis.null("float64")) for s in DIAGNOSTIC_STREAMS])
    drawn = drawn.mutate(diagnostic_threshold=threshold)
    capacity = policy.capacity
    if capacity is not None and policy.random_cap is not None:
        drawn = _random_capped(drawn, capacity, policy.random_cap)
    by_random = drawn.u_random < drawn.p_random
    ranked = drawn.mutate(by_random=by_random)
    ranked = ranked.mutate(diagnostic_rank=ibis.row_number().over(ibis.window(
        group_by=[ranked.day, ranked.by_random],
        order_by=[ibis.asc(ranked.diagnostic_threshold, nulls_first=False), ranked.trace_id])) + 1)
    daily = ranked.group_by(d_day=ranked.day).aggregate(random_selected=ranked.by_random.sum())
    room = (ibis.null("int64") if capacity is None
            else ibis.greatest(capacity - daily.random_selected.cast("int64"), 0))
    daily = daily.select("d_day", room=room)
    pairs = daily.left_join(ranked, daily.d_day == ranked.day)
    at_room = (~ranked.by_random) & (ranked.diagnostic_rank == daily.room + 1)
    thinning = pairs.group_by(t_day=daily.d_day).aggregate(
        room=daily.room.max(), threshold=ranked.diagnostic_threshold.min(where=at_room))
    thinning = thinning.select("t_day", thinning=ibis.ifelse(  # 0: random used it all
        thinning.room == 0, double(0.0), ibis.least(double(1.0), thinning.threshold).fill_null(double(1.0))))
    decided = ranked.join(thinning, ranked.day == thinning.t_day)
    decided = decided.mutate(**{f"by_{s}": decided[f"u_{s}"] < decided.thinning * decided[f"p_{s}"]
                                for s in DIAGNOSTIC_STREAMS})
    keep = double(1.0) - decided.p_random
    for stream in DIAGNOSTIC_STREAMS:
        keep = keep * (double(1.0) - ibis.least(double(1.0), decided.thinning * decided[f"p_{stream}"]))
    inclusion = double(1.0) - keep
    high_risk = list(policy.high_risk_query_types)
    priority = ibis.cases(
        ((decided.signal_count > 0) & (decided.query_type.isin(high_risk) | (decided.risk_level == "high")),
         Priority.P0.value),
        (decided.thumbs_down & (decided.signal_count >= 2), Priority.P1.value),
        (decided.by_novelty, Priority.P2.value), else_=Priority.P3.value)
    chosen = decided.filter(ibis.or_(*[decided[f"by_{s}"] for s in STREAMS]))
    rows = chosen.select(
        "trace_id", "day",
        streams=ibis.array([ibis.ifelse(chosen[f"by_{s}"], s, ibis.null("string")) for s in STREAMS])
        .filter(lambda name: name.notnull()),
        **{f"by_{s}": chosen[f"by_{s}"] for s in STREAMS}, **{f"p_{s}": chosen[f"p_{s}"] for s in STREAMS},
        thinning=chosen.thinning, inclusion_probability=inclusion, priority=priority,
        signals=chosen.signals, signal_count=chosen.signal_count,
        sampling_policy=ibis.literal(str(policy.fingerprint)))
    return rows.order_by(["day", "priority", "trace_id"])


def _random_capped(drawn: ir.Table, capacity: int, share_cap: int) -> ir.Table:
    """`drawn` with `p_random` lowered, on a day whose random draws exceed the stream's cap, to
    the largest rate at which at most cap traces are drawn: the (cap + 1)-th smallest `u_random`
    of the day (the cap smallest draws are kept). The cap is the random stream's share of the
    capacity, or more where the diagnostic streams, unthinned, leave more room
    (capacity − their draws). Only the traces drawn at the policy's rate are ranked."""
    counts = drawn.group_by(c_day=drawn.day).aggregate(
        diagnostic_drawn=drawn.count(where=drawn.diagnostic_threshold < double(1.0)))
    counts = counts.select("c_day", cap=ibis.greatest(ibis.literal(share_cap, "int64"),
                                                       capacity - counts.diagnostic_drawn.cast("int64")))
    lucky = drawn.filter(drawn.u_random < drawn.p_random).select("trace_id", "day", "u_random")
    lucky = lucky.mutate(random_rank=ibis.row_number().over(ibis.window(  # 0: the smallest draw
        group_by=lucky.day, order_by=[lucky.u_random, lucky.trace_id])))
    lucky = lucky.join(counts, lucky.day == counts.c_day)
    lowered = lucky.group_by(r_day=lucky.day).aggregate(
        rate=lucky.u_random.min(where=lucky.random_rank == lucky.cap))  # null: no more draws than the cap
    lowered = lowered.filter(lowered.rate.notnull())
    joined = drawn.left_join(lowered, drawn.day == lowered.r_day)
    return joined.select(*[c for c in drawn.columns if c != "p_random"],
                         p_random=ibis.least(drawn.p_random, lowered.rate.fill_null(double(1.0))))


@dataclass(frozen=True)
class PolicyDays:
    """failure_candidates for some days only: the sampling policy's draws and the days drawn."""

    policy: Any  # Draws, or a rag_loop.selection.sampling.SamplingPolicy
    days: tuple[date, ...]


def candidates_of_days_expression(tables: Mapping[str, ir.Table], wanted: PolicyDays, fn: Functions) -> ir.Table:
    """candidates_expression on the traces of `wanted.days` (every draw, budget and thinning is
    per trace or per day, so a day alone gives the rows it has in the whole table)."""
    signals = tables["trace_signals"]
    return candidates_expression({**tables, "trace_signals": signals.filter(signals.day.isin(list(wanted.days)))},
                                 wanted.policy, fn)


@dataclass(frozen=True)
class SampleDays:
    """`trace_novelty`'s sample of some days only (None: every day)."""

    per_group: int
    days: tuple[date, ...] | None = None


def _sampled(traces: ir.Table, wanted: SampleDays, fn: Functions) -> ir.Table:
    """Per UTC day and language ("und" when unknown) the `per_group` traces first by md5 of
    their id — deterministic, and the same traces whatever else arrived that day."""
    if wanted.days is not None:
        traces = traces.filter(on_days(fn, traces["timestamp"], wanted.days))
    rows = traces.select("trace_id", "original_query", language=traces.language.fill_null("und"),
                         day=fn.utc_day(traces["timestamp"]), digest=fn.md5(traces.trace_id))
    position = ibis.row_number().over(group_by=[rows.day, rows.language], order_by=rows.digest)
    sampled = rows.mutate(position=position)
    return sampled.filter(sampled.position < wanted.per_group)


def novelty_sample_expression(tables: Mapping[str, ir.Table], wanted: SampleDays, fn: Functions) -> ir.Table:
    """`trace_novelty`'s sample of the traffic of `wanted.days` (`_sampled`)."""
    sampled = _sampled(tables["raw_traces"], wanted, fn)
    return sampled.order_by(["day", "language", "trace_id"]).select("trace_id", "language", "original_query", "day")


def novelty_traffic_expression(tables: Mapping[str, ir.Table], _: Any, fn: Functions) -> ir.Table:
    """Per UTC day and language of the traffic, a fingerprint of its traces (count, and the xor
    of two 60-bit slices of the md5 of each id and ingestion time): a day whose fingerprint is
    the one judged has the same sample. One aggregate, no sort, however long the history."""
    traces = tables["raw_traces"]
    stored = traces.trace_id.concat(":", fn.epoch_us(traces.ingested_at).cast("string").fill_null(""))
    digest = fn.md5(stored)
    rows = traces.select(language=traces.language.fill_null("und"), day=fn.utc_day(traces["timestamp"]),
                         first=fn.hex_to_int(digest.substr(0, 15)), second=fn.hex_to_int(digest.substr(15, 15)))
    counts = rows.group_by(["day", "language"]).aggregate(
        traces=rows.count(), first=bit_xor(rows.first), second=bit_xor(rows.second))
    return counts.select("day", "language", "traces", traffic=counts.traces.cast("string").concat(
        ":", counts.first.cast("string"), ":", counts.second.cast("string")))
