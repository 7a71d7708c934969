"""A run as a quality vector per slice, compared with a baseline, judged by gates.

Never one averaged score (seed 000 §13): per metric and slice the mean, median, pass rate,
10th percentile and the count of severe failures, with errored cases counted apart.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd

SLICES = ("all", "language", "query_type", "origin", "failure_type", "tag")


def summarize(results: pd.DataFrame, severe_below: float = 0.3,
              slices: Sequence[str] = SLICES) -> pd.DataFrame:
    """Per metric × slice value: n, errored, mean, median, pass_rate, p10, severe (floats).
    Errored cases count in n and errored only; a case without a verdict is not in pass_rate."""
    errored = results["errored"].astype(bool)
    score = results["score"].astype(float).where(~errored)
    known = results["passed"].notna() & ~errored
    # one vectorised aggregation per slice: a groupby.apply of a Series per group cost ~7 ms a group
    measures = pd.DataFrame({
        "metric": results["metric"], "errored": errored.astype(float), "score": score,
        "passed": np.where(known, results["passed"].where(known, False).astype(bool), np.nan),
        "severe": (score < severe_below).astype(float)}, index=results.index)
    frames = []
    for dimension in slices:
        if dimension == "all":
            keyed = measures.assign(slice="all", slice_value="all")
        elif dimension == "tag":
            tags = results["tags"].explode().dropna()
            keyed = measures.loc[tags.index].assign(slice="tag", slice_value=tags.astype(str).to_numpy())
        else:
            keyed = measures.assign(slice=dimension, slice_value=results[dimension].fillna("(none)").astype(str))
        groups = keyed.groupby(["metric", "slice", "slice_value"], sort=True)
        table = groups.agg(n=("score", "size"), errored=("errored", "sum"), mean=("score", "mean"),
                           median=("score", "median"), pass_rate=("passed", "mean"))
        table["p10"] = groups["score"].quantile(0.1)
        table["severe"] = groups["severe"].sum()
        frames.append(table.astype(float).reset_index())
    return pd.concat(frames, ignore_index=True)


def compare(summary: pd.DataFrame, baseline: pd.DataFrame | None) -> pd.DataFrame:
    """The summary with baseline figures and deltas (in points of 0-1 scores) joined in."""
    if baseline is None or baseline.empty:
        return summary.assign(baseline_mean=np.nan, baseline_pass_rate=np.nan,
                              delta_mean=np.nan, delta_pass_rate=np.nan)
    keys = ["metric", "slice", "slice_value"]
    joined = summary.merge(baseline[keys + ["mean", "pass_rate"]].rename(
        columns={"mean": "baseline_mean", "pass_rate": "baseline_pass_rate"}), on=keys, how="left")
    joined["delta_mean"] = joined["mean"] - joined["baseline_mean"]
    joined["delta_pass_rate"] = joined["pass_rate"] - joined["baseline_pass_rate"]
    return joined


def flips(results: pd.DataFrame, baseline_results: pd.DataFrame | None) -> pd.DataFrame:
    """Cases × metrics that passed in the baseline and fail (or error) now."""
    columns = ["golden", "metric", "input", "baseline_score", "score", "errored", "actual_output"]
    if baseline_results is None or baseline_results.empty:
        return pd.DataFrame(columns=columns)
    before = baseline_results[baseline_results["passed"].eq(True)][["golden", "metric", "score"]]
    now = results.merge(before.rename(columns={"score": "baseline_score"}), on=["golden", "metric"])
    flipped = now[now["passed"].eq(False) | now["errored"]]
    return flipped[columns].sort_values(["metric", "golden"]).reset_index(drop=True)


@dataclass(frozen=True)
class Gate:
    """A rule on one metric: pass rate / mean floors and a maximum drop against the baseline,
    checked on the whole run and on every slice value with at least `min_cases` cases."""

    metric: str
    min_pass_rate: float | None = None
    min_mean: float | None = None
    max_drop: float | None = None  # in points of pass rate (0.10 = 10 points)
    slices: tuple[str, ...] = ("all",)
    min_cases: int = 3
    blocking: bool = True  # hard gate (ERROR) or monitoring (WARN)
    # a drop with no baseline figure (no baseline run, or a slice value it lacks) is not
    # evaluated: "warn" says so beside the verdict, "block" makes it a failure of the gate
    without_baseline: str = "warn"

    def __post_init__(self) -> None:
        if self.without_baseline not in ("warn", "block"):
            raise ValueError(f"without_baseline {self.without_baseline!r}: expected 'warn' or 'block'")


@dataclass
class GateOutcome:
    """A gate's verdict: failures, and the checks it could not evaluate (missing data is its
    own verdict, never a pass)."""

    gate: Gate
    passed: bool
    failures: list[dict[str, Any]] = field(default_factory=list)
    not_evaluated: list[dict[str, Any]] = field(default_factory=list)


NO_BASELINE_FIGURE = "no baseline figure: drop not evaluated"


def evaluate_gates(table: pd.DataFrame, gates: Sequence[Gate],
                   without_baseline: str = NO_BASELINE_FIGURE) -> list[GateOutcome]:
    """Each gate against the compared summary; a failure names its slice and figures. A drop
    that cannot be computed (no baseline figure) is listed as not evaluated, saying why
    (`without_baseline`: e.g. that the baseline was judged by another judge version), and
    fails the gate when the gate says so (`without_baseline="block"`)."""
    outcomes = []
    for gate in gates:
        mine = table[table["metric"] == gate.metric]
        enough = (mine["n"] - mine["errored"]) >= gate.min_cases
        rows = mine[(mine["slice"] == "all") | (mine["slice"].isin(gate.slices) & enough)]
        failures, not_evaluated = [], []
        for row in rows.to_dict("records"):
            problems = []
            where = {"slice": row["slice"], "value": row["slice_value"], "n": int(row["n"])}
            if gate.min_pass_rate is not None and not row["pass_rate"] >= gate.min_pass_rate:
                problems.append(f"pass rate {row['pass_rate']:.2f} < {gate.min_pass_rate:.2f}")
            if gate.min_mean is not None and not row["mean"] >= gate.min_mean:
                problems.append(f"mean {row['mean']:.2f} < {gate.min_mean:.2f}")
            if gate.max_drop is not None and pd.isna(row["delta_pass_rate"]):
                reason = f"{without_baseline}{' (blocks)' if gate.without_baseline == 'block' else ''}"
                not_evaluated.append({**where, "problems": reason})
                if gate.without_baseline == "block":
                    problems.append(reason)
            elif gate.max_drop is not None and row["delta_pass_rate"] < -gate.max_drop:
                problems.append(f"pass rate dropped {-row['delta_pass_rate'] * 100:.0f} points "
                                f"(> {gate.max_drop * 100:.0f}) vs baseline")
            if problems:
                failures.append({**where, "problems": "; ".join(problems)})
        outcomes.append(GateOutcome(gate, not failures, failures, not_evaluated))
    return outcomes


def _where(failure: dict[str, Any]) -> str:
    return "the whole run" if failure.get("slice", "all") == "all" else f"{failure['slice']}={failure['value']}"


def failure_words(failure: dict[str, Any]) -> str:
    """One gate failure (an entry of eval_runs.gate_failures) in words: `Correctness [GEval] on
    language=vi (n=26): pass rate dropped 12 points (> 10) vs baseline`."""
    count = f" (n={failure['n']})" if failure.get("n") is not None else ""
    return f"{failure['metric']} on {_where(failure)}{count}: {failure['problems']}"


def verdict(failures: Sequence[dict[str, Any]], baseline_note: str | None = None) -> str:
    """A run's verdict in one line, the reason first: `BLOCKED by its hard gates: Correctness
    [GEval] on language=vi: pass rate dropped 12 points (> 10) vs baseline; on query_type=policy:
    ...` (the blocking failures, grouped by metric), else `passes its hard gates`; then, in
    brackets, what the comparison with the baseline cannot be trusted for (`baseline_note`,
    e.g. a baseline judged by another judge version), unless a failure already says it."""
    by_metric: dict[str, list[str]] = {}
    for failure in failures:
        if failure.get("blocking", True):
            by_metric.setdefault(failure["metric"], []).append(f"on {_where(failure)}: {failure['problems']}")
    words = "BLOCKED by its hard gates: " + "; ".join(f"{metric} {'; '.join(found)}"
                                                     for metric, found in by_metric.items()) \
        if by_metric else "passes its hard gates"
    return f"{words} ({baseline_note})" if baseline_note and baseline_note not in words else words


def judged_by(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The judge version that scored a stored run (None: not recorded, a run from before versions were)."""
    rows = con.execute("SELECT judge FROM eval_runs WHERE run_id = ?", [run_id]).fetchall()
    if not rows or not rows[0][0]:
        return None
    return (json.loads(rows[0][0]) or {}).get("judge_version") or None


def baseline_note(con: duckdb.DuckDBPyConnection, baseline_id: str | None, version: str,
                  named: bool) -> str | None:
    """What is wrong with comparing a run scored by judge `version` with its baseline, in words
    (None: nothing, the same judge version scored both). A baseline judged by another version is
    another instrument: its figures are not compared unless the user named it (`named`)."""
    if baseline_id is None:
        return None
    baseline = judged_by(con, baseline_id)
    if baseline == version:
        return None
    words = f"baseline {baseline_id} judged by {baseline or 'an unrecorded judge version'}, not {version}"
    if named:
        return f"{words}: compared as baseline_run asks, two instruments"
    return f"{words}, not comparable: re-run the baseline or pass baseline_run"


def baseline_run(con: duckdb.DuckDBPyConnection, release: str, run_id: str,
                 named: str | None = None) -> str | None:
    """A named run, else the latest earlier run on the same release that passed its hard gates."""
    if named:
        found = con.execute("SELECT run_id FROM eval_runs WHERE run_id = ?", [named]).fetchall()
        if not found:
            raise ValueError(f"baseline run {named!r} not found")
        return named
    rows = con.execute("""SELECT run_id FROM eval_runs WHERE release_version = ? AND run_id <> ?
                          AND NOT coalesce(blocked, false)
                          AND started_at <= (SELECT started_at FROM eval_runs WHERE run_id = ?)
                          ORDER BY started_at DESC LIMIT 1""", [release, run_id, run_id]).fetchall()
    return rows[0][0] if rows else None


def load_results(con: duckdb.DuckDBPyConnection, run_id: str | None) -> pd.DataFrame | None:
    if run_id is None:
        return None
    return con.execute("SELECT * FROM eval_results WHERE run_id = ?", [run_id]).df()
