"""The daily budget bounds every stream (issue 42): on any day and traffic size the selection
fits the capacity, the random stream keeps its smallest draws up to its cap, and the inclusion
probabilities it records are the realized design's (the Horvitz–Thompson estimate of a known
population total from the random stream alone is unbiased, over many independent days)."""

import datetime as dt

import duckdb
import numpy as np
import pandas as pd
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from rag_loop.selection.estimates import estimate_rates, wilson_interval
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SIGNALS
from tests.selection.test_sampling import uniform

FIRST = dt.date(2026, 11, 1)


def traffic(sizes: list[int], flagged_shares: list[float], seed: int, prefix: str = "t") -> pd.DataFrame:
    """`trace_signals` of one day per size, but its `signals` list (`_connect` makes it from
    `thumbs_down`): a share of each day's traces thumbs-down, a failure outcome (`failed`)
    more likely on those."""
    rng = np.random.default_rng(seed)
    days = np.repeat(np.array([FIRST + dt.timedelta(days=d) for d in range(len(sizes))], dtype=object), sizes)
    share = np.repeat(flagged_shares, sizes)
    n = len(days)
    frame = pd.DataFrame({"trace_id": [f"{prefix}{seed}-{i}" for i in range(n)], "day": days,
                          "query_type": "faq", "risk_level": "low", "language": "en"})
    for signal in SIGNALS:
        frame[signal] = False
    frame["thumbs_down"] = rng.random(n) < share
    frame["failed"] = rng.random(n) < np.where(frame["thumbs_down"], 0.6, 0.1)
    frame["signal_count"] = frame["thumbs_down"].astype(int)
    return frame


def _connect(frame: pd.DataFrame) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("_traffic", frame)  # the list typed here, not by pandas (a frame may hold only [])
    con.execute("CREATE TABLE trace_signals AS SELECT *, CASE WHEN thumbs_down THEN ['thumbs_down'] "
                "ELSE []::VARCHAR[] END AS signals FROM _traffic")
    return con


def _selected(con) -> pd.DataFrame:
    selected = con.sql("SELECT * FROM failure_candidates ORDER BY trace_id").df()
    return selected.assign(day=selected.day.dt.date)  # as trace_signals' frame has them


POLICIES = st.builds(
    lambda salt, rate, down, capacity, share: SamplingPolicy(
        salt=salt, random_rate=rate, signal_rates={"thumbs_down": down}, query_type_rates={},
        risk_level_rates={}, judge_cost_usd=0.001, daily_budget_usd=capacity / 1000, random_budget_share=share),
    salt=st.sampled_from(["a", "b"]), rate=st.sampled_from([0.0, 0.05, 0.2, 0.7, 1.0]),
    down=st.sampled_from([1.0, 0.4]), capacity=st.integers(1, 300),
    share=st.sampled_from([None, 0.0, 0.3, 0.5, 1.0]))


TRAFFIC = st.tuples(st.lists(st.integers(1, 3000), min_size=1, max_size=3),  # sizes of the days
                    st.lists(st.sampled_from([0.0, 0.002, 0.05, 0.5]), min_size=3, max_size=3),  # flagged shares
                    st.integers(0, 3))  # seed


# a policy and one to three traffic samples (of one to three days) an example: each policy's SQL is compiled once
# (DuckDBEngine's cache), ~0.5 s a compile, for more traffic than one example a policy would see
@settings(max_examples=15, deadline=None)
@example(traffics=[([1, 1, 1998], [0.0, 0.0, 0.002], 0)], policy=SamplingPolicy(  # no signal in pandas' sample
    salt="a", random_rate=0.0, signal_rates={"thumbs_down": 1.0}, query_type_rates={}, risk_level_rates={},
    judge_cost_usd=0.001, daily_budget_usd=0.001, random_budget_share=None))
@given(traffics=st.lists(TRAFFIC, min_size=1, max_size=3), policy=POLICIES)
def test_every_day_fits_the_capacity_and_the_random_stream_is_its_smallest_draws(traffics, policy):
    for sizes, shares, seed in traffics:
        fits_the_capacity(traffic(sizes, shares[:len(sizes)], seed), policy)


def fits_the_capacity(frame: pd.DataFrame, policy: SamplingPolicy) -> None:
    con = _connect(frame)
    select_candidates(con, policy)
    selected = _selected(con)
    capacity, share_cap = policy.daily_capacity(), policy.random_capacity()
    down = policy.signal_rates["thumbs_down"]
    assert set(selected.day) <= set(frame.day)  # days compared as dates
    for day, traces in frame.groupby("day"):
        rows = selected[selected.day == day]
        by_signal = traces.thumbs_down & np.array([uniform(policy.salt, t, 1) < down for t in traces.trace_id])
        draws = np.array([uniform(policy.salt, t) for t in traces.trace_id])
        lucky = np.sort(draws[draws < policy.random_rate])
        rate = policy.random_rate
        if share_cap is not None:
            cap = max(share_cap, capacity - int(by_signal.sum()))
            if len(lucky) > cap:
                rate = float(lucky[cap])
            assert len(rows) <= capacity
            assert rows.by_random.sum() <= cap
            if by_signal.sum() >= capacity - share_cap:  # the diagnostic streams need their part
                assert rows.by_random.sum() <= share_cap
        assert set(rows.trace_id[rows.by_random]) == set(traces.trace_id[draws < rate])
        assert (rows.p_random == rate).all()
        event("random stream capped" if rate < policy.random_rate else "random stream under its cap")
        assert set(rows.trace_id[rows.by_bad_signal]) <= set(traces.trace_id[by_signal])
        pi = rows.inclusion_probability
        assert ((pi > 0) & (pi <= 1)).all()
        union = 1 - (1 - rows.p_random) * (1 - np.minimum(1, rows.thinning * rows.p_bad_signal))
        assert np.allclose(pi, union, rtol=0, atol=1e-12)
    for day in sorted(frame.day.unique()):  # day by day gives the whole table's rows
        select_candidates(con, policy, days=[day])
    pd.testing.assert_frame_equal(_selected(con), selected)


def test_the_random_streams_horvitz_thompson_estimate_is_unbiased_when_capped_and_at_the_cap():
    """400 independent days (their trace ids are their draws): 200 with 1,500 traces whose
    ~300 random draws exceed the cap of 100, 200 with 500 whose ~100 draws straddle it. Per
    day, Σ failed / p_random over the random stream, divided by the day's traces, estimates
    its failure rate; the mean error is within three standard errors of zero in both regimes,
    and the random stream's Wilson interval covers the day's rate on about 95 % of days."""
    sizes = [1500] * 200 + [500] * 200
    frame = traffic(sizes, [0.3] * len(sizes), seed=42, prefix="mc")
    con = _connect(frame)
    policy = SamplingPolicy(random_rate=0.2, signal_rates={"thumbs_down": 1.0}, query_type_rates={},
                            risk_level_rates={}, daily_budget_usd=0.6)  # 200 a day, random 100
    select_candidates(con, policy)
    rows = con.sql("""
        SELECT s.day, count(*) AS n, avg(s.failed::INT) AS truth,
               count(c.trace_id) FILTER (c.by_random) AS random_n,
               count(c.trace_id) FILTER (c.by_random AND s.failed) AS random_failures,
               sum(1 / c.p_random) FILTER (c.by_random AND s.failed) / count(*) AS ht,
               max(c.p_random) AS p_random, count(c.trace_id) AS selected
        FROM trace_signals s LEFT JOIN failure_candidates c USING (trace_id)
        GROUP BY s.day ORDER BY s.day""").df()
    rows["ht"] = rows["ht"].fillna(0.0)
    assert (rows.selected <= 200).all() and (rows.random_n <= 100).all()
    capped, straddling = rows[rows.n == 1500], rows[rows.n == 500]
    assert (capped.random_n == 100).all() and (capped.p_random < 0.2).all()
    assert 0.2 < (straddling.p_random < 0.2).mean() < 0.8  # both regimes occur at the cap
    for regime in (capped, straddling):
        error = regime.ht - regime.truth
        assert abs(error.mean()) < 3 * error.std() / np.sqrt(len(error))
    low, high = wilson_interval(rows.random_failures, rows.random_n)
    assert ((low <= rows.truth) & (rows.truth <= high)).mean() > 0.92
    # the estimates table's Horvitz–Thompson rate over every stream stays close too
    estimates = estimate_rates(con, slices=[()], outcomes=["failed"])
    assert abs((estimates.ht_rate - estimates.population_rate).mean()) < 0.01
