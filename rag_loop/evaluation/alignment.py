"""Aligning the judge to curators (issue 45, seed 004 §15): from curators' grades of a metric's
verdicts, fit the one thing the offline judge can learn honestly, its pass threshold, per metric
and per language with enough grades, and measure the gain on held-out grades only.

Cross-validation: the grades are split into folds (seeded); each fold's grades are predicted with
the threshold fitted on the other folds, and "after" is Cohen's kappa of those held-out
predictions against the curators; "before" is the current threshold's kappa on the same grades
(nothing was fitted to them). The threshold fitted on all grades is what is published, and its
agreement on the grades it was fitted to is never reported. A threshold is adopted only where
there are enough grades and the held-out kappa improves beyond chance (the paired bootstrap's 95%
lower bound of the gain is above 0); elsewhere the current one stays.

Published thresholds form an `Alignment` (an id over what it sets); a judge with an alignment is
a new judge version (`judge_version` below), so the judge change protocol
applies: the new version judges the selection again beside the old one (`online.overlap`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pandas as pd

from rag_loop.evaluation.agreement import ALL_LANGUAGES, BOOTSTRAP_SAMPLES, _kappas, binary_kappa, judge_grades
from rag_loop.store.tables import has_table

if TYPE_CHECKING:
    from rag_loop.evaluation.judges.base import Judge

ALIGNMENT_COLUMNS = ("alignment_id VARCHAR, metric VARCHAR, language VARCHAR, source_version VARCHAR, n BIGINT, "
                     "folds BIGINT, current_threshold DOUBLE, fitted_threshold DOUBLE, kappa_before DOUBLE, "
                     "before_low DOUBLE, before_high DOUBLE, kappa_after DOUBLE, after_low DOUBLE, "
                     "after_high DOUBLE, gain DOUBLE, gain_low DOUBLE, adopted BOOLEAN, why VARCHAR, "
                     "computed_at TIMESTAMPTZ")


@dataclass(frozen=True)
class AlignmentSettings:
    """How much evidence a threshold needs: grades per metric, per language, and the folds."""

    min_grades: int = 30
    min_language_grades: int = 30
    folds: int = 5
    seed: int = 0


@dataclass(frozen=True)
class Alignment:
    """Published thresholds: per metric, and per (metric, language) where a language has its own.
    `alignment_id` names them (a hash of what they set and the judge version they were fitted on)."""

    alignment_id: str
    source_version: str
    thresholds: Mapping[str, float] = field(default_factory=dict)
    by_language: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # metric -> language -> t

    def threshold(self, metric: str, language: str | None, default: float | None) -> float | None:
        """The pass threshold of `metric` on a trace in `language`: the language's own, else the
        metric's, else `default` (a monitoring metric without a fitted threshold stays one)."""
        own = self.by_language.get(metric, {}).get(language or "")
        return own if own is not None else self.thresholds.get(metric, default)

    def describe(self) -> dict:
        """What a judge version records of it."""
        return {"alignment_id": self.alignment_id, "thresholds": dict(sorted(self.thresholds.items())),
                "by_language": {m: dict(sorted(t.items())) for m, t in sorted(self.by_language.items())}}


def kappa_at(scores: np.ndarray, human: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Cohen's kappa of "score >= t" against the curators, for each t (NaN where undefined)."""
    predicted = scores[None, :] >= thresholds[:, None]
    observed = (predicted == human[None, :]).mean(axis=1)
    p, q = predicted.mean(axis=1), human.mean()
    expected = p * q + (1 - p) * (1 - q)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected < 1 - 1e-12, (observed - expected) / (1 - expected), np.nan)


def fit_threshold(scores: Sequence[float], human: Sequence[bool], current: float | None = None) -> float:
    """The threshold whose verdicts "score >= t" agree best with the curators (Cohen's kappa):
    among the grades' scores and one above them all; ties go to the one nearest the current
    threshold (else the lowest), so an uninformative fit moves nothing it need not."""
    x, y = np.asarray(scores, dtype=float), np.asarray(human, dtype=bool)
    candidates = np.unique(np.append(x, x.max() + 1e-6 if len(x) else 1.0))
    kappas = np.nan_to_num(kappa_at(x, y, candidates), nan=-np.inf)
    best = np.flatnonzero(kappas >= kappas.max() - 1e-12)
    if current is not None:
        best = best[np.argsort(np.abs(candidates[best] - current), kind="stable")]
    return float(candidates[best[0]])


@dataclass(frozen=True)
class HeldOut:
    """Before and after on held-out grades: the current threshold's kappa and the fitted one's
    (each grade predicted by the threshold fitted without it), with their intervals."""

    n: int
    folds: int
    before: tuple[float | None, float | None, float | None]
    after: tuple[float | None, float | None, float | None]
    gain_low: float | None = None  # the gain's one-sided 95% lower bound (paired bootstrap)

    @property
    def gain(self) -> float | None:
        return None if self.before[0] is None or self.after[0] is None else self.after[0] - self.before[0]


def cross_validate(scores: Sequence[float], human: Sequence[bool], current: float | None, folds: int = 5,
                   seed: int = 0) -> HeldOut:
    """`HeldOut` of a threshold fit by k-fold cross-validation (seeded shuffle, `folds` at most n)."""
    x, y = np.asarray(scores, dtype=float), np.asarray(human, dtype=bool)
    n, k = len(x), max(2, min(folds, len(x)))
    order = np.random.default_rng(seed).permutation(n)
    after = np.zeros(n, dtype=bool)
    for part in np.array_split(order, k):
        train = np.setdiff1d(order, part)
        threshold = fit_threshold(x[train], y[train], current)
        after[part] = x[part] >= threshold
    before = x >= current if current is not None else np.ones(n, dtype=bool)
    fit_before, fit_after = binary_kappa(before, y, seed), binary_kappa(after, y, seed)
    return HeldOut(n, k, (fit_before.kappa, fit_before.ci_low, fit_before.ci_high),
                   (fit_after.kappa, fit_after.ci_low, fit_after.ci_high), paired_gain_low(before, after, y, seed))


def paired_gain_low(before: np.ndarray, after: np.ndarray, human: np.ndarray, seed: int = 0) -> float | None:
    """The 5th percentile of kappa(after) - kappa(before) over paired bootstrap resamples of the
    grades (the same grades for both): a gain whose lower bound is above 0 is not chance."""
    rows = np.random.default_rng(seed).integers(0, len(human), size=(BOOTSTRAP_SAMPLES, len(human)))
    gains = _kappas(after[rows], human[rows]) - _kappas(before[rows], human[rows])
    gains = gains[~np.isnan(gains)]
    return float(np.percentile(gains, 5)) if len(gains) >= BOOTSTRAP_SAMPLES // 2 else None


def graded_scores(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The current labels' grades with the judge's score of each (`trace_judgments`' score of that
    trace, metric and version where stored, else the score the curator was shown), the threshold
    its verdict was given with (where stored) and the curator's verdict (`human_passed`); grades
    without a score or a curator's verdict are left out."""
    grades = judge_grades(con)
    if grades.empty:
        return grades.assign(score=pd.Series(dtype=float), threshold=pd.Series(dtype=float))
    if has_table(con, "trace_judgments"):
        con.register("_graded", grades[["trace_id", "metric", "judge_version"]].drop_duplicates())
        try:
            stored = con.execute("""SELECT g.trace_id, g.metric, g.judge_version, j.score AS stored_score,
                                           j.threshold
                                    FROM _graded g JOIN trace_judgments j USING (trace_id, metric, judge_version)
                                    WHERE j.status = 'judged'""").df()
        finally:
            con.unregister("_graded")
        grades = grades.merge(stored, on=["trace_id", "metric", "judge_version"], how="left")
    else:
        grades["stored_score"], grades["threshold"] = np.nan, np.nan
    grades["score"] = grades["stored_score"].fillna(grades["judge_score"])
    return grades.dropna(subset=["score", "human_passed"]).drop(columns="stored_score")


def align(grades: pd.DataFrame, current: Mapping[str, float | None],
          settings: AlignmentSettings = AlignmentSettings()) -> tuple[pd.DataFrame, Alignment]:
    """Per metric (on its most graded judge version) and per language with enough grades: the
    held-out kappa before and after, the threshold fitted on all its grades, and whether it is
    adopted; and the `Alignment` of the adopted thresholds. The current threshold is the one the
    graded verdicts were given with (`threshold` of the grades, the most frequent), else `current`."""
    rows, thresholds, by_language, versions = [], {}, {}, set()
    for metric, graded in grades.groupby("metric", sort=True):
        version = str(graded.groupby("judge_version").size().sort_values(kind="stable").index[-1])
        graded = graded[graded["judge_version"] == version]
        versions.add(version)
        slices = [(ALL_LANGUAGES, graded, settings.min_grades)] + [
            (language, part, settings.min_language_grades) for language, part in graded.groupby("language", sort=True)]
        stored = graded["threshold"].dropna() if "threshold" in graded else pd.Series(dtype=float)
        start = float(stored.mode().iloc[0]) if len(stored) else current.get(str(metric))  # what gave the verdicts
        for language, part, needed in slices:
            row = _aligned(str(metric), language, version, part, start, needed, settings)
            rows.append(row)
            if row["adopted"] and language == ALL_LANGUAGES:
                thresholds[str(metric)] = row["fitted_threshold"]
            elif row["adopted"]:
                by_language.setdefault(str(metric), {})[language] = row["fitted_threshold"]
    source = ",".join(sorted(versions))
    text = json.dumps([source, sorted(thresholds.items()),
                       sorted((m, sorted(t.items())) for m, t in by_language.items())])
    alignment = Alignment(hashlib.sha256(text.encode()).hexdigest()[:12], source, thresholds, by_language)
    table = pd.DataFrame(rows, columns=[c.split()[0] for c in ALIGNMENT_COLUMNS.split(", ")][1:-1])
    return table.assign(alignment_id=alignment.alignment_id), alignment


def _aligned(metric: str, language: str, version: str, grades: pd.DataFrame, current: float | None,
             needed: int, settings: AlignmentSettings) -> dict:
    """One row of the alignment table (see `align`)."""
    scores, human = grades["score"].to_numpy(dtype=float), grades["human_passed"].astype(bool).to_numpy()
    row = {"metric": metric, "language": language, "source_version": version, "n": len(grades), "folds": 0,
           "current_threshold": current, "fitted_threshold": None, "kappa_before": None, "before_low": None,
           "before_high": None, "kappa_after": None, "after_low": None, "after_high": None, "gain": None,
           "gain_low": None, "adopted": False}
    if len(grades) < needed:
        return {**row, "why": f"{len(grades)} grades, fewer than the {needed} a threshold needs"}
    if human.all() or not human.any():
        return {**row, "why": "curators gave one verdict only: no threshold separates anything"}
    held = cross_validate(scores, human, current, settings.folds, settings.seed)
    fitted = fit_threshold(scores, human, current)
    row.update(folds=held.folds, fitted_threshold=fitted, kappa_before=held.before[0], before_low=held.before[1],
               before_high=held.before[2], kappa_after=held.after[0], after_low=held.after[1],
               after_high=held.after[2], gain=held.gain, gain_low=held.gain_low)
    if held.gain is None or held.gain <= 0:
        return {**row, "why": "no gain on held-out grades: the current threshold stays"}
    if held.gain_low is None or held.gain_low <= 0:
        return {**row, "why": f"a held-out gain of {held.gain:.2f} that chance explains (its 95% lower bound "
                              f"is {held.gain_low if held.gain_low is not None else float('nan'):.2f}): "
                              "the current threshold stays"}
    return {**row, "adopted": True, "why": f"held-out kappa {held.before[0] if held.before[0] is not None else 0:.2f}"
                                           f" -> {held.after[0]:.2f}"}


def store_alignment(con: duckdb.DuckDBPyConnection, current: Mapping[str, float | None],
                    settings: AlignmentSettings = AlignmentSettings()) -> tuple[pd.DataFrame, Alignment]:
    """Fit from the current labels' grades and append the rows to `judge_alignment` (an
    alignment id already stored is not stored twice: the same grades give the same id)."""
    table, alignment = align(graded_scores(con), current, settings)
    con.execute(f"CREATE TABLE IF NOT EXISTS judge_alignment ({ALIGNMENT_COLUMNS})")
    if len(table):
        con.execute("DELETE FROM judge_alignment WHERE alignment_id = ?", [alignment.alignment_id])
        con.register("_alignment", table)
        try:
            con.execute("INSERT INTO judge_alignment BY NAME SELECT *, now() AS computed_at FROM _alignment")
        finally:
            con.unregister("_alignment")
    return table, alignment


def load_alignment(con: duckdb.DuckDBPyConnection, wanted: str) -> Alignment | None:
    """A published alignment by id, or the newest one that adopts a threshold ("latest");
    None for "" (no alignment). A ValueError names an id that is not stored."""
    if not wanted:
        return None
    if not has_table(con, "judge_alignment"):
        raise ValueError(f"alignment {wanted!r}: no judge_alignment table yet (run judge_calibration)")
    if wanted == "latest":
        found = con.execute("SELECT alignment_id FROM judge_alignment WHERE adopted "
                            "ORDER BY computed_at DESC LIMIT 1").fetchall()
        if not found:
            return None
        wanted = found[0][0]
    rows = con.execute("SELECT metric, language, source_version, fitted_threshold FROM judge_alignment "
                       "WHERE alignment_id = ? AND adopted", [wanted]).fetchall()
    if not rows and not con.execute("SELECT 1 FROM judge_alignment WHERE alignment_id = ?", [wanted]).fetchall():
        raise ValueError(f"alignment {wanted!r} is not in judge_alignment")
    thresholds = {m: t for m, language, _, t in rows if language == ALL_LANGUAGES}
    by_language: dict[str, dict[str, float]] = {}
    for metric, language, _, threshold in rows:
        if language != ALL_LANGUAGES:
            by_language.setdefault(metric, {})[language] = threshold
    source = ",".join(sorted({v for _, _, v, _ in rows}))
    return Alignment(wanted, source, thresholds, by_language)


def judge_version(judge: Judge, alignment: Alignment | None = None) -> tuple[str, str]:
    """(judge id, version): the judge's model, and a hash of everything it says it is and, when
    its thresholds were aligned to curators, of the alignment (a new version: the judge change
    protocol applies). Without an alignment the version is what it always was."""
    description = judge.describe()
    if alignment is not None:
        description = {**description, "alignment": alignment.describe()}
    text = json.dumps(description, sort_keys=True, default=str)
    return str(description.get("model")), hashlib.sha256(text.encode()).hexdigest()[:12]
