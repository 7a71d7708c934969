"""Failure-rate estimates per day and slice that do not lie about overall quality (seed 004 §08).

For every outcome (a boolean column of `trace_signals`) three numbers sit side by side:
- `random_rate`: the random stream alone, with its N and a Wilson interval;
- `ht_rate`: Horvitz–Thompson over every selected trace, each weighted by 1/π;
- `naive_rate_biased`: the plain rate of the selected set, which the diagnostic streams
  inflate on purpose; it is there to be compared, never to be reported as quality.
Signals are computed on every trace, so the exact `population_rate` is shown too: it is the
yardstick the estimators are checked against. Judge-based outcomes, known only for selected
traces, use the same estimators.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import date

import duckdb
import numpy as np
import pandas as pd

from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.engines.incremental import Fingerprints, combined, table_fingerprints
from rag_loop.selection.estimate_expressions import INPUTS, SliceCounts, slice_counts_expression
from rag_loop.selection.signals import SIGNALS, SLICE_COLUMNS
from rag_loop.store.tables import has_table, replace_days, replace_table

TABLE = "quality_estimates"
OUTCOMES = (*SIGNALS, "any_signal")
DEFAULT_SLICES: tuple[tuple[str, ...], ...] = (
    (), *((c,) for c in SLICE_COLUMNS), ("prompt_version", "language"),
    ("query_type", "language"))


def wilson_interval(failures: np.ndarray, n: np.ndarray,
                    confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval of a binomial proportion, elementwise; NaN where n is 0."""
    # norm.ppf is ndtri; scipy.stats would take a second to import, scipy.special a third
    from scipy.special import ndtri
    failures, n = np.asarray(failures, dtype=float), np.asarray(n, dtype=float)
    z = ndtri(0.5 + confidence / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = failures / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def parse_slices(specs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """Slices from config strings such as "language" or "prompt_version,language"."""
    slices = [tuple(d.strip() for d in spec.split(",") if d.strip()) for spec in specs]
    for dims in slices:
        if unknown := set(dims) - set(SLICE_COLUMNS):
            raise ValueError(f"unknown slice columns {sorted(unknown)}; known: {list(SLICE_COLUMNS)}")
    return tuple(dict.fromkeys([(), *slices]))  # the whole population always comes first


def estimate_rates(con: duckdb.DuckDBPyConnection,
                   slices: Sequence[tuple[str, ...]] = DEFAULT_SLICES,
                   outcomes: Sequence[str] = OUTCOMES, confidence: float = 0.95,
                   engine: Engine | None = None, days: Collection[date] | None = None) -> pd.DataFrame:
    """Long table: one row per day, slice value and outcome, with the three estimates; the
    counts on `engine` (default: DuckDB on `con`; rag_loop.selection.estimate_expressions); of `days` only,
    when given (the rows the whole table has for them)."""
    wanted = SliceCounts(tuple(tuple(dims) for dims in slices), tuple(outcomes),
                         tuple(sorted(days)) if days is not None else None)
    wide = (engine or DuckDBEngine()).frame(con, INPUTS, slice_counts_expression, wanted)
    frames = [_slice_estimates(wide[wide["slice_order"] == i].drop(columns="slice_order"), dims)
              for i, dims in enumerate(wanted.slices)]
    result = pd.concat(frames, ignore_index=True)
    low, high = wilson_interval(result["random_failures"], result["random_n"], confidence)
    result.insert(result.columns.get_loc("random_rate") + 1, "random_ci_low", low)
    result.insert(result.columns.get_loc("random_ci_low") + 1, "random_ci_high", high)
    return result


_COLUMNS = ["day", "slice", "slice_value", "outcome", "population_n", "population_failures",
            "population_rate", "random_n", "random_failures", "random_rate", "ht_rate",
            "selected_n", "selected_failures", "naive_rate_biased"]


def _slice_estimates(wide: pd.DataFrame, dims: tuple[str, ...]) -> pd.DataFrame:
    if wide.empty:  # no traffic on the days asked for: no rows, the table's columns
        kinds = {"day": "datetime64[us]", "slice": "string", "slice_value": "string", "outcome": "string"}
        return pd.DataFrame({column: pd.Series(dtype=kinds.get(column, "float64")) for column in _COLUMNS})
    shared = ["day", "slice_value", "population_n", "random_n", "selected_n"]
    long = wide.melt(id_vars=shared, var_name="measure")
    long[["outcome", "measure"]] = long["measure"].str.split("|", expand=True)
    table = long.pivot_table(index=[*shared, "outcome"], columns="measure", values="value",
                             sort=False).reset_index()
    table.insert(1, "slice", " × ".join(dims) if dims else "all")
    n, random_n, selected_n = table["population_n"], table["random_n"], table["selected_n"]
    table["population_rate"] = table["population_failures"] / n
    table["random_rate"] = (table["random_failures"] / random_n).where(random_n > 0)
    table["ht_rate"] = table["ht_weighted_failures"] / n
    table["naive_rate_biased"] = (table["selected_failures"] / selected_n).where(selected_n > 0)
    return table[_COLUMNS]


def estimate_inputs(con: duckdb.DuckDBPyConnection, slices: Sequence[tuple[str, ...]],
                    confidence: float, outcomes: Sequence[str] = OUTCOMES) -> Fingerprints:
    """Per day with signals, a fingerprint of what its estimates are made from: the slices,
    outcomes and confidence, and that day's signals and candidates."""
    signals, candidates = table_fingerprints(con, "trace_signals"), table_fingerprints(con, "failure_candidates")
    fixed = (tuple(map(tuple, slices)), tuple(outcomes), confidence)
    return {day: combined(*fixed, signals[day], candidates.get(day)) for day in signals}


def update_estimates(con: duckdb.DuckDBPyConnection, slices: Sequence[tuple[str, ...]] = DEFAULT_SLICES,
                     confidence: float = 0.95, engine: Engine | None = None,
                     days: Collection[date] | None = None) -> None:
    """`estimate_rates` stored as quality_estimates: the whole table, or the rows of `days`."""
    store_estimates(con, estimate_rates(con, slices, confidence=confidence, engine=engine, days=days), days)


def store_estimates(con: duckdb.DuckDBPyConnection, estimates: pd.DataFrame,
                    days: Collection[date] | None = None) -> None:
    """`estimates` as the table quality_estimates, or in place of its rows of `days` (in one
    transaction)."""
    if days is None or not has_table(con, TABLE):
        replace_table(con, TABLE, estimates)
    else:
        replace_days(con, TABLE, days, estimates)


def pooled_rates(estimates: pd.DataFrame, outcome: str = "any_signal") -> dict[str, float]:
    """Whole-period rates of one outcome over the `all` slice: population, random, HT, naive.
    The random stream's is stratified by day (each day's rate weighted by its traffic, days
    without random draws left out): a day whose random draws the budget capped was sampled at
    a lower rate than the others, so its draws must not count alike."""
    rows = estimates[(estimates["slice"] == "all") & (estimates["outcome"] == outcome)]
    if rows.empty:
        return {}
    n = rows["population_n"].sum()
    drawn = rows[rows["random_n"] > 0]
    return {
        "population_rate": float(rows["population_failures"].sum() / n),
        "random_rate": float((drawn["random_rate"] * drawn["population_n"]).sum() / drawn["population_n"].sum())
        if len(drawn) else 0.0,
        "ht_rate": float((rows["ht_rate"] * rows["population_n"]).sum() / n),
        "naive_rate_biased": float(rows["selected_failures"].sum() / max(rows["selected_n"].sum(), 1)),
    }
