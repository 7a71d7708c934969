"""Curators against what they were shown (seed 004 §15): a label's failure_type against the
queue's suggestion, and against the judge's verdict where the curator saw a judge score.

Apart from rag_loop.evaluation.calibration (the judge against a labelled file), so that the
loop's and the label sensor's runs do not import DeepEval to count agreement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb
import numpy as np

from rag_loop.store.ddl import AGREEMENT_DDL, LABELS_DDL


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
