"""Curators against what they were shown (seed 004 §15): a label's failure_type against the
queue's suggestion, and against the judge's verdict where the curator saw a judge score (the
failure_type proxy, `judge_agreement`, reported apart); and the judge's agreement with curators
from their grades of its verdicts (`judge_grade_agreement`, issue 45), what a trust floor uses.

Apart from rag_loop.evaluation.calibration (the judge against a labelled file), so that the
loop's and the label sensor's runs do not import DeepEval to count agreement.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from rag_loop.store.ddl import AGREEMENT_DDL, GRADE_AGREEMENT_COLUMNS, LABELS_DDL
from rag_loop.store.files import write_atomically
from rag_loop.store.tables import has_table


@dataclass
class Agreement:
    """Curators against one thing they were shown: n, Cohen's kappa (None when undefined),
    the share agreeing, and the confusion (curator value -> other value -> count)."""

    comparison: str
    n: int
    kappa: float | None
    agreement: float | None
    confusion: dict[str, dict[str, int]]


def curator_agreement(con: duckdb.DuckDBPyConnection, threshold: float) -> list[Agreement]:
    """Curators against what they were shown, from the current accepted labels:
    failure_type against the queue's suggestion, and "the answer was generated wrong"
    (failure_type generation) against the judge's verdict (score < threshold) where the
    curator saw a judge score. Stored in `judge_agreement`."""
    con.execute(LABELS_DDL)  # no label file read yet: no labels, n = 0
    labels = con.execute("""SELECT failure_type, suggested_failure_type, judge_score
                            FROM current_labels WHERE decision = 'accept'""").df()
    comparisons = []
    shown = labels.dropna(subset=["suggested_failure_type"])
    comparisons.append(_agreement("curator vs suggested failure_type",
                                  shown["failure_type"].tolist(),
                                  shown["suggested_failure_type"].tolist()))
    judged = labels.dropna(subset=["judge_score"])
    comparisons.append(_agreement("curator vs judge (generation failure = unfaithful)",
                                  (judged["failure_type"] == "generation").tolist(),
                                  (judged["judge_score"] < threshold).tolist()))
    con.execute(AGREEMENT_DDL)
    con.executemany("INSERT INTO judge_agreement VALUES (?, ?, ?, ?, ?, now())",
                    [(c.comparison, c.n, c.kappa, c.agreement, json.dumps(c.confusion)) for c in comparisons])
    return comparisons


def _agreement(name: str, curator: list, other: list) -> Agreement:
    confusion: dict[str, dict[str, int]] = {}
    for mine, theirs in zip(curator, other):
        confusion.setdefault(str(mine), {}).setdefault(str(theirs), 0)
        confusion[str(mine)][str(theirs)] += 1
    n = len(curator)
    from sklearn.metrics import cohen_kappa_score  # 0.7 s to import: only where there are labels
    kappa = float(cohen_kappa_score(curator, other)) if n and len(set(curator) | set(other)) > 1 else None
    if kappa is not None and np.isnan(kappa):
        kappa = None
    agreement = sum(a == b for a, b in zip(curator, other)) / n if n else None
    return Agreement(name, n, kappa, agreement, confusion)


# --- curators grading the judge (issue 45): agreement from the grades, not from a proxy ---

ALL_LANGUAGES = "all"
AGREEMENT_FILE = "judge-agreement.json"  # in the reports folder: the workspace's dashboard reads it
BOOTSTRAP_SAMPLES = 1000
BOOTSTRAP_MAX_N = 5000  # above it the analytic standard error (Cohen 1960) is as good and cheaper


def judge_grades(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per grade in the current labels (the latest label of each trace): trace, curator,
    metric, judge version, the trace's language, what the judge said (passed, score), the
    grade, the curator's own verdict and `human_passed` (their own, else the judge's verdict
    agreed with or turned over)."""
    con.execute(LABELS_DDL)
    language = ("(SELECT trace_id, any_value(language) AS language FROM raw_traces GROUP BY 1)"
                if has_table(con, "raw_traces") else
                "(SELECT NULL::VARCHAR AS trace_id, NULL::VARCHAR AS language WHERE false)")
    return con.execute(f"""
        SELECT g.trace_id, g.curator, g.grade.metric AS metric,
               coalesce(g.grade.judge_version, 'not recorded') AS judge_version,
               coalesce(nullif(trim(r.language), ''), 'und') AS language,
               g.grade.judge_passed AS judge_passed, g.grade.judge_score AS judge_score,
               g.grade.grade AS grade, g.grade.curator_passed AS curator_passed,
               coalesce(g.grade.curator_passed, CASE g.grade.grade WHEN 'agree' THEN g.grade.judge_passed
                                                                   WHEN 'disagree' THEN NOT g.grade.judge_passed END)
                   AS human_passed
        FROM (SELECT trace_id, curator, unnest(judge_grades) AS grade FROM current_labels
              WHERE len(judge_grades) > 0) g
        LEFT JOIN {language} r USING (trace_id)
        ORDER BY metric, judge_version, g.trace_id""").df()


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa of two binary raters: n, agreements, kappa (None when undefined: both
    raters constant and alike) and a 95% interval (None when it cannot be estimated)."""

    n: int
    agreements: int
    kappa: float | None
    ci_low: float | None
    ci_high: float | None


def binary_kappa(a: Sequence[bool], b: Sequence[bool], seed: int = 0) -> Kappa:
    """Cohen's kappa of two binary verdict lists with a 95% interval: a seeded percentile
    bootstrap up to BOOTSTRAP_MAX_N pairs (resamples where kappa is undefined are left out),
    the analytic large-sample standard error above it."""
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    n = len(x)
    if n == 0:
        return Kappa(0, 0, None, None, None)
    kappa = _kappas(x[None, :], y[None, :])[0]
    agreements = int((x == y).sum())
    if np.isnan(kappa):
        return Kappa(n, agreements, None, None, None)
    if n < 2:
        return Kappa(n, agreements, float(kappa), None, None)
    if n <= BOOTSTRAP_MAX_N:
        rows = np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP_SAMPLES, n))
        kappas = _kappas(x[rows], y[rows])
        kappas = kappas[~np.isnan(kappas)]
        if len(kappas) < BOOTSTRAP_SAMPLES // 2:
            return Kappa(n, agreements, float(kappa), None, None)
        low, high = np.percentile(kappas, [2.5, 97.5])
    else:
        observed, expected = agreements / n, _expected(x.mean(), y.mean())
        se = float(np.sqrt(observed * (1 - observed) / (n * (1 - expected) ** 2)))
        low, high = kappa - 1.96 * se, kappa + 1.96 * se
    return Kappa(n, agreements, float(kappa), float(max(low, -1.0)), float(min(high, 1.0)))


def _expected(p: np.ndarray | float, q: np.ndarray | float) -> np.ndarray | float:
    return p * q + (1 - p) * (1 - q)


def _kappas(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kappa per row of two boolean matrices (NaN where the expected agreement is 1)."""
    observed = (x == y).mean(axis=1)
    expected = _expected(x.mean(axis=1), y.mean(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(expected < 1 - 1e-12, (observed - expected) / (1 - expected), np.nan)


def grade_agreement(grades: pd.DataFrame) -> pd.DataFrame:
    """Per metric, judge version and language (and ALL_LANGUAGES): the graded verdicts' n,
    agreements, share agreeing, Cohen's kappa with its interval, both pass rates; grades of a
    metric the judge gave no verdict (the curator's own pass/fail only) are counted in
    `own_verdicts`, not in n."""
    columns = ["metric", "judge_version", "language", "n", "agreements", "agreement", "kappa", "ci_low",
               "ci_high", "judge_pass_rate", "curator_pass_rate", "own_verdicts", "curators"]
    if grades.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    everywhere = grades.assign(language=ALL_LANGUAGES)
    for (metric, version, language), group in pd.concat([everywhere, grades]).groupby(
            ["metric", "judge_version", "language"], sort=True):
        pairs = group.dropna(subset=["judge_passed", "human_passed"])
        judge, human = pairs["judge_passed"].astype(bool).to_numpy(), pairs["human_passed"].astype(bool).to_numpy()
        seed = int.from_bytes(hashlib.sha256(f"{metric}\0{version}\0{language}".encode()).digest()[:4], "big")
        kappa = binary_kappa(judge, human, seed)
        rows.append({"metric": metric, "judge_version": version, "language": language, "n": kappa.n,
                     "agreements": kappa.agreements, "agreement": kappa.agreements / kappa.n if kappa.n else None,
                     "kappa": kappa.kappa, "ci_low": kappa.ci_low, "ci_high": kappa.ci_high,
                     "judge_pass_rate": float(judge.mean()) if len(judge) else None,
                     "curator_pass_rate": float(human.mean()) if len(human) else None,
                     "own_verdicts": int(group["judge_passed"].isna().sum()),
                     "curators": int(group["curator"].nunique())})
    return pd.DataFrame(rows, columns=columns)


def store_grade_agreement(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """`judge_grade_agreement`, rebuilt from the current labels' grades (`grade_agreement`)."""
    table = grade_agreement(judge_grades(con))
    con.execute(f"CREATE OR REPLACE TABLE judge_grade_agreement ({GRADE_AGREEMENT_COLUMNS})")
    if len(table):
        con.register("_grade_agreement", table)
        try:
            con.execute("INSERT INTO judge_grade_agreement SELECT *, now() FROM _grade_agreement")
        finally:
            con.unregister("_grade_agreement")
    return table


def export_grade_agreement(table: pd.DataFrame, path: Path) -> Path:
    """The agreement table as JSON for the curator workspace (it reads files, never the database)."""
    rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
            for row in table.to_dict("records")]
    write_atomically(path, json.dumps({"format": 1, "rows": rows}, default=str, ensure_ascii=False))
    return path
