"""Sampling streams with recorded inclusion probabilities, capped by a daily judging budget.

Each stream draws independently with its own rate (seed 004 §07): `random` (the only
unbiased stream), `bad_signal` (a rate per signal), `risk` (per query type / risk level) and
`novelty` (per-trace rates from the `trace_novelty` table: queries of intents new that day,
see rag_loop.selection.novelty). A draw is a deterministic uniform from md5(salt, trace id), so reruns select the
same traces. A trace's inclusion probability is the union over streams,
π = 1 − Π(1 − p_stream), which is what the Horvitz–Thompson estimates weight by.

When a day's selection costs more than the budget, the diagnostic streams are thinned by
one factor f ≤ 1 (their rates become f·p), chosen so that the random stream plus the
thinned streams fit; the random stream is never thinned.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import duckdb

from rag_loop.schema import Priority
from rag_loop.selection.signals import SIGNALS
from rag_loop.store.tables import has_table

STREAMS = ("random", "bad_signal", "risk", "novelty")
DIAGNOSTIC_STREAMS = STREAMS[1:]
NOVELTY_TABLE = "trace_novelty"  # (trace_id, rate): written by rag_loop.selection.novelty


@dataclass(frozen=True)
class SamplingPolicy:
    """Rates of the streams, the judging budget and what counts as high risk."""

    salt: str = "rag-loop"
    random_rate: float = 0.05
    signal_rates: Mapping[str, float] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 1.0))
    # query types are the application's own taxonomy: none by default (the demo's are in
    # data/demo/loop.yaml)
    query_type_rates: Mapping[str, float] = field(default_factory=dict)
    risk_level_rates: Mapping[str, float] = field(default_factory=lambda: {"high": 1.0})
    judge_cost_usd: float = 0.003  # judging one selected trace
    daily_budget_usd: float | None = 0.60  # None: no cap
    high_risk_query_types: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        rates = {"random_rate": self.random_rate, **self.signal_rates,
                 **self.query_type_rates, **self.risk_level_rates}
        for name, rate in rates.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"sampling rate {name}={rate} is not within [0, 1]")
        if unknown := set(self.signal_rates) - set(SIGNALS):
            raise ValueError(f"unknown signals in signal_rates: {sorted(unknown)}; "
                             f"known: {list(SIGNALS)}")
        if self.judge_cost_usd <= 0:
            raise ValueError("judge_cost_usd must be positive")

    def fingerprint(self) -> str:
        """Short hash of the policy, stored on every candidate as `sampling_policy`."""
        text = json.dumps(asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def daily_capacity(self) -> int | None:
        """How many traces a day's budget pays for."""
        if self.daily_budget_usd is None:
            return None
        return int(self.daily_budget_usd / self.judge_cost_usd + 1e-9)


def _rate_case(column: str, rates: Mapping[str, float]) -> str:
    if not rates:
        return "0.0"
    whens = " ".join(f"WHEN {_quote(k)} THEN {float(v)}" for k, v in rates.items())
    return f"CASE {column} {whens} ELSE 0.0 END"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _bad_signal_rate(rates: Mapping[str, float]) -> str:
    """SQL: 1 − Π over the trace's signals of (1 − rate): one draw per signal, merged."""
    terms = [f"(1 - CASE WHEN {s} THEN {float(r)} ELSE 0.0 END)" for s, r in rates.items()]
    return "1 - " + (" * ".join(terms) if terms else "1")


def _uniform(position: int) -> str:
    """SQL: a uniform in [0, 1) from 8 hex digits of the trace's md5 (one slice per stream)."""
    return f"(('0x' || substr(h, {1 + 8 * position}, 8))::UBIGINT / 4294967296.0)"


def select_candidates(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy) -> int:
    """(Re)build `failure_candidates` from `trace_signals`; returns the number selected."""
    capacity = policy.daily_capacity()
    novelty = (f"LEFT JOIN (SELECT trace_id, max(rate) AS rate FROM {NOVELTY_TABLE} GROUP BY 1) n "
               "USING (trace_id)") if has_table(con, NOVELTY_TABLE) else \
        "LEFT JOIN (SELECT NULL::VARCHAR AS trace_id, NULL::DOUBLE AS rate) n USING (trace_id)"
    # a trace not drawn by `random` is drawn by a diagnostic stream iff f > min_s(u_s / p_s)
    threshold = "least(" + ", ".join(
        f"CASE WHEN p_{s} > 0 THEN u_{s} / p_{s} END" for s in DIAGNOSTIC_STREAMS) + ")"
    high_risk = ", ".join(_quote(q) for q in policy.high_risk_query_types) or "NULL"
    con.execute(f"""
        CREATE OR REPLACE TABLE failure_candidates AS
        WITH drawn AS (
            SELECT trace_id, day, signals, signal_count, thumbs_down, query_type, risk_level,
                   {float(policy.random_rate)} AS p_random,
                   {_bad_signal_rate(policy.signal_rates)} AS p_bad_signal,
                   greatest({_rate_case('query_type', policy.query_type_rates)},
                            {_rate_case('risk_level', policy.risk_level_rates)}) AS p_risk,
                   least(greatest(coalesce(n.rate, 0.0), 0.0), 1.0) AS p_novelty,
                   {", ".join(f"{_uniform(i)} AS u_{s}" for i, s in enumerate(STREAMS))}
            FROM (SELECT *, md5({_quote(policy.salt)} || ':' || trace_id) AS h FROM trace_signals) s
            {novelty}),
        ranked AS (
            SELECT *, u_random < p_random AS by_random, {threshold} AS diagnostic_threshold,
                   row_number() OVER (PARTITION BY day, u_random < p_random
                                      ORDER BY {threshold}, trace_id) AS diagnostic_rank
            FROM drawn),
        daily AS (
            SELECT day, count(*) FILTER (by_random) AS random_selected,
                   {"NULL" if capacity is None else
                    f"greatest({capacity} - count(*) FILTER (by_random), 0)"} AS room
            FROM ranked GROUP BY day),
        thinning AS (
            SELECT d.day, CASE WHEN any_value(d.room) = 0 THEN 0.0  -- random used it all
                   ELSE coalesce(least(1.0, min(r.diagnostic_threshold) FILTER (
                       NOT r.by_random AND r.diagnostic_rank = d.room + 1)), 1.0) END AS thinning
            FROM daily d LEFT JOIN ranked r USING (day) GROUP BY d.day),
        decided AS (
            SELECT r.*, t.thinning,
                   {", ".join(f"u_{s} < t.thinning * p_{s} AS by_{s}" for s in DIAGNOSTIC_STREAMS)}
            FROM ranked r JOIN thinning t USING (day))
        SELECT trace_id, day,
               list_filter([{", ".join(f"CASE WHEN by_{s} THEN '{s}' END" for s in STREAMS)}],
                           lambda x: x IS NOT NULL) AS streams,
               {", ".join(f"by_{s}" for s in STREAMS)},
               {", ".join(f"p_{s}" for s in STREAMS)}, thinning,
               1 - (1 - p_random) * {" * ".join(f"(1 - least(1.0, thinning * p_{s}))"
                                                for s in DIAGNOSTIC_STREAMS)}
                   AS inclusion_probability,
               CASE WHEN signal_count > 0 AND (query_type IN ({high_risk}) OR risk_level = 'high')
                        THEN '{Priority.P0}'
                    WHEN thumbs_down AND signal_count >= 2 THEN '{Priority.P1}'
                    WHEN by_novelty THEN '{Priority.P2}'
                    ELSE '{Priority.P3}' END AS priority,
               signals, signal_count, {_quote(policy.fingerprint())} AS sampling_policy
        FROM decided
        WHERE by_random OR {" OR ".join(f"by_{s}" for s in DIAGNOSTIC_STREAMS)}
        ORDER BY day, priority, trace_id""")
    return con.execute("SELECT count(*) FROM failure_candidates").fetchall()[0][0]


def selection_summary(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy) -> dict[str, object]:
    """Counts per stream and priority, thinned days and the expected judging cost."""
    row = con.execute(f"""
        SELECT count(*), {", ".join(f"count(*) FILTER (by_{s})" for s in STREAMS)},
               {", ".join(f"count(*) FILTER (priority = '{p}')" for p in Priority)},
               count(DISTINCT day) FILTER (thinning < 1), min(thinning)
        FROM failure_candidates""").fetchall()[0]
    selected, streams, priorities = row[0], row[1:1 + len(STREAMS)], row[1 + len(STREAMS):-2]
    population = con.execute("SELECT count(*) FROM trace_signals").fetchall()[0][0]
    return {
        "selected": selected, "population": population,
        "selected_share": selected / population if population else 0.0,
        **{f"stream_{s}": n for s, n in zip(STREAMS, streams)},
        **{f"priority_{p}": n for p, n in zip(Priority, priorities)},
        "days_thinned": row[-2], "min_thinning": row[-1] if row[-1] is not None else 1.0,
        "expected_judge_cost_usd": round(selected * policy.judge_cost_usd, 6),
    }
