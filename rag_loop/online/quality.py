"""Judged quality as SLIs that stay honest (seed 004 §08-§09): per day, slice and metric, the
pass rate estimated from the random stream only, with the Horvitz–Thompson estimate over
every stream beside it, and the targeted streams' rates as labelled diagnostics.

- `random`: the judged traces the random stream drew; n, pass rate, Wilson interval. Over a
  window whose days had different random rates (a day's budget caps its random stream, so a
  busy day keeps a smaller share), each trace counts 1/p_random: the day-weighted rate, with
  Wilson's interval at Kish's effective sample size; with one rate it is the plain proportion.
- `horvitz_thompson`: every judged trace weighted by 1/π (π of the trace × the metric's rate):
  the Hájek ratio R = Σ w·pass / Σ w, with its linearised variance under independent (Poisson)
  draws, and a score interval: the variance taken at each hypothesised rate, as Wilson's
  interval does (`score_interval`).
- `diagnostic:<stream>`: the plain pass rate of the traces a targeted stream drew; biased on
  purpose (they were drawn for looking bad), `kind = diagnostic`, never an estimate.
A metric without a threshold has no pass rate; its (weighted) mean score is reported instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta

import duckdb
import numpy as np
import pandas as pd

from rag_loop.drift.checks import Verdict
from rag_loop.engines.engine import DuckDBEngine, Engine
from rag_loop.evaluation.trust import TrustSettings, judge_trust
from rag_loop.online.judgments import kept_verdicts
from rag_loop.selection.estimate_expressions import SEPARATOR, DaySlices, app_cost_expression, population_expression
from rag_loop.selection.estimates import DEFAULT_SLICES, wilson_interval
from rag_loop.selection.sampling import DIAGNOSTIC_STREAMS
from rag_loop.selection.signals import SLICE_COLUMNS
from rag_loop.store.ddl import ONLINE_DDL
from rag_loop.store.judgments import current_judge_version
from rag_loop.store.tables import replace_day


@dataclass(frozen=True)
class OnlineQualitySettings:
    slices: Sequence[tuple[str, ...]] = DEFAULT_SLICES
    confidence: float = 0.95
    slo_targets: Mapping[str, float] = field(default_factory=dict)  # metric -> lowest pass rate
    window_days: int = 7  # the SLO's sliding window, ending on the day
    min_sample: int = 30  # fewer judged traces in a window × slice: no verdict
    slo_estimator: str = "random"  # or "horvitz_thompson"
    daily_budget_usd: float | None = None  # evaluation cost per day; None: no check
    judge_version: str | None = None  # None: the version of the newest judging run
    trust: TrustSettings | None = None  # a trust floor: an untrusted judge's breach warns, never pages (ERROR)

    def __post_init__(self) -> None:
        if self.slo_estimator not in ("random", "horvitz_thompson"):
            raise ValueError(f"slo_estimator {self.slo_estimator!r}: 'random' or 'horvitz_thompson'")


def judged_traces(con: duckdb.DuckDBPyConnection, first: date, last: date, version: str) -> pd.DataFrame:
    """The judged rows of `version` for traces of days first..last that are still selected,
    with the trace's slice columns; beside them the earlier versions' verdicts `version` kept
    (days before its re-judging window: `rag_loop.online.judgments.kept_verdicts`), their
    `judge_version` saying which judge they are from."""
    con.execute(ONLINE_DDL)
    # the random stream's own rate of the trace's day; NULL where the selection predates it
    p_random = "c.p_random" if "p_random" in con.table("failure_candidates").columns else "NULL::DOUBLE AS p_random"
    kept = kept_verdicts(con, version, first=first, last=last)
    con.register("_kept", kept[["trace_id", "metric", "judge_version"]])
    try:
        return con.execute(f"""
            SELECT j.day, j.trace_id, j.metric, j.score, j.passed, j.by_random, j.streams,
                   j.inclusion_probability, {p_random}, {", ".join(f"s.{c}" for c in SLICE_COLUMNS)},
                   j.judge_version
            FROM trace_judgments j JOIN failure_candidates c USING (trace_id)
            JOIN trace_signals s USING (trace_id)
            WHERE j.status = 'judged' AND j.day BETWEEN ? AND ?
              AND (j.judge_version = ? OR (j.trace_id, j.metric, j.judge_version) IN
                   (SELECT (trace_id, metric, judge_version) FROM _kept))""",
                              [first, last, version]).df()
    finally:
        con.unregister("_kept")


def versions_used(judged: pd.DataFrame, version: str) -> str:
    """What `online_quality.judge_version` says: the version, and the earlier versions whose
    kept verdicts the figures use, with how many (never silently mixed)."""
    if "judge_version" not in judged.columns:
        return version
    earlier = judged.loc[judged["judge_version"] != version, "judge_version"].value_counts()
    if earlier.empty:
        return version
    kept = ", ".join(f"{v} ({n} of {len(judged)} verdicts)" for v, n in sorted(earlier.items()))
    return f"{version}; kept from earlier: {kept}"


def _slice_values(frame: pd.DataFrame, dims: tuple[str, ...]) -> pd.Series:
    if not dims:
        return pd.Series("all", index=frame.index)
    parts = [frame[d].astype("string").fillna("(none)") for d in dims]
    value = parts[0]
    for part in parts[1:]:
        value = value + " × " + part
    return value


_COLUMNS = ["slice", "slice_value", "metric", "estimator", "kind", "n", "passes", "pass_rate",
            "ci_low", "ci_high", "mean_score", "population_n"]


def quality_table(judged: pd.DataFrame, population: pd.DataFrame | None,
                  settings: OnlineQualitySettings) -> pd.DataFrame:
    """Estimator rows per slice value × metric of `judged` (one day or one window);
    `population` (slice, slice_value, population_n) gives each row its traffic, else 0."""
    counts = {} if population is None else {
        (slice_, value): int(n) for slice_, value, n in population[["slice", "slice_value", "population_n"]].itertuples(
            index=False)}
    if judged.empty:
        return pd.DataFrame([], columns=_COLUMNS)
    # every slice's groups numbered in one sequence (slice, then value and metric in order, as
    # groupby sorts them), so that one pass estimates them all
    metric, metrics = pd.factorize(judged["metric"], sort=True)
    rows, codes, slice_names, slice_values, metric_of = [], [], [], [], []
    for dims in settings.slices:
        value, values = pd.factorize(_slice_values(judged, dims), sort=True)
        key = value * len(metrics) + metric
        grouped = np.flatnonzero(metric >= 0)  # a row without a metric is in no group, as in groupby
        present, code = np.unique(key[grouped], return_inverse=True)
        rows.append(grouped)
        codes.append(code.reshape(-1) + len(slice_names))
        slice_names += [SEPARATOR.join(dims) if dims else "all"] * len(present)
        slice_values.append(np.asarray(values, dtype=object)[present // len(metrics)])
        metric_of.append(present % len(metrics))
    code = np.concatenate(codes)
    order = np.argsort(code, kind="stable")  # each group's rows together, in their order
    rows_in_order = np.concatenate(rows)[order]
    table = estimates({k: v[rows_in_order] for k, v in _judged_columns(judged).items()}, code[order],
                      settings.confidence)
    group = table.pop("group").to_numpy()
    table.insert(0, "slice", np.asarray(slice_names, dtype=object)[group])
    table.insert(1, "slice_value", np.concatenate(slice_values)[group])
    table.insert(2, "metric", np.asarray(metrics, dtype=object)[np.concatenate(metric_of)[group]])
    table["population_n"] = np.array([counts.get(key, 0) for key in zip(table["slice"], table["slice_value"])],
                                     dtype=np.int64)
    return table[_COLUMNS]


def _judged_columns(judged: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns `estimates` reads, as arrays; which diagnostic streams drew each trace is
    looked up once, not once per slice."""
    columns = {"passed": judged["passed"].astype(float).to_numpy(), "score": judged["score"].to_numpy(float),
               "pi": judged["inclusion_probability"].to_numpy(float), "by_random": judged["by_random"].to_numpy(bool),
               # the random stream's rate; unknown (NaN) for judgements stored before the column
               "p_random": judged["p_random"].to_numpy(float) if "p_random" in judged
               else np.full(len(judged), np.nan)}
    streams = judged["streams"].reset_index(drop=True).explode()  # indexed by row position
    for stream in DIAGNOSTIC_STREAMS:
        drawn = np.zeros(len(judged), dtype=bool)
        drawn[streams.index[(streams == stream).to_numpy(bool)]] = True
        columns[_drawn_by(stream)] = drawn
    return columns


def _drawn_by(stream: str) -> str:
    """The column `_judged_columns` adds: did this diagnostic stream draw the trace?"""
    return f"_drawn_by_{stream}"


def estimates(rows: Mapping[str, np.ndarray], code: np.ndarray, confidence: float) -> pd.DataFrame:
    """The estimator rows (see the module docstring) of each group: `rows` are the columns of
    `_judged_columns` sorted by their group number `code` (0, 1, …; a group's rows in their
    order). Every group at once, not pandas code per group (2,150 groups for the demo's 14
    days); each group's sums are numpy's sums of that group's array, so the figures are those
    of one group at a time. Rows ordered by group, then random, horvitz_thompson and the
    diagnostic streams that drew a trace of the group."""
    groups = int(code[-1]) + 1 if len(code) else 0

    def sums(values: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        """Σ values per group over the rows `where` (0 where a group has none)."""
        at = code if where is None else code[where]
        values = values if where is None else values[where]
        total = np.zeros(groups)
        if len(at):
            first = np.flatnonzero(np.r_[True, at[1:] != at[:-1]])
            total[at[first]] = np.add.reduceat(values, first)
        return total

    def count(where: np.ndarray) -> np.ndarray:
        return np.bincount(code[where], minlength=groups)

    passed, score = rows["passed"], rows["score"]
    known_pass, known_score = ~np.isnan(passed), ~np.isnan(score)
    passes_or_0 = np.where(known_pass, passed, 0.0)  # pandas' sum skips NaN: adds 0
    graded = count(known_pass) > 0  # a metric without a threshold has no pass rate
    blocks = []
    with np.errstate(divide="ignore", invalid="ignore"):
        # random: each trace 1/p_random, scaled to mean 1 (ones where a rate is unknown)
        random = rows["by_random"]
        n_random = count(random)
        inverse = 1.0 / rows["p_random"]
        unknown = count(random & np.isnan(inverse)) > 0
        weight = np.where(unknown[code], 1.0, inverse / (sums(inverse, random) / n_random)[code])
        weights = sums(weight, random)
        size = np.where(n_random > 0, weights ** 2 / sums(weight ** 2, random), 0.0)  # Kish: n when the rates agree
        weighted, scored = weight * passed, random & known_score
        rate = np.where((n_random > 0) & graded,
                        sums(np.where(np.isnan(weighted), 0.0, weighted), random) / weights, np.nan)
        low, high = wilson_interval(rate * size, size, confidence)
        blocks.append({"estimator": "random", "kind": "estimate", "n": n_random, "_keep": True,
                       "passes": np.where(graded, sums(passes_or_0, random), np.nan), "pass_rate": rate,
                       "ci_low": np.where(graded, low, np.nan), "ci_high": np.where(graded, high, np.nan),
                       "mean_score": np.where(count(scored) > 0, sums(weight * score, scored) / sums(weight, scored),
                                              np.nan)})
        # horvitz_thompson: the Hájek ratio, every trace weighted by 1/π
        pi = rows["pi"]
        weight, spread = 1.0 / pi, (1 - pi) / pi ** 2
        uncertain = spread > 0
        total = sums(weight)
        passes = sums(weight * passed)
        ratio = passes / total
        low, high = score_intervals(ratio, total, sums(weight, uncertain), sums(weight * passed, ~uncertain),
                                    sums(spread, uncertain), confidence)
        blocks.append({"estimator": "horvitz_thompson", "kind": "estimate", "_keep": True,
                       "n": np.bincount(code, minlength=groups),
                       **{k: np.where(graded, v, np.nan) for k, v in (
                           ("passes", passes), ("pass_rate", ratio), ("ci_low", low), ("ci_high", high))},
                       "mean_score": sums(weight * score) / total})
        for stream in DIAGNOSTIC_STREAMS:  # the plain rates of the traces a targeted stream drew
            drawn = rows[_drawn_by(stream)]
            n = count(drawn)
            stream_passes = np.where(graded, sums(passes_or_0, drawn), np.nan)
            blocks.append({"estimator": f"diagnostic:{stream}", "kind": "diagnostic", "n": n,
                           "passes": stream_passes, "pass_rate": np.where(graded, stream_passes / n, np.nan),
                           "ci_low": np.nan, "ci_high": np.nan,
                           "mean_score": sums(np.where(known_score, score, 0.0), drawn) / count(drawn & known_score),
                           "_keep": n > 0})
    table = pd.concat([pd.DataFrame({"group": np.arange(groups), "rank": rank, **block})
                       for rank, block in enumerate(blocks)], ignore_index=True)
    table = table[table.pop("_keep")]
    return table.sort_values(["group", "rank"], kind="stable").drop(columns="rank").reset_index(drop=True)


def score_intervals(ratio: np.ndarray, total: np.ndarray, drawn: np.ndarray, known: np.ndarray,
                    spread: np.ndarray, confidence: float, grid: int = 2001) -> tuple[np.ndarray, np.ndarray]:
    """Per group, every rate R0 with (R − R0)² <= z² V(R0), as Wilson's interval does for a plain
    proportion; `ratio` R, `total` Σ 1/π, `drawn` Σ 1/π and `spread` Σ (1 − π)/π² of the traces
    drawn with π < 1, `known` Σ pass/π of those drawn with certainty.

    V(R0) is the Hájek ratio's Poisson variance, Σ (1 − π)/π² E[(pass − R0)²] / (Σ w)², with the
    expectation taken under R0: traces drawn with certainty (π = 1) are known, so R0 implies
    the pass rate p of the others, and each of them contributes p(1 − p) + (p − R0)². The
    variance at the estimate itself is too small where the random stream drew few failures
    (bench/online_eval.py: 86 % coverage instead of 95 %)."""
    from scipy.special import ndtri  # norm.ppf, without scipy.stats' second of imports
    z2 = ndtri(0.5 + confidence / 2) ** 2
    r0 = np.linspace(0.0, 1.0, grid)
    low, high = ratio.astype(float), ratio.astype(float)  # every trace drawn with certainty: the rate is known
    for part in np.array_split(np.flatnonzero(drawn != 0), max(1, np.count_nonzero(drawn) // 256)):
        r, t, k, d, s = (a[part, None] for a in (ratio, total, known, drawn, spread))
        p = np.clip((r0 * t - k) / d, 0.0, 1.0)
        variance = s * (p * (1 - p) + (p - r0) ** 2) / t ** 2
        inside = (r - r0) ** 2 <= z2 * variance
        found = inside.any(axis=1)
        first, last = r0[inside.argmax(axis=1)], r0[grid - 1 - inside[:, ::-1].argmax(axis=1)]
        low[part] = np.where(found, np.minimum(first, ratio[part]), ratio[part])
        high[part] = np.where(found, np.maximum(last, ratio[part]), ratio[part])
    return low, high


def window_first(day: date, settings: OnlineQualitySettings) -> date:
    """The first day of the SLO window ending on `day`."""
    return day - timedelta(days=settings.window_days - 1)


def slo_verdict(con: duckdb.DuckDBPyConnection, day: date, version: str,
                settings: OnlineQualitySettings, judged: pd.DataFrame | None = None) -> Verdict:
    """One verdict for the window ending on `day`: every slice × metric whose estimated pass
    rate is under its target, with n ≥ min_sample (WARN; ERROR when the whole interval is
    under the target). Silent below the minimum sample, never one alert per judgement.
    `judged`: the window's `judged_traces` when the caller has read them already."""
    first = window_first(day, settings)
    window = f"{first}..{day}"
    if judged is None:
        judged = judged_traces(con, first, day, version)
    judged = judged[judged["metric"].isin(list(settings.slo_targets))]
    if judged.empty:
        return Verdict("online_slo", None, 0, note=f"no judged trace in {window}", evaluated=False)
    table = quality_table(judged, None, settings)
    table = table[table["estimator"] == settings.slo_estimator]
    table = table.assign(target=table["metric"].map(settings.slo_targets))
    counted = table[table["n"] >= settings.min_sample]
    breaches = counted[counted["pass_rate"] < counted["target"]].copy()
    breaches["severity"] = np.where(breaches["ci_high"] < breaches["target"], "ERROR", "WARN")
    trust = judge_trust(con, list(settings.slo_targets), version, settings.trust) if settings.trust else {}
    if trust:  # beside each breach, how well its judge agrees with curators
        breaches["judge"] = breaches["metric"].map(lambda m: trust[m].words() if m in trust else "")
        untrusted = breaches["metric"].map(lambda m: m in trust and not trust[m].trusted).astype(bool)
        if settings.trust.untrusted == "warn":
            breaches.loc[untrusted, "severity"] = "WARN"  # reported, pages no one
    overall = counted[counted["slice"] == "all"]
    n = int(overall["n"].min()) if len(overall) else int(counted["n"].max()) if len(counted) else 0
    details = {"window": window, "estimator": settings.slo_estimator,
               "slices_checked": int(len(counted)), "below_min_sample": int(len(table) - len(counted)),
               "judge_versions": versions_used(judged, version),
               "breaches": breaches[["slice", "slice_value", "metric", "n", "pass_rate", "ci_low",
                                     "ci_high", "target", "severity", *(["judge"] if trust else [])]
                                    ].round(4).to_dict("records"),
               **({"judge_trust": {m: t.words() for m, t in trust.items()}} if trust else {})}
    if breaches.empty:
        return Verdict("online_slo", float(overall["pass_rate"].min()) if len(overall) else None, n,
                       note=f"every slice within target in {window}" if len(counted)
                       else f"every slice below the minimum sample {settings.min_sample}", details=details,
                       evaluated=bool(len(counted)))
    worst = breaches.assign(errors_first=breaches["severity"] != "ERROR").sort_values(
        ["errors_first", "pass_rate"]).iloc[0]
    severity = worst["severity"]
    return Verdict("online_slo", float(worst["pass_rate"]), int(worst["n"]), True, severity,
                   f"{len(breaches)} slice × metric under target in {window}; worst "
                   f"{worst['metric']} {worst['slice_value']}: {worst['pass_rate']:.3f} < "
                   f"{worst['target']:g} (n={int(worst['n'])})"
                   + (f"; {trust[worst['metric']].words()}" if worst["metric"] in trust else "")
                   + ("" if worst["metric"] not in trust or trust[worst["metric"]].trusted
                      or settings.trust is None or settings.trust.untrusted == "block" else ": pages no one"),
                   details)


def cost_row(con: duckdb.DuckDBPyConnection, day: date, version: str, engine: Engine) -> pd.DataFrame:
    """The day's application cost (its traffic, counted on `engine`) and evaluation cost, apart (seed §07)."""
    con.execute(ONLINE_DDL)
    requests, app_cost = engine.frame(con, ("raw_traces",), app_cost_expression, day).iloc[0]
    return con.execute("""
        WITH judged AS (SELECT count(DISTINCT trace_id) FILTER (status = 'judged') AS judged_requests,
                               coalesce(sum(cost_usd), 0) AS eval_cost_usd
                        FROM trace_judgments WHERE day = $day AND judge_version = $version),
             app AS (SELECT $requests::BIGINT AS requests, $app_cost::DOUBLE AS app_cost_usd)
        SELECT requests, app_cost_usd, app_cost_usd / nullif(requests, 0) AS app_cost_per_request,
               judged_requests, eval_cost_usd,
               eval_cost_usd / nullif(judged_requests, 0) AS eval_cost_per_judged,
               eval_cost_usd / nullif(requests, 0) AS eval_cost_per_request,
               eval_cost_usd / nullif(app_cost_usd, 0) AS eval_to_app_ratio
        FROM app, judged""", {"day": day, "version": version, "requests": int(requests),
                              "app_cost": float(app_cost)}).df()


def budget_verdict(cost: pd.DataFrame, budget: float | None) -> Verdict:
    row = cost.iloc[0]
    spent, judged = float(row["eval_cost_usd"]), int(row["judged_requests"])
    if budget is None:
        return Verdict("online_eval_budget", spent, judged, note="no daily budget configured")
    details = {"eval_cost_usd": spent, "budget_usd": budget,
               "eval_to_app_ratio": None if pd.isna(row["eval_to_app_ratio"]) else float(row["eval_to_app_ratio"])}
    if spent > budget:
        return Verdict("online_eval_budget", spent, judged, True, "WARN",
                       f"evaluation cost {spent:.4g} USD > budget {budget:g}", details)
    return Verdict("online_eval_budget", spent, judged, note="within budget", details=details)


def online_quality_day(con: duckdb.DuckDBPyConnection, day: date, settings: OnlineQualitySettings,
                       engine: Engine | None = None) -> list[Verdict]:
    """Store the day's estimates (`online_quality`) and costs (`online_cost`), replacing that
    day's rows; verdicts: the SLO over the window ending on the day, and the day's budget.
    The day's traffic is counted on `engine` (rag_loop.selection.estimate_expressions); the judged traces,
    bounded by the judging budget, are read here."""
    engine = engine or DuckDBEngine()
    version = current_judge_version(con, settings.judge_version)
    if version is None:
        return [Verdict("online_slo", None, 0, note="nothing judged yet: run trace_judgments", evaluated=False),
                Verdict("online_eval_budget", None, 0, note="nothing judged yet", evaluated=False)]
    traffic = engine.frame(con, ("trace_signals",), population_expression,
                           DaySlices(day, tuple(tuple(s) for s in settings.slices)))
    # the window's rows are read once: the day's are among them (a trace's verdicts are all of its day)
    window = judged_traces(con, window_first(day, settings), day, version)
    judged = window[window["day"] == pd.Timestamp(day)].reset_index(drop=True)
    table = quality_table(judged, traffic, settings)
    replace_day(con, "online_quality", day, table.assign(judge_version=versions_used(judged, version)))
    cost = cost_row(con, day, version, engine)
    replace_day(con, "online_cost", day, cost)
    return [slo_verdict(con, day, version, settings, window), budget_verdict(cost, settings.daily_budget_usd)]
