"""Drift of a RAG system, one day at a time (seed 004 §09-§11): query mix, knowledge freshness,
retrieval scores and quality SLIs, each against an absolute SLO and a trailing baseline.

Every figure is computed per day; the baseline is the `baseline_days` days before it. A check
never fires below its minimum sample, and a baseline check does not fire without a baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import gcd

import numpy as np

# ---- statistics ---------------------------------------------------------------------------

def aligned(current: Mapping[str, float], baseline: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    keys = sorted(set(current) | set(baseline))
    return (np.array([current.get(k, 0.0) for k in keys], float),
            np.array([baseline.get(k, 0.0) for k in keys], float), keys)


def js_divergence(current: Mapping[str, float], baseline: Mapping[str, float]) -> float:
    """Jensen-Shannon divergence (base 2, in [0, 1]) of two count distributions."""
    from scipy.spatial.distance import jensenshannon  # scipy is imported where it is used
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


def ks_from_distance(distance: float, n_current: int, n_baseline: int) -> tuple[float, float]:
    """The two-sample Kolmogorov-Smirnov statistic and two-sided p-value that
    `scipy.stats.ks_2samp` gives for two samples of these sizes whose empirical distributions are
    at most `distance` apart (the engines compute the distance where the rows are): exact up to
    10,000 values a side, Smirnov's asymptotic distribution beyond, as scipy's `method="auto"`."""
    from scipy.stats import kstwo
    from scipy.stats._stats_py import _attempt_exact_2kssamp  # ks_2samp's exact p-value, from n and D
    if not n_current or not n_baseline or distance is None or np.isnan(distance):
        return float("nan"), float("nan")
    if max(n_current, n_baseline) <= 10_000:
        exact, distance, p_value = _attempt_exact_2kssamp(n_current, n_baseline, gcd(n_current, n_baseline),
                                                          distance, "two-sided")
        if exact:
            return float(distance), float(np.clip(p_value, 0, 1))
    larger, smaller = sorted((float(n_current), float(n_baseline)), reverse=True)
    effective = np.round(larger * smaller / (larger + smaller))
    return float(distance), float(np.clip(kstwo.sf(distance, effective), 0, 1))


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


