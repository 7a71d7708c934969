"""The retrieval and stale-retrieval figures, computed where the rows are (one Ibis expression
for DuckDB and Spark), equal a plain pandas / scipy reference on generated windows with ties,
missing scores, repeated queries and traces without chunks."""

from datetime import UTC, date, datetime, timedelta

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scipy.stats import ks_2samp

from rag_loop.drift.figures import RETRIEVAL_COLUMNS, freshness_figures, retrieval_figures
from rag_loop.drift.retrieval_expressions import DIMENSIONS, EDGE_TOLERANCE
from rag_loop.drift.stats import ks_from_distance, psi
from rag_loop.selection.signal_expressions import SLICE_COLUMNS

DAY, WINDOW = date(2026, 11, 10), 2
SCORES = st.one_of(st.none(), st.sampled_from([0.1, 0.25, 0.5, 0.75, 0.9]),
                   st.floats(0, 1, allow_nan=False).map(lambda x: round(x, 3)))
TRACE = st.fixed_dictionaries({
    "day": st.integers(0, WINDOW + 1),  # WINDOW + 1: before the baseline window
    "language": st.sampled_from(["en", "vi", None]), "tenant": st.sampled_from(["acme", "globex"]),
    "query": st.sampled_from(["refund", "Refund ", "  refund", "hours", "đổi trả"]),
    "retrieval": SCORES, "rerank": SCORES, "empty": st.booleans(), "stale": st.booleans(),
    "chunks": st.one_of(st.none(), st.lists(st.sampled_from(["a#1", "a#2", "b#1", "c#1"]), max_size=4)),
    "second": st.sampled_from([0, 0, 1])})  # a day's traces asked in the same second: the latest has the larger id


def _window(con: duckdb.DuckDBPyConnection, traces: list[dict]) -> None:
    signals, raw, chunks = [], [], []
    for i, t in enumerate(traces):
        trace_id, day = f"t{i:03d}", DAY - timedelta(days=t["day"])
        signals.append({"trace_id": trace_id, "day": day, **dict.fromkeys(SLICE_COLUMNS),
                        "language": t["language"], "tenant": t["tenant"], "top_retrieval_score": t["retrieval"],
                        "top_rerank_score": t["rerank"], "empty_retrieval": t["empty"], "stale_source": t["stale"]})
        raw.append({"trace_id": trace_id, "original_query": t["query"],
                    "timestamp": datetime.combine(day, datetime.min.time(), UTC) + timedelta(seconds=t["second"])})
        chunks += [{"trace_id": trace_id, "doc_id": c.split("#")[0], "chunk_id": c, "day": day}
                   for c in t["chunks"] or []]
    columns = {"trace_signals": ["trace_id", "day", *SLICE_COLUMNS, "top_retrieval_score", "top_rerank_score",
                                 "empty_retrieval", "stale_source"],
               "raw_traces": ["trace_id", "original_query", "timestamp"],
               "trace_chunks": ["trace_id", "doc_id", "chunk_id", "day"]}
    types = {"day": "DATE", "timestamp": "TIMESTAMPTZ", "top_retrieval_score": "DOUBLE",
             "top_rerank_score": "DOUBLE", "empty_retrieval": "BOOLEAN", "stale_source": "BOOLEAN"}
    for table, rows in (("trace_signals", signals), ("raw_traces", raw), ("trace_chunks", chunks)):
        declared = ", ".join(f"{c} {types.get(c, 'VARCHAR')}" for c in columns[table])
        con.execute(f"CREATE TABLE {table} ({declared})")
        if rows:
            frame = pd.DataFrame(rows)  # noqa: F841 - read by DuckDB
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM frame")


def _reference(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The figures by hand: pandas groups, numpy quantiles, scipy's KS, PSI over decile bins."""
    rows = con.execute("""
        SELECT s.*, lower(trim(r.original_query)) AS query, r."timestamp" AS asked_at,
               (SELECT count(DISTINCT doc_id) FROM trace_chunks c WHERE c.trace_id = s.trace_id) AS documents,
               (SELECT list(chunk_id) FROM trace_chunks c WHERE c.trace_id = s.trace_id) AS chunk_ids
        FROM trace_signals s JOIN raw_traces r USING (trace_id)
        WHERE s.day BETWEEN ? AND ?""", [DAY - timedelta(days=WINDOW), DAY]).df()
    rows["day"] = pd.to_datetime(rows["day"]).dt.date
    today, before = rows[rows.day == DAY].copy(), rows[rows.day < DAY]
    earlier = before[before.chunk_ids.notna()].sort_values(["asked_at", "trace_id"]).groupby("query").last()
    today["overlap"] = [_overlap(ids, earlier.chunk_ids[q]) if q in earlier.index else np.nan
                        for ids, q in zip(today.chunk_ids, today["query"])]
    out = []
    for dimension in DIMENSIONS:
        if dimension == "all":
            groups = [("all", today, before)]
        else:
            now_values, base_values = today[dimension].fillna("(none)"), before[dimension].fillna("(none)")
            groups = [(v, today[now_values == v], before[base_values == v]) for v in sorted(set(now_values))]
        out += [{"slice": dimension, "slice_value": v, **_row(now, base)} for v, now, base in groups]
    return pd.DataFrame(out)[RETRIEVAL_COLUMNS]


def _overlap(ids, earlier) -> float:
    now, then = set([] if ids is None or ids is pd.NA else ids), set(earlier)
    return len(now & then) / max(len(now | then), 1)


def _row(now: pd.DataFrame, base: pd.DataFrame) -> dict:
    rerank, base_rerank = now.top_rerank_score.dropna(), base.top_rerank_score.dropna()
    retrieval = now.top_retrieval_score.dropna()
    q = lambda s, p: float(np.quantile(s, p)) if len(s) else np.nan  # noqa: E731
    mean = lambda s: float(s.astype(float).mean()) if len(s.dropna()) else np.nan  # noqa: E731
    ks = ks_2samp(rerank, base_rerank) if len(rerank) and len(base_rerank) else None
    return {"n": len(now), "baseline_n": len(base),
            **{f"retrieval_p{p}": q(retrieval, p / 100) for p in (10, 50, 90)},
            **{f"rerank_p{p}": q(rerank, p / 100) for p in (10, 50, 90)},
            "baseline_rerank_p50": q(base_rerank, 0.5), "empty_rate": mean(now.empty_retrieval),
            "baseline_empty_rate": mean(base.empty_retrieval), "source_diversity": mean(now.documents.fillna(0)),
            "topk_overlap": mean(now.overlap) if "overlap" in now else np.nan,
            "ks_statistic": ks.statistic if ks else np.nan, "ks_pvalue": ks.pvalue if ks else np.nan,
            "rerank_psi": _psi_over_deciles(rerank.to_numpy(), base_rerank.to_numpy())}


def _psi_over_deciles(now: np.ndarray, base: np.ndarray) -> float:
    """PSI over the baseline's decile bins, as numpy's histogram over the unique deciles with the
    outer two made infinite, a score within EDGE_TOLERANCE of an edge counting as on it."""
    if not len(now) or not len(base):
        return np.nan
    deciles = np.quantile(base, np.linspace(0, 1, 11))
    above = lambda value, edge: value > edge + EDGE_TOLERANCE * max(abs(edge), 1.0)  # noqa: E731
    low, high = deciles[0], deciles[-1]
    if not above(high, low):
        return np.nan
    inner = [e for e in deciles[1:-1] if above(e, low) and above(high, e)]
    counts = lambda values: pd.Series([sum(not above(e, v) for e in inner) for v in values]).value_counts()  # noqa: E731
    return psi(counts(now).to_dict(), counts(base).to_dict())


def assert_figures_equal(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert got[["slice", "slice_value"]].values.tolist() == expected[["slice", "slice_value"]].values.tolist()
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, check_exact=False, rtol=1e-9, atol=1e-12)


def _asked(day: int, chunks: list[str]) -> dict:
    return {"day": day, "language": "en", "tenant": "acme", "query": "refund", "retrieval": 0.5, "rerank": 0.5,
            "empty": False, "stale": False, "chunks": chunks, "second": 0}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(TRACE, max_size=40))
@example([_asked(1, ["a#1"]), _asked(1, ["b#1"]), _asked(0, ["b#1"])])  # the day's overlaps the later id's only
def test_the_retrieval_figures_equal_the_pandas_reference(traces):
    with duckdb.connect() as con:
        _window(con, traces)
        assert_figures_equal(retrieval_figures(con, DAY, WINDOW), _reference(con))


@settings(max_examples=20, deadline=None)
@given(st.lists(TRACE, max_size=30))
def test_the_stale_retrieval_rates_equal_counting_by_hand(traces):
    with duckdb.connect() as con:
        _window(con, traces)
        con.execute("CREATE TABLE documents (doc_id VARCHAR, version VARCHAR, source_updated_at TIMESTAMPTZ, "
                    "indexed_at TIMESTAMPTZ, indexed_at_known BOOLEAN)")
        _, stale = freshness_figures(con, DAY, WINDOW, 15.0)
    frame = pd.DataFrame([t for t in traces if t["day"] <= WINDOW])
    expected = []
    for dimension in DIMENSIONS:
        values = ["all"] * len(frame) if dimension == "all" or not len(frame) else \
            frame.get(dimension, pd.Series([None] * len(frame))).fillna("(none)")
        for value in sorted(set(v for v, d in zip(values, frame.get("day", [])) if d == 0)):
            now = [t for t, v in zip(frame.itertuples(), values) if v == value and t.day == 0]
            base = [t for t, v in zip(frame.itertuples(), values) if v == value and t.day > 0]
            expected.append((dimension, value, len(now), np.mean([t.stale for t in now]), len(base),
                             np.mean([t.stale for t in base]) if base else np.nan))
    expected = sorted(expected, key=lambda row: (row[0], row[1]))
    assert [r[:3] + r[4:5] for r in stale.itertuples(index=False)] == [r[:3] + r[4:5] for r in expected]
    assert np.allclose(stale[["stale_rate", "baseline_stale_rate"]].to_numpy(float),
                       np.array([[r[3], r[5]] for r in expected], float).reshape(-1, 2), equal_nan=True)


def test_a_window_without_traces_still_has_its_all_row():
    with duckdb.connect() as con:
        _window(con, [])
        figures = retrieval_figures(con, DAY, WINDOW)
    assert figures[["slice", "slice_value", "n", "baseline_n"]].values.tolist() == [["all", "all", 0, 0]]
    assert figures.drop(columns=["slice", "slice_value", "n", "baseline_n"]).isna().all(axis=None)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.5]) | st.floats(0, 1), min_size=1, max_size=60),
       st.lists(st.sampled_from([0.1, 0.2, 0.3, 0.5]) | st.floats(0, 1), min_size=1, max_size=60))
def test_ks_from_the_largest_distance_is_scipys_ks_2samp(current, baseline):
    values = np.unique(np.concatenate([current, baseline]))
    ecdf = lambda sample: np.searchsorted(np.sort(sample), values, side="right") / len(sample)  # noqa: E731
    distance = float(np.max(np.abs(ecdf(current) - ecdf(baseline))))
    reference = ks_2samp(current, baseline)
    assert ks_from_distance(distance, len(current), len(baseline)) == pytest.approx(
        (reference.statistic, reference.pvalue), rel=1e-9, abs=1e-12)


def test_ks_beyond_the_exact_range_is_smirnovs_asymptotic_distribution():
    rng = np.random.default_rng(1)
    current, baseline = rng.normal(0, 1, 12_000), rng.normal(0.05, 1, 9_000)
    reference = ks_2samp(current, baseline)
    assert ks_from_distance(reference.statistic, 12_000, 9_000) == pytest.approx(
        (reference.statistic, reference.pvalue))
    assert all(np.isnan(ks_from_distance(0.3, 0, 10)))
