"""Golden coverage of production (seed 004 §16, issue 48): per day, intent and slice, how much of
the day's traffic falls in an intent the newest golden release holds a golden of.

Volumes are Horvitz–Thompson: every trace has an intent only once it is a selected candidate
(`trace_clusters` maps each of `failure_candidates` to its cluster), and each candidate stands
for 1/π traces of the day (π: its recorded inclusion probability, at least the random stream's
rate, so every trace of the day could have been drawn). An intent's volume is Σ 1/π over its
candidates; the covered share is the ratio Σ 1/π covered / Σ 1/π of all the day's candidates
(a Hájek ratio: always in [0, 1], steadier than dividing by the exact traffic); the estimated
covered traffic is that share × the day's exact trace count from `raw_traces`.

The two traffic-sized reads — the exact traffic per slice value, and the candidates grouped by
day, slice values, intent and outcome with their count and Σ 1/π — are Ibis expressions that run
on either engine (rag_loop.goldens.coverage_expressions; DuckDB by default, Spark over the trace
lake): what reaches pandas here is a few rows per intent and slice value, never one per trace.

A golden covers the intent of its trace (`trace_clusters`, today's clustering); a golden whose
trace is no longer clustered covers the cluster its release recorded, if that cluster still
exists, else nothing (counted as `goldens_unplaced`). Candidates without a cluster (selected
after the last clustering run) are the `(unassigned)` intent, never covered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from rag_loop.drift.checks import Limit, Verdict, assess
from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.goldens.coverage_expressions import (
    OPTIONAL,
    SLICES,
    UNASSIGNED,
    CoverageWindow,
    sampled_expression,
    traffic_expression,
)
from rag_loop.store.ddl import utc_day
from rag_loop.store.releases import read_goldens, release_versions
from rag_loop.store.tables import has_table, replace_day

CHECK = "golden_coverage_share"
SAMPLED_COLUMNS = ["day", *SLICES, "cluster_id", "assessed", "failed", "n", "weight"]


@dataclass(frozen=True)
class CoverageSettings:
    """The share of traffic that must be covered, and when an intent's failure rate rises."""

    # a starting floor: a quarter of the day's traffic in intents with a golden; raise it as the
    # set grows (the demo's second release covers 24-37 % a day)
    min_share: Limit = Limit(warn=0.25, error=None, higher_is_bad=False, min_sample=30)
    baseline_days: int = 7  # trailing days an intent's failure rate is compared with
    rising_by: float = 0.25  # failure-rate increase (points of 1) that counts as rising
    min_assessed: int = 5  # judged or labelled traces of an intent on the day, for its rate
    top: int = 10  # largest uncovered / rising intents listed


@dataclass(frozen=True)
class GoldenSet:
    """A release's goldens as coverage needs them: name, trace and recorded cluster."""

    version: str | None
    goldens: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        columns=["golden", "trace_id", "cluster_id"]))


def release_goldens(goldens_dir: Path, version: str | None = None) -> GoldenSet:
    """The goldens of release `version` (default: the newest) in `goldens_dir`; no release →
    GoldenSet(None)."""
    versions = release_versions(Path(goldens_dir))
    if not versions or (version is not None and version not in versions):
        return GoldenSet(None)
    chosen = version or versions[-1]
    rows = [{"golden": g.get("name"), "trace_id": (g.get("additional_metadata") or {}).get("trace_id"),
             "cluster_id": (g.get("additional_metadata") or {}).get("cluster_id")}
            for g in read_goldens(Path(goldens_dir), chosen)]
    return GoldenSet(chosen, pd.DataFrame(rows, columns=["golden", "trace_id", "cluster_id"]))


def golden_intents(con: duckdb.DuckDBPyConnection, goldens: GoldenSet) -> tuple[set[str], int]:
    """The intents the release covers, and how many of its goldens cover none (their trace is
    not clustered and their recorded cluster is gone)."""
    frame = goldens.goldens[["trace_id", "cluster_id"]].astype(object)
    if frame.empty:
        return set(), 0
    clustered = has_table(con, "trace_clusters")
    known = has_table(con, "intent_clusters")
    con.register("_coverage_goldens", frame)
    try:
        rows = con.execute(f"""
            SELECT coalesce({'tc.cluster_id' if clustered else 'NULL'},
                            {'ic.cluster_id' if known else 'NULL'}) AS intent
            FROM _coverage_goldens g
            {'LEFT JOIN trace_clusters tc ON tc.trace_id = g.trace_id' if clustered else ''}
            {'LEFT JOIN intent_clusters ic ON ic.cluster_id = g.cluster_id' if known else ''}
            """).fetchall()
    finally:
        con.unregister("_coverage_goldens")
    intents = [r[0] for r in rows]
    return {i for i in intents if i is not None}, sum(i is None for i in intents)


def day_traffic(con: duckdb.DuckDBPyConnection, day: date, last: date | None = None,
                engine: Engine | None = None) -> pd.DataFrame:
    """The exact trace count of the day (or of days `day`..`last`) per slice value (slice 'all'
    included), on `engine` (default DuckDB)."""
    if not has_table(con, "raw_traces"):
        return pd.DataFrame(columns=["slice", "slice_value", "traffic"])
    frame = (engine or DuckDBEngine()).frame(con, ("raw_traces",), traffic_expression,
                                             CoverageWindow(day, last or day, ()))
    frame = frame[frame["traffic"] > 0].astype({"traffic": "int64"})
    return frame.sort_values(["slice", "slice_value"], ignore_index=True)[["slice", "slice_value", "traffic"]]


def sampled_traces(con: duckdb.DuckDBPyConnection, first: date, last: date,
                   engine: Engine | None = None) -> pd.DataFrame:
    """The candidates of days `first`..`last` grouped by day, slices, intent and whether a judge or
    a curator assessed them (`assessed`) and found them failing (`failed`): how many (`n`) and the
    traffic they stand for (`weight`, Σ 1/π), on `engine` (default DuckDB)."""
    if not (has_table(con, "raw_traces") and has_table(con, "failure_candidates")):
        return pd.DataFrame(columns=SAMPLED_COLUMNS)
    window = CoverageWindow(first, last, tuple(t for t in OPTIONAL if has_table(con, t)))
    frame = (engine or DuckDBEngine()).frame(con, window.inputs(), sampled_expression, window)
    frame["day"] = pd.to_datetime(frame["day"]).dt.date
    frame = frame.astype({"assessed": bool, "failed": bool, "n": "int64", "weight": "float64"})
    return frame.sort_values(SAMPLED_COLUMNS[:-2], ignore_index=True)[SAMPLED_COLUMNS]


@dataclass
class CoverageDay:
    """One day's coverage: per slice value (`summary`), per intent and slice value (`intents`)."""

    summary: pd.DataFrame
    intents: pd.DataFrame
    release: str | None
    goldens_unplaced: int = 0


def _failure_rate(group: pd.DataFrame) -> tuple[int, float]:
    """The assessed traces of `group` (rows of `sampled_traces`) and their weighted failure rate."""
    assessed = group[group["assessed"]]
    weight = assessed["weight"].sum()
    failed = assessed.loc[assessed["failed"], "weight"].sum()
    return int(assessed["n"].sum()), (float(failed / weight) if len(assessed) and weight > 0 else np.nan)


def _failure_rates(frame: pd.DataFrame) -> dict[str, tuple[int, float]]:
    """`_failure_rate` of each intent of `frame`, in one pass."""
    assessed = frame[frame["assessed"]]
    if not len(assessed):
        return {}
    sums = assessed.assign(failed_weight=assessed["weight"].where(assessed["failed"], 0.0)).groupby(
        "cluster_id").agg(n=("n", "sum"), weight=("weight", "sum"), failed=("failed_weight", "sum"))
    return {intent: (int(r.n), float(r.failed / r.weight) if r.weight > 0 else np.nan)
            for intent, r in zip(sums.index, sums.itertuples())}


def compute_coverage(traffic: pd.DataFrame, traces: pd.DataFrame, day: date, covered: set[str] | None,
                     labels: dict[str, str] | None = None,
                     settings: CoverageSettings = CoverageSettings()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pure: the day's summary per slice value and its rows per intent and slice value, from the
    day's exact traffic (`day_traffic`), the sampled traces of the day and the baseline window
    (`sampled_traces`: grouped, with their count `n` and Σ 1/π `weight`) and the intents the
    release covers (None: no release)."""
    labels = labels or {}
    traces = traces.astype({"assessed": bool, "failed": bool})
    days = pd.to_datetime(traces["day"]).dt.date if len(traces) else traces["day"]
    today, before = traces[days == day], traces[days < day]
    baseline_rate = _failure_rate(before)[1] if len(before) else np.nan
    rates_today, rates_before = _failure_rates(today), _failure_rates(before)
    intent_rows, summary_rows = [], []
    exact = {(r.slice, r.slice_value): int(r.traffic) for r in traffic.itertuples()}
    for slice_name in ("all", *SLICES):
        values = today.assign(all="all").groupby(slice_name) if len(today) else []
        for value, group in values:
            total = float(group["weight"].sum())
            for intent, members in group.groupby("cluster_id"):
                volume = float(members["weight"].sum())
                is_covered = None if covered is None else intent in covered
                row = {"slice": slice_name, "slice_value": str(value), "cluster_id": intent,
                       "label": labels.get(intent, ""), "n": int(members["n"].sum()), "volume": volume,
                       "share": volume / total if total > 0 else np.nan, "covered": is_covered}
                if slice_name == "all":
                    assessed, rate = rates_today.get(intent, (0, np.nan))
                    own_n, own_rate = rates_before.get(intent, (0, np.nan))
                    base = own_rate if own_n >= settings.min_assessed else baseline_rate
                    row |= {"assessed": assessed, "failure_rate": rate, "baseline_failure_rate": base,
                            "rising": bool(is_covered is not True and assessed >= settings.min_assessed
                                           and not np.isnan(rate) and not np.isnan(base)
                                           and rate - base >= settings.rising_by)}
                intent_rows.append(row)
            covered_weight = float(group.loc[group["cluster_id"].isin(covered or set()), "weight"].sum())
            share = None if covered is None or total <= 0 else covered_weight / total
            uncovered = group[~group["cluster_id"].isin(covered or set())]
            summary_rows.append({
                "slice": slice_name, "slice_value": str(value),
                "traffic": exact.get((slice_name, str(value)), 0), "n": int(group["n"].sum()), "volume": total,
                "covered_share": share,
                "covered_traffic": None if share is None else share * exact.get((slice_name, str(value)), 0),
                "intents": int(group["cluster_id"].nunique()),
                "covered_intents": None if covered is None else len(set(group["cluster_id"]) & covered),
                "unassigned_share": float(group.loc[group["cluster_id"] == UNASSIGNED, "weight"].sum() / total)
                if total > 0 else None,
                "largest_uncovered": _largest(uncovered.groupby("cluster_id")["weight"].sum(), 3)})
    for (slice_name, value), count in exact.items():  # traffic with no sampled trace: no estimate
        if not any(r["slice"] == slice_name and r["slice_value"] == value for r in summary_rows):
            summary_rows.append({"slice": slice_name, "slice_value": value, "traffic": count, "n": 0,
                                 "volume": 0.0, "covered_share": None, "covered_traffic": None,
                                 "intents": 0, "covered_intents": None, "unassigned_share": None,
                                 "largest_uncovered": []})
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS).astype(
        {"traffic": "int64", "n": "int64", "volume": "float64", "covered_share": "Float64",
         "covered_traffic": "Float64", "intents": "int64", "covered_intents": "Int64",
         "unassigned_share": "Float64"})
    intents = pd.DataFrame(intent_rows, columns=INTENT_COLUMNS).astype(
        {"n": "int64", "volume": "float64", "share": "Float64", "covered": "boolean", "assessed": "Int64",
         "failure_rate": "Float64", "baseline_failure_rate": "Float64", "rising": "boolean"})
    order = intents.assign(_volume=intents["volume"].round(VOLUME_DIGITS))
    order = order.sort_values(["slice", "slice_value", "_volume", "cluster_id"], ascending=[True, True, False, True])
    return summary, intents.loc[order.index].reset_index(drop=True)


# volumes are sums of 1/π in whatever order an engine adds them: equal volumes may differ in their
# last bits, so they are ranked rounded (ties by cluster id), the same on every engine
VOLUME_DIGITS = 9


def _largest(volumes: pd.Series, top: int) -> list[str]:
    """The ids of the `top` largest volumes (rounded, ties by id)."""
    frame = pd.DataFrame({"id": volumes.index, "volume": volumes.to_numpy().round(VOLUME_DIGITS)})
    return frame.sort_values(["volume", "id"], ascending=[False, True]).head(top)["id"].tolist()


SUMMARY_COLUMNS = ["slice", "slice_value", "traffic", "n", "volume", "covered_share", "covered_traffic",
                   "intents", "covered_intents", "unassigned_share", "largest_uncovered"]
INTENT_COLUMNS = ["slice", "slice_value", "cluster_id", "label", "n", "volume", "share", "covered",
                  "assessed", "failure_rate", "baseline_failure_rate", "rising"]


def intent_labels(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Cluster id → its c-TF-IDF label (or medoid query)."""
    if not has_table(con, "intent_clusters"):
        return {}
    return dict(con.execute("SELECT cluster_id, coalesce(nullif(label, ''), medoid_query, '') "
                            "FROM intent_clusters").fetchall())


def coverage_of_day(con: duckdb.DuckDBPyConnection, day: date, goldens: GoldenSet,
                    settings: CoverageSettings = CoverageSettings(), engine: Engine | None = None) -> CoverageDay:
    """The day's coverage by release `goldens`, computed (not stored); the traffic-sized reads on
    `engine` (default DuckDB)."""
    covered, unplaced = golden_intents(con, goldens) if goldens.version else (None, 0)
    traces = sampled_traces(con, day - timedelta(days=settings.baseline_days), day, engine)
    summary, intents = compute_coverage(day_traffic(con, day, engine=engine), traces, day, covered,
                                        intent_labels(con), settings)
    return CoverageDay(summary, intents, goldens.version, unplaced)


def coverage_day(con: duckdb.DuckDBPyConnection, day: date, goldens: GoldenSet,
                 settings: CoverageSettings = CoverageSettings(), engine: Engine | None = None) -> list[Verdict]:
    """Store the day's coverage (`golden_coverage`, `golden_coverage_intents`, that day's rows
    replaced) and its verdict: the covered share of the day's traffic against `min_share`."""
    result = coverage_of_day(con, day, goldens, settings, engine)
    meta = {"release": result.release, "goldens": len(goldens.goldens) if goldens.version else 0,
            "goldens_unplaced": result.goldens_unplaced}
    replace_day(con, "golden_coverage", day, result.summary.assign(**meta))
    replace_day(con, "golden_coverage_intents", day, result.intents.assign(release=result.release))
    return [verdict(result, settings)]


def verdict(result: CoverageDay, settings: CoverageSettings) -> Verdict:
    """The covered share of the day's traffic against its floor, with the sample size; no
    release, no traffic or no sampled trace: not evaluated (never a pass)."""
    overall = result.summary[result.summary["slice"] == "all"]
    row = overall.iloc[0] if len(overall) else None
    n = int(row["n"]) if row is not None else 0
    traffic = int(row["traffic"]) if row is not None else 0
    intents = result.intents[result.intents["slice"] == "all"]
    uncovered = intents[intents["covered"].ne(True)].head(settings.top)
    details = {"release": result.release, "traffic": traffic, "sampled": n,
               "largest_uncovered": [f"{c} {lbl}".strip() + f" ({v:.0f})" for c, lbl, v in
                                     zip(uncovered["cluster_id"], uncovered["label"], uncovered["volume"])],
               "rising_uncovered": intents.loc[intents["rising"].eq(True), "cluster_id"].tolist()}
    if result.release is None:
        return Verdict(CHECK, None, n, note="no golden release to cover the traffic", details=details,
                       evaluated=False)
    if traffic == 0:
        return Verdict(CHECK, None, 0, note="no traffic on the day", details=details, evaluated=False)
    if n == 0:
        return Verdict(CHECK, None, 0, note="no sampled trace with an intent on the day (run the loop)",
                       details=details, evaluated=False)
    return assess(CHECK, row["covered_share"], n, settings.min_share, **details)


def largest_uncovered(con: duckdb.DuckDBPyConnection, days: list[date], top: int = 10) -> pd.DataFrame:
    """The uncovered intents with the most traffic over `days` (stored rows, slice 'all')."""
    if not has_table(con, "golden_coverage_intents") or not days:
        return pd.DataFrame(columns=["cluster_id", "label", "volume", "days", "rising_days", "n"])
    return con.execute("""
        SELECT cluster_id, any_value(label) AS label, round(sum(volume), 1) AS volume,
               count(DISTINCT day) AS days, count(*) FILTER (rising) AS rising_days, sum(n) AS n
        FROM golden_coverage_intents
        WHERE slice = 'all' AND covered IS NOT TRUE AND day IN (SELECT unnest($days::DATE[]))
        GROUP BY cluster_id ORDER BY volume DESC, cluster_id LIMIT $top""",
                       {"days": sorted(days), "top": top}).df()


@dataclass
class CoverageChange:
    """How a release changed coverage against its parent, on the same window of traffic."""

    version: str
    parent: str | None
    first: date | None
    last: date | None
    slices: pd.DataFrame  # slice, slice_value, traffic, n, parent_share, share, change
    newly_covered: pd.DataFrame  # cluster_id, label, volume
    still_uncovered: pd.DataFrame  # cluster_id, label, volume


def coverage_change(con: duckdb.DuckDBPyConnection, release: GoldenSet, parent: GoldenSet,
                    days: int = 14, top: int = 10) -> CoverageChange | None:
    """Covered shares of the last `days` days of traffic (to the newest trace) under `parent`
    (none: nothing covered) and under `release`, per slice value; the intents the release newly
    covers and the largest it leaves uncovered. None without a release or traffic."""
    if release.version is None or not has_table(con, "raw_traces"):
        return None
    last = con.execute(f"SELECT max({utc_day()}) FROM raw_traces").fetchall()[0][0]
    if last is None:
        return None
    first = last - timedelta(days=days - 1)
    traces = sampled_traces(con, first, last).assign(day=last)  # the window as one day
    traffic = day_traffic(con, first, last)
    now, _ = golden_intents(con, release)
    before, _ = golden_intents(con, parent) if parent.version else (set(), 0)
    labels = intent_labels(con)
    after_summary, intents = compute_coverage(traffic, traces, last, now, labels)
    before_summary, _ = compute_coverage(traffic, traces, last, before, labels)
    keys = ["slice", "slice_value"]
    slices = after_summary[[*keys, "traffic", "n", "covered_share"]].merge(
        before_summary[[*keys, "covered_share"]].rename(columns={"covered_share": "parent_share"}), on=keys)
    slices = slices.rename(columns={"covered_share": "share"})
    slices["change"] = slices["share"] - slices["parent_share"]
    overall = intents[intents["slice"] == "all"]
    newly = overall[overall["cluster_id"].isin(now - before)]
    left = overall[overall["covered"].ne(True)]
    columns = ["cluster_id", "label", "volume"]
    return CoverageChange(release.version, parent.version, first, last,
                          slices[["slice", "slice_value", "traffic", "n", "parent_share", "share", "change"]],
                          newly[columns].head(top).reset_index(drop=True),
                          left[columns].head(top).reset_index(drop=True))


def release_coverage_change(con: duckdb.DuckDBPyConnection, goldens_dir: Path, version: str,
                            days: int = 14) -> CoverageChange | None:
    """`coverage_change` of release `version` in `goldens_dir` against the release before it."""
    versions = release_versions(Path(goldens_dir))
    if version not in versions:
        return None
    index = versions.index(version)
    parent = release_goldens(goldens_dir, versions[index - 1]) if index else GoldenSet(None)
    return coverage_change(con, release_goldens(goldens_dir, version), parent, days)


INTENT_COVERAGE_FILE = "intent_coverage.parquet"  # in the reports folder, for the curators' workspace


def intent_coverage(con: duckdb.DuckDBPyConnection, goldens: GoldenSet) -> pd.DataFrame:
    """Per intent over every stored day: its volume (Σ 1/π), days seen, whether `goldens`
    covers it and the volume it leaves uncovered (what the workspace's intents page sorts by)."""
    columns = ["cluster_id", "volume", "days", "covered", "uncovered_volume", "release"]
    if not has_table(con, "golden_coverage_intents"):
        return pd.DataFrame(columns=columns)
    frame = con.execute("""
        SELECT cluster_id, sum(volume) AS volume, count(DISTINCT day) AS days
        FROM golden_coverage_intents WHERE slice = 'all' GROUP BY 1 ORDER BY 2 DESC, 1""").df()
    covered, _ = golden_intents(con, goldens) if goldens.version else (None, 0)
    frame["covered"] = pd.array([None if covered is None else c in covered for c in frame["cluster_id"]],
                                dtype="boolean")
    # no release: nothing is covered, every intent's volume is uncovered
    frame["uncovered_volume"] = frame["volume"].where(~frame["covered"].fillna(False).to_numpy(dtype=bool), 0.0)
    frame["release"] = goldens.version
    return frame[columns]
