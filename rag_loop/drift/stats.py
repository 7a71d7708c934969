"""Drift of a RAG system, one day at a time (seed 004 §09-§11): query mix, knowledge freshness,
retrieval scores and quality SLIs, each against an absolute SLO and a trailing baseline.

Every figure is computed per day; the baseline is the `baseline_days` days before it. A check
never fires below its minimum sample, and a baseline check does not fire without a baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.spatial.distance import jensenshannon
from scipy.stats import ks_2samp

# ---- statistics ---------------------------------------------------------------------------

def aligned(current: Mapping[str, float], baseline: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    keys = sorted(set(current) | set(baseline))
    return (np.array([current.get(k, 0.0) for k in keys], float),
            np.array([baseline.get(k, 0.0) for k in keys], float), keys)


def js_divergence(current: Mapping[str, float], baseline: Mapping[str, float]) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) of two count distributions."""
    now, before, _ = aligned(current, baseline)
    if now.sum() == 0 or before.sum() == 0:
        return float("nan")
    return float(jensenshannon(now / now.sum(), before / before.sum(), base=2) ** 2)


def psi(current: Mapping[str, float], baseline: Mapping[str, float], epsilon: float = 1e-4) -> float:
    """Population stability index Σ (a − e) ln(a / e), shares floored at `epsilon`."""
    now, before, _ = aligned(current, baseline)
    if now.sum() == 0 or before.sum() == 0:
        return float("nan")
    a = np.maximum(now / now.sum(), epsilon)
    e = np.maximum(before / before.sum(), epsilon)
    return float(np.sum((a - e) * np.log(a / e)))


def psi_continuous(current: Sequence[float], baseline: Sequence[float], bins: int = 10) -> float:
    """PSI of a continuous variable over the baseline's quantile bins."""
    current, baseline = np.asarray(current, float), np.asarray(baseline, float)
    if len(current) == 0 or len(baseline) == 0:
        return float("nan")
    edges = np.unique(np.quantile(baseline, np.linspace(0, 1, bins + 1)))
    edges[0], edges[-1] = -np.inf, np.inf
    count = lambda values: dict(enumerate(np.histogram(values, edges)[0]))  # noqa: E731
    return psi(count(current), count(baseline))


def ks_test(current: Sequence[float], baseline: Sequence[float]) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov statistic and p-value (scipy)."""
    if len(current) == 0 or len(baseline) == 0:
        return float("nan"), float("nan")
    result = ks_2samp(current, baseline)
    return float(result.statistic), float(result.pvalue)


def top_movers(current: Mapping[str, float], baseline: Mapping[str, float], k: int = 5) -> list[dict]:
    """The values whose share moved most, with both shares."""
    now, before, keys = aligned(current, baseline)
    share_now = now / now.sum() if now.sum() else now
    share_before = before / before.sum() if before.sum() else before
    order = np.argsort(-np.abs(share_now - share_before))[:k]
    return [{"value": keys[i], "share": round(float(share_now[i]), 4),
             "baseline_share": round(float(share_before[i]), 4)} for i in order]


# ---- checks ---------------------------------------------------------------------------------


# ---- per-day figures ---------------------------------------------------------------------


