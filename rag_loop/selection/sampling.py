"""Sampling streams with recorded inclusion probabilities, bounded by a daily judging budget.

Each stream draws independently with its own rate (seed 004 §07): `random` (the only unbiased
stream), `bad_signal` (a rate per signal), `risk` (per query type / risk level) and
`novelty` (per-trace rates from the `trace_novelty` table: queries of intents new that day,
see rag_loop.selection.novelty). A draw is a deterministic uniform from md5(salt, trace id), so reruns select the
same traces. A trace's inclusion probability is the union over streams,
π = 1 − Π(1 − p_stream), which is what the Horvitz–Thompson estimates weight by.

The budget pays for `capacity = daily_budget_usd / judge_cost_usd` traces a day, and bounds
every stream (issue 42):
- the random stream takes at most its share of the capacity (`random_budget_share`, 0.5 by
  default), or more on a day the diagnostic streams, unthinned, leave more room
  (cap = max(⌊share · capacity⌋, capacity − their draws)). On a day with more random draws than
  that, the day's random rate is lowered to the largest rate that draws at most cap traces: the
  (cap + 1)-th smallest random draw u, so the cap smallest draws are kept. That lowered rate is
  the recorded `p_random`, the same for every trace of the day; it is the rank-conditioned
  inclusion probability of bottom-k sampling (given every other trace's draw, a trace is
  drawn iff its u is below it), so the Horvitz–Thompson estimates stay exactly unbiased, and
  on a day under the cap it is the policy's rate: nothing changes there.
- the diagnostic streams are then thinned by one factor f ≤ 1 (their rates become f·p), the
  same kind of threshold, so that they fill the rest of the capacity at most.
`random_budget_share=1.0` lets the random stream take the whole capacity (the diagnostic
streams get what it leaves); `None` never thins it (the rule before issue 42: a day costs
more than the budget when its random draws alone exceed the capacity); `daily_budget_usd=None`
caps nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from datetime import date

import duckdb

from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.engines.incremental import Fingerprints, combined, table_fingerprints
from rag_loop.schema import Priority
from rag_loop.selection.sampling_expressions import (
    DIAGNOSTIC_STREAMS,
    INPUTS,
    STREAMS,
    Draws,
    PolicyDays,
    candidates_expression,
    candidates_of_days_expression,
)
from rag_loop.selection.signals import SIGNALS
from rag_loop.store.ddl import NOVELTY_DDL
from rag_loop.store.tables import has_table

__all__ = ["DIAGNOSTIC_STREAMS", "STREAMS", "SamplingPolicy", "select_candidates", "selection_summary"]
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
    # the random stream's share of the capacity when the diagnostic streams need the rest
    # (1.0: it may take all of it; None: never thinned, a day may cost more than the budget)
    random_budget_share: float | None = 0.5
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
        if self.random_budget_share is not None and not 0.0 <= self.random_budget_share <= 1.0:
            raise ValueError(f"random_budget_share={self.random_budget_share} is not within [0, 1] (or None)")

    def fingerprint(self) -> str:
        """Short hash of the policy, stored on every candidate as `sampling_policy`."""
        text = json.dumps(asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def daily_capacity(self) -> int | None:
        """How many traces a day's budget pays for."""
        if self.daily_budget_usd is None:
            return None
        return int(self.daily_budget_usd / self.judge_cost_usd + 1e-9)

    def random_capacity(self) -> int | None:
        """How many random draws a day keeps at most when the diagnostic streams need the rest
        of the capacity (None: not capped)."""
        capacity = self.daily_capacity()
        if capacity is None or self.random_budget_share is None:
            return None
        return int(self.random_budget_share * capacity + 1e-9)


def select_candidates(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy, engine: Engine | None = None,
                      days: Collection[date] | None = None) -> int:
    """(Re)build `failure_candidates` from `trace_signals` (and `trace_novelty`'s rates, if any)
    on `engine` (default: DuckDB on `con`; rag_loop.selection.sampling_expressions holds the one definition);
    with `days`, only those days' selection, which replaces theirs. Returns the number selected
    (on `days`, when given)."""
    if not has_table(con, NOVELTY_TABLE):
        con.execute(NOVELTY_DDL)  # no novelty judged yet: its stream draws nothing
    engine = engine or DuckDBEngine()
    if days is None:
        return engine.run(con, "failure_candidates", INPUTS, candidates_expression, Draws.of(policy))
    return engine.run(con, "failure_candidates", INPUTS, candidates_of_days_expression,
                      PolicyDays(Draws.of(policy), tuple(sorted(days))), days)


def candidate_inputs(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy) -> Fingerprints:
    """Per day with signals or novelty judgements, a fingerprint of what its selection is made
    from: the policy and that day's rows of both."""
    signals, novelty = table_fingerprints(con, "trace_signals"), table_fingerprints(con, NOVELTY_TABLE)
    return {day: combined(policy.fingerprint(), signals.get(day), novelty.get(day))
            for day in set(signals) | set(novelty)}


def selection_summary(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy) -> dict[str, object]:
    """Counts per stream and priority, capped and thinned days and the expected judging cost."""
    row = con.execute(f"""
        SELECT count(*), {", ".join(f"count(*) FILTER (by_{s})" for s in STREAMS)},
               {", ".join(f"count(*) FILTER (priority = '{p}')" for p in Priority)},
               count(DISTINCT day) FILTER (p_random < {policy.random_rate!r}), min(p_random),
               count(DISTINCT day) FILTER (thinning < 1), min(thinning)
        FROM failure_candidates""").fetchall()[0]
    selected, streams, priorities = row[0], row[1:1 + len(STREAMS)], row[1 + len(STREAMS):-4]
    population = con.execute("SELECT count(*) FROM trace_signals").fetchall()[0][0]
    return {
        "selected": selected, "population": population,
        "selected_share": selected / population if population else 0.0,
        **{f"stream_{s}": n for s, n in zip(STREAMS, streams)},
        **{f"priority_{p}": n for p, n in zip(Priority, priorities)},
        # days whose random draws exceeded the random stream's cap, and its lowest rate then
        "days_random_capped": row[-4],
        "min_random_rate": row[-3] if row[-3] is not None else policy.random_rate,
        "days_thinned": row[-2], "min_thinning": row[-1] if row[-1] is not None else 1.0,
        "expected_judge_cost_usd": round(selected * policy.judge_cost_usd, 6),
    }
