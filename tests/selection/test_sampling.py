import datetime as dt
import hashlib

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from rag_loop.selection.estimates import estimate_rates, parse_slices, pooled_rates, wilson_interval
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SIGNALS

NO_RISK = {"query_type_rates": {}, "risk_level_rates": {}}


def population(seed: int, days: int = 4, per_day: int = 5000,
               first_day: dt.date = dt.date(2026, 11, 1)) -> pd.DataFrame:
    """Synthetic `trace_signals` with a known failure and signals that over-select failures."""
    rng = np.random.default_rng(seed)
    n = days * per_day
    query_type = rng.choice(["faq", "policy", "security"], n, p=[0.6, 0.3, 0.1])
    failed = rng.random(n) < np.select([query_type == "faq", query_type == "policy"],
                                       [0.05, 0.15], 0.25)
    frame = pd.DataFrame({
        "trace_id": pd.Series(range(n)).map(f"t{seed}-{{}}".format),
        "day": np.array([first_day + dt.timedelta(days=d) for d in range(days)])[np.arange(n) % days],
        "query_type": query_type, "risk_level": np.where(query_type == "security", "high", "low"),
        "language": rng.choice(["en", "vi"], n), "failed": failed})
    for signal in SIGNALS:
        frame[signal] = False
    frame["thumbs_down"] = rng.random(n) < np.where(failed, 0.4, 0.03)
    frame["low_rerank_score"] = rng.random(n) < np.where(failed, 0.5, 0.1)
    named = np.empty(4, dtype=object)  # the signals lists by 2 * thumbs_down + low_rerank_score
    named[:] = [[], ["low_rerank_score"], ["thumbs_down"], ["thumbs_down", "low_rerank_score"]]
    frame["signals"] = named[2 * frame["thumbs_down"].to_numpy() + frame["low_rerank_score"].to_numpy()]
    frame["signal_count"] = frame["thumbs_down"].astype(int) + frame["low_rerank_score"].astype(int)
    return frame


def _connect(frame: pd.DataFrame) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("_population", frame)
    con.execute("CREATE TABLE trace_signals AS SELECT * FROM _population")
    return con


def _selected(con) -> pd.DataFrame:
    return con.sql("SELECT * FROM failure_candidates ORDER BY trace_id").df()


def test_selection_is_deterministic_and_the_salt_changes_it():
    con = _connect(population(1, days=1, per_day=3000))
    select_candidates(con, SamplingPolicy())
    first = _selected(con)
    select_candidates(con, SamplingPolicy())
    pd.testing.assert_frame_equal(first, _selected(con))
    select_candidates(con, SamplingPolicy(salt="another"))
    assert set(_selected(con).trace_id) != set(first.trace_id)


def test_budget_thins_diagnostic_streams_and_keeps_the_random_stream_intact_under_its_cap():
    con = _connect(population(2, days=2, per_day=4000))
    select_candidates(con, SamplingPolicy(daily_budget_usd=None))
    unlimited = _selected(con)
    policy = SamplingPolicy(daily_budget_usd=1.5)  # 500 traces a day, 250 random: ~200 are drawn
    select_candidates(con, policy)
    capped = _selected(con)
    assert set(capped.trace_id[capped.by_random]) == set(unlimited.trace_id[unlimited.by_random])
    assert (capped.p_random == 0.05).all()
    per_day = capped.groupby("day").size()
    assert (per_day == 500).all()
    assert (capped.thinning < 1).all() and (unlimited.thinning == 1).all()
    assert set(capped.trace_id) < set(unlimited.trace_id)


def test_without_a_random_share_the_random_stream_alone_over_budget_is_kept():
    """random_budget_share=None: the rule before issue 42 (the budget does not bound it)."""
    con = _connect(population(3, days=1, per_day=4000))
    select_candidates(con, SamplingPolicy(daily_budget_usd=0.03, random_budget_share=None))  # 10 a day
    selected = _selected(con)
    assert selected.by_random.all() and 150 < len(selected) < 250
    assert np.allclose(selected.inclusion_probability, 0.05)


def uniform(salt: str, trace_id: str, position: int = 0) -> float:
    """The engines' draw (rag_loop.engines.functions.Functions.uniform), in Python."""
    digest = hashlib.md5(f"{salt}:{trace_id}".encode()).hexdigest()
    return int(digest[8 * position:8 * position + 8], 16) / 4294967296.0


def expected_random(day: pd.DataFrame, policy: SamplingPolicy, diagnostic_drawn: int) -> tuple[set, float]:
    """The random stream of one day as the module docstring says it: the traces drawn and their
    recorded rate, from the draws computed here."""
    draws = np.array([uniform(policy.salt, t) for t in day.trace_id])
    rate = policy.random_rate
    share = policy.random_capacity()
    if share is not None:
        cap = max(share, policy.daily_capacity() - diagnostic_drawn)
        lucky = np.sort(draws[draws < rate])
        if len(lucky) > cap:
            rate = float(lucky[cap])  # the (cap + 1)-th smallest draw
    return set(day.trace_id[draws < rate]), rate


def test_random_draws_over_the_cap_keep_the_smallest_and_record_the_lowered_rate():
    frame = population(6, days=1, per_day=4000)
    con = _connect(frame)
    policy = SamplingPolicy(daily_budget_usd=0.03, **NO_RISK)  # 10 a day, the random stream 5 of ~200
    select_candidates(con, policy)
    selected = _selected(con)
    drawn, rate = expected_random(frame, policy, int((frame.signal_count > 0).sum()))
    assert set(selected.trace_id[selected.by_random]) == drawn and len(drawn) == 5
    assert rate < 0.05 and (selected.p_random == rate).all()
    assert len(selected) == 10 and (~selected.by_random).sum() == 5  # the diagnostic streams' half
    assert (selected.inclusion_probability >= rate).all()


def test_the_random_stream_takes_the_room_the_diagnostic_streams_leave():
    frame = population(7, days=1, per_day=4000)
    frame.loc[frame.index >= 30, ["thumbs_down", "low_rerank_score"]] = False  # 30 traces may carry signals
    frame["signals"] = [[s for s in ("thumbs_down", "low_rerank_score") if row[s]]
                        for row in frame[["thumbs_down", "low_rerank_score"]].to_dict("records")]
    frame["signal_count"] = frame["signals"].map(len)
    con = _connect(frame)
    policy = SamplingPolicy(daily_budget_usd=0.3, **NO_RISK)  # 100 a day: 50 random, or 100 − signals
    select_candidates(con, policy)
    selected = _selected(con)
    flagged = int((frame.signal_count > 0).sum())
    drawn, rate = expected_random(frame, policy, flagged)
    assert set(selected.trace_id[selected.by_random]) == drawn and len(drawn) == 100 - flagged > 50
    assert selected.by_bad_signal.sum() == flagged and (selected.thinning == 1).all()
    assert len(selected) <= 100


def test_inclusion_probability_is_the_union_of_overlapping_streams():
    frame = population(4, days=1, per_day=20000)
    frame["thumbs_down"], frame["low_rerank_score"] = True, False
    frame["query_type"], frame["risk_level"] = "policy", "low"
    frame["signals"], frame["signal_count"] = [["thumbs_down"]] * len(frame), 1
    con = _connect(frame)
    policy = SamplingPolicy(random_rate=0.05, signal_rates={"thumbs_down": 0.5},
                            query_type_rates={"policy": 0.3}, daily_budget_usd=None)
    select_candidates(con, policy)
    selected = _selected(con)
    expected = 1 - 0.95 * 0.5 * 0.7
    assert selected.inclusion_probability.unique() == pytest.approx([expected])
    assert len(selected) / len(frame) == pytest.approx(expected, abs=0.01)
    both = selected.by_random & selected.by_bad_signal & selected.by_risk
    assert both.mean() == pytest.approx(0.05 * 0.5 * 0.3 / expected, abs=0.01)
    assert set(map(tuple, selected.streams)) >= {("random", "bad_signal", "risk"), ("risk",)}


def test_priorities():
    frame = population(5, days=1, per_day=200)
    frame.loc[:, SIGNALS] = False
    frame["query_type"], frame["risk_level"] = "faq", "low"
    frame.loc[0, ["query_type", "risk_level", "thumbs_down"]] = ["security", "high", True]
    frame.loc[1, ["thumbs_down", "low_rerank_score"]] = True
    frame.loc[2, "thumbs_down"] = True
    frame["signals"] = [[s for s in SIGNALS if row[s]] for row in frame[list(SIGNALS)].to_dict("records")]
    frame["signal_count"] = frame["signals"].map(len)
    con = _connect(frame)
    con.execute("CREATE TABLE trace_novelty AS SELECT trace_id, 1.0 AS rate FROM trace_signals "
                "WHERE trace_id = 't5-3'")
    select_candidates(con, SamplingPolicy(random_rate=0.0, daily_budget_usd=None, **NO_RISK))
    priority = dict(con.execute("SELECT trace_id, priority FROM failure_candidates").fetchall())
    assert priority == {"t5-0": "P0", "t5-1": "P1", "t5-2": "P3", "t5-3": "P2"}


@pytest.mark.parametrize("bad", [{"random_rate": 1.5}, {"signal_rates": {"thumbs_up": 1.0}},
                                 {"query_type_rates": {"faq": -0.1}}, {"judge_cost_usd": 0},
                                 {"random_budget_share": 1.2}, {"random_budget_share": -0.1}])
def test_policy_refuses_bad_values(bad):
    with pytest.raises(ValueError):
        SamplingPolicy(**bad)


def test_wilson_interval_matches_scipy():
    low, high = wilson_interval(np.array([0, 3, 17, 40]), np.array([10, 25, 60, 40]))
    for i, (k, n) in enumerate([(0, 10), (3, 25), (17, 60), (40, 40)]):
        reference = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        assert (low[i], high[i]) == pytest.approx((reference.low, reference.high), abs=1e-9)
    low, high = wilson_interval(np.array([0]), np.array([0]))
    assert np.isnan(low[0]) and np.isnan(high[0])


def test_parse_slices_validates_and_always_includes_the_whole_population():
    assert parse_slices(["language", "prompt_version, language"]) == \
        ((), ("language",), ("prompt_version", "language"))
    with pytest.raises(ValueError, match="unknown slice"):
        parse_slices(["colour"])


def test_horvitz_thompson_and_random_stream_are_unbiased_where_the_naive_rate_is_not():
    # 20 populations, each on 4 days of its own, selected and estimated in one run: selection,
    # thinning and estimates are per day, so each population's figures are what a run of it
    # alone gives (one run instead of 20 compiled and ran the same per-day queries 20 times);
    # one salt for all: each seed's trace ids are its own, and so are their draws
    first = dt.date(2026, 1, 1)
    con = _connect(pd.concat([population(100 + seed, first_day=first + dt.timedelta(days=4 * seed))
                              for seed in range(20)], ignore_index=True))
    select_candidates(con, SamplingPolicy(salt="unbiased", daily_budget_usd=3.0))  # thinned
    estimates = estimate_rates(con, slices=[()], outcomes=["failed"])
    seeds = pd.to_datetime(estimates["day"]).dt.date.map(lambda day: (day - first).days // 4)
    assert sorted(seeds.unique()) == list(range(20)) and (seeds.value_counts() == 4).all()
    errors = {"random_rate": [], "ht_rate": [], "naive_rate_biased": []}
    for _, rows in estimates.groupby(seeds):
        totals = rows[["population_failures", "random_failures", "random_n",
                       "selected_failures", "selected_n", "population_n"]].sum()
        truth = totals.population_failures / totals.population_n
        pooled = {"random_rate": totals.random_failures / totals.random_n,
                  "ht_rate": (rows.ht_rate * rows.population_n).sum() / totals.population_n,
                  "naive_rate_biased": totals.selected_failures / totals.selected_n}
        for name, value in pooled.items():
            errors[name].append(value - truth)
    assert abs(np.mean(errors["random_rate"])) < 0.02 and np.mean(np.abs(errors["random_rate"])) < 0.02
    assert abs(np.mean(errors["ht_rate"])) < 0.02 and np.mean(np.abs(errors["ht_rate"])) < 0.02
    assert np.mean(errors["naive_rate_biased"]) > 0.05


def test_the_pooled_random_rate_weights_each_day_by_its_traffic():
    """A day the budget capped drew fewer of its traces: its draws count for more of them."""
    estimates = pd.DataFrame({
        "slice": "all", "outcome": "any_signal", "population_n": [10_000, 100, 50],
        "population_failures": [1_000, 50, 5], "random_n": [100, 5, 0], "random_failures": [10, 3, 0],
        "random_rate": [0.1, 0.6, np.nan], "ht_rate": [0.1, 0.5, 0.1], "selected_n": [200, 5, 0],
        "selected_failures": [60, 3, 0]})
    pooled = pooled_rates(estimates)
    assert pooled["random_rate"] == pytest.approx((10_000 * 0.1 + 100 * 0.6) / 10_100)  # not 13 / 105
    assert pooled["population_rate"] == pytest.approx(1_055 / 10_150)
