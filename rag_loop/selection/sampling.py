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
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from datetime import date

import duckdb

from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.engines.incremental import Fingerprints, combined, table_fingerprints
from rag_loop.engines.sampling import (
    DIAGNOSTIC_STREAMS,
    INPUTS,
    STREAMS,
    PolicyDays,
    candidates_expression,
    candidates_of_days_expression,
)
from rag_loop.schema import Priority
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


def select_candidates(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy, engine: Engine | None = None,
                      days: Collection[date] | None = None) -> int:
    """(Re)build `failure_candidates` from `trace_signals` (and `trace_novelty`'s rates, if any)
    on `engine` (default: DuckDB on `con`; rag_loop.engines.sampling holds the one definition);
    with `days`, only those days' selection, which replaces theirs. Returns the number selected
    (on `days`, when given)."""
    if not has_table(con, NOVELTY_TABLE):
        con.execute(NOVELTY_DDL)  # no novelty judged yet: its stream draws nothing
    engine = engine or DuckDBEngine()
    if days is None:
        return engine.run(con, "failure_candidates", INPUTS, candidates_expression, policy)
    return engine.run(con, "failure_candidates", INPUTS, candidates_of_days_expression,
                      PolicyDays(policy, tuple(sorted(days))), days)


def candidate_inputs(con: duckdb.DuckDBPyConnection, policy: SamplingPolicy) -> Fingerprints:
    """Per day with signals or novelty judgements, a fingerprint of what its selection is made
    from: the policy and that day's rows of both."""
    signals, novelty = table_fingerprints(con, "trace_signals"), table_fingerprints(con, NOVELTY_TABLE)
    return {day: combined(policy.fingerprint(), signals.get(day), novelty.get(day))
            for day in set(signals) | set(novelty)}


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
