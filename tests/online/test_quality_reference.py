"""`quality_table` estimates every slice value × metric group in one vectorised pass; this pins
it to the plain per-group computation it replaced (one pandas group at a time, as the module
docstring describes each estimator), on drawn judgements of every awkward shape: ungraded
metrics, NaN scores and verdicts, unknown random rates, traces drawn with certainty, no
random-stream traces, missing slice values."""

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scipy.special import ndtri

from rag_loop.online.quality import OnlineQualitySettings, _slice_values, quality_table
from rag_loop.selection.estimate_expressions import SEPARATOR
from rag_loop.selection.estimates import wilson_interval
from rag_loop.selection.sampling import DIAGNOSTIC_STREAMS

SLICES = ((), ("language",), ("tenant", "language"))


def _score_interval(ratio, pi, y, confidence, grid=2001):
    weight, c = 1.0 / pi, (1 - pi) / pi ** 2
    uncertain = c > 0
    total, drawn = weight.sum(), weight[uncertain].sum()
    if drawn == 0:
        return ratio, ratio
    known = (weight * y)[~uncertain].sum()
    r0 = np.linspace(0.0, 1.0, grid)
    p = np.clip((r0 * total - known) / drawn, 0.0, 1.0)
    variance = c[uncertain].sum() * (p * (1 - p) + (p - r0) ** 2) / total ** 2
    inside = r0[(ratio - r0) ** 2 <= ndtri(0.5 + confidence / 2) ** 2 * variance]
    if inside.size == 0:
        return ratio, ratio
    return float(min(inside.min(), ratio)), float(max(inside.max(), ratio))


def _weighted_mean(values, weight):
    known = ~np.isnan(values)
    return float((weight[known] * values[known]).sum() / weight[known].sum()) if known.any() else np.nan


def _mean(values):
    """pandas' mean: NaN skipped, NaN when nothing is left."""
    known = values[~np.isnan(values)]
    return float(known.mean()) if known.size else np.nan


def _estimate(group: pd.DataFrame, confidence: float) -> list[dict]:
    # the group's columns as arrays, masks over them (a DataFrame selection per subset was
    # most of the test's time); pandas' sums and means skip NaN: nansum / _mean here
    graded = group["passed"].notna().any()
    y, score = group["passed"].astype(float).to_numpy(), group["score"].to_numpy(float)
    by_random, p_random = group["by_random"].to_numpy(bool), group["p_random"].to_numpy(float)
    n_random = int(by_random.sum())
    if np.isnan(p_random[by_random]).any() or not n_random:
        weight = np.ones(n_random)
    else:
        weight = 1.0 / p_random[by_random]
        weight = weight / weight.mean()
    size = weight.sum() ** 2 / (weight ** 2).sum() if n_random else 0.0
    rate = float(np.nansum(weight * y[by_random]) / weight.sum()) if n_random and graded else np.nan
    low, high = wilson_interval(np.array([rate * size]), np.array([size]), confidence) \
        if graded else (np.array([np.nan]), np.array([np.nan]))
    rows = [{"estimator": "random", "kind": "estimate", "n": n_random,
             "passes": np.nansum(y[by_random]) if graded else np.nan, "pass_rate": rate,
             "ci_low": float(low[0]), "ci_high": float(high[0]),
             "mean_score": _weighted_mean(score[by_random], weight)}]
    pi = group["inclusion_probability"].to_numpy(float)
    w = 1.0 / pi
    mean = float((w * score).sum() / w.sum())
    if graded:
        ratio = float((w * y).sum() / w.sum())
        ht_low, ht_high = _score_interval(ratio, pi, y, confidence)
        ht = {"passes": float((w * y).sum()), "pass_rate": ratio, "ci_low": ht_low, "ci_high": ht_high}
    else:
        ht = {"passes": np.nan, "pass_rate": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    rows.append({"estimator": "horvitz_thompson", "kind": "estimate", "n": len(group), **ht, "mean_score": mean})
    streams = [list(s) for s in group["streams"]]
    for stream in DIAGNOSTIC_STREAMS:
        drawn = np.array([stream in s for s in streams])
        if not drawn.any():
            continue
        passes = np.nansum(y[drawn]) if graded else np.nan
        rows.append({"estimator": f"diagnostic:{stream}", "kind": "diagnostic", "n": int(drawn.sum()),
                     "passes": passes, "pass_rate": passes / drawn.sum() if graded else np.nan,
                     "ci_low": np.nan, "ci_high": np.nan, "mean_score": _mean(score[drawn])})
    return rows


def reference_table(judged: pd.DataFrame, confidence: float) -> pd.DataFrame:
    rows = []
    for dims in SLICES:
        name = SEPARATOR.join(dims) if dims else "all"
        for (value, metric), group in judged.groupby([_slice_values(judged, dims), judged["metric"]], sort=True):
            rows += [{"slice": name, "slice_value": value, "metric": metric, **row, "population_n": 0}
                     for row in _estimate(group, confidence)]
    return pd.DataFrame(rows)


# built once: a strategy built inside the draw loop is validated again for every row (~1/3 of the draws' cost)
METRICS = st.sampled_from(["Faithfulness", "Answer Relevancy", "Tone (ungraded)"])
STREAMS = st.lists(st.sampled_from(["random", *DIAGNOSTIC_STREAMS]), unique=True, max_size=3)
SCORES = st.none() | st.floats(0, 1)
VERDICTS = st.none() | st.booleans()
INCLUSION = st.sampled_from([1.0, 0.5, 0.1, 0.02])
RANDOM_RATES = st.none() | st.sampled_from([1.0, 0.3, 0.05])
LANGUAGES = st.none() | st.sampled_from(["en", "vi"])
TENANTS = st.none() | st.sampled_from(["acme", "globex"])


@st.composite
def judgements(draw) -> pd.DataFrame:
    n = draw(st.integers(1, 40))
    rows = []
    for i in range(n):
        metric = draw(METRICS)
        graded = metric != "Tone (ungraded)"
        by_random = draw(st.booleans())
        streams = draw(STREAMS)
        rows.append({
            "trace_id": f"t{i}", "metric": metric,
            "score": draw(SCORES),
            "passed": draw(VERDICTS) if graded else None,
            "by_random": by_random, "streams": (["random"] if by_random else []) + streams,
            "inclusion_probability": draw(INCLUSION),
            "p_random": draw(RANDOM_RATES),
            "language": draw(LANGUAGES),
            "tenant": draw(TENANTS)})
    frame = pd.DataFrame(rows)
    frame["passed"] = frame["passed"].astype(object)
    frame["score"] = frame["score"].astype(float)
    return frame


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(judged=judgements())
@example(judged=pd.DataFrame({  # every trace drawn with certainty, one ungraded, no random stream
    "trace_id": ["a", "b", "c"], "metric": ["Faithfulness", "Faithfulness", "Tone (ungraded)"],
    "score": [1.0, float("nan"), 0.5], "passed": pd.Series([True, None, None], dtype=object),
    "by_random": [False, False, False], "streams": [["bad_signal"], [], []],
    "inclusion_probability": [1.0, 1.0, 1.0], "p_random": [None, None, None],
    "language": ["en", None, "vi"], "tenant": [None, None, "acme"]}))
def test_quality_table_is_the_per_group_computation(judged):
    expected = reference_table(judged, 0.95)
    got = quality_table(judged, None, OnlineQualitySettings(slices=SLICES))
    assert list(got[["slice", "slice_value", "metric", "estimator", "kind"]].itertuples(index=False)) == \
        list(expected[["slice", "slice_value", "metric", "estimator", "kind"]].itertuples(index=False))
    assert got["n"].tolist() == expected["n"].tolist()
    for column in ("passes", "pass_rate", "ci_low", "ci_high", "mean_score"):
        np.testing.assert_allclose(got[column].to_numpy(float), expected[column].to_numpy(float),
                                   rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=column)
