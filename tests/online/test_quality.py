"""online_quality: the random stream and Horvitz-Thompson estimate the population; the targeted
streams are diagnostics, labelled and never estimates; SLO verdicts honour the minimum sample."""

import datetime as dt

import duckdb
import numpy as np
import pandas as pd
import pytest

from rag_loop.online.quality import OnlineQualitySettings, online_quality_day, quality_table, slo_verdict
from rag_loop.selection.signals import SLICE_COLUMNS

DAY = dt.date(2026, 11, 5)


def judged_population(seed: int, n: int = 20000, fail_rate: float = 0.2, p_random: float = 0.1,
                      p_flagged: float = 0.8, day: dt.date = DAY) -> tuple[pd.DataFrame, float]:
    """Every trace judged in truth; the sample kept as the selection would: a random stream and
    a bad-signal stream that over-draws failures. Returns (judged sample, true pass rate)."""
    rng = np.random.default_rng(seed)
    failed = rng.random(n) < fail_rate
    flagged = rng.random(n) < np.where(failed, 0.7, 0.1)
    by_random = rng.random(n) < p_random
    by_signal = flagged & (rng.random(n) < p_flagged)
    pi = 1 - (1 - p_random) * (1 - np.where(flagged, p_flagged, 0.0))
    keep = by_random | by_signal
    frame = pd.DataFrame({
        "day": day, "trace_id": [f"t{seed}-{i}" for i in range(n)], "metric": "Faithfulness",
        "score": np.where(failed, 0.2, 0.9), "passed": ~failed, "by_random": by_random,
        "streams": [[s for s, on in (("random", r), ("bad_signal", b)) if on] for r, b in zip(by_random, by_signal)],
        "inclusion_probability": pi, **{c: "x" for c in SLICE_COLUMNS}})
    frame["language"] = rng.choice(["en", "vi"], n)
    return frame[keep].reset_index(drop=True), float(1 - failed.mean())


def test_random_and_horvitz_thompson_hold_the_truth_where_the_diagnostic_stream_does_not():
    sample, truth = judged_population(1)
    table = quality_table(sample, None, OnlineQualitySettings(slices=((),)))
    rows = table.set_index("estimator")
    for estimator in ("random", "horvitz_thompson"):
        row = rows.loc[estimator]
        assert row["kind"] == "estimate" and row["ci_low"] <= truth <= row["ci_high"]
        assert abs(row["pass_rate"] - truth) < 0.03
    diagnostic = rows.loc["diagnostic:bad_signal"]
    assert diagnostic["kind"] == "diagnostic" and diagnostic["pass_rate"] < truth - 0.3
    assert rows.loc["random", "n"] == int(sample["by_random"].sum())


def test_slices_split_the_estimates_and_a_metric_without_threshold_reports_its_mean():
    sample, _ = judged_population(2, n=4000)
    monitoring = sample.assign(metric="Contextual Relevancy", passed=None)
    table = quality_table(pd.concat([sample, monitoring]), None,
                          OnlineQualitySettings(slices=((), ("language",))))
    assert set(table["slice_value"]) == {"all", "en", "vi"}
    relevancy = table[table["metric"] == "Contextual Relevancy"]
    assert relevancy["pass_rate"].isna().all() and relevancy["mean_score"].notna().all()


def _database(frames: list[pd.DataFrame]) -> duckdb.DuckDBPyConnection:
    """trace_judgments, failure_candidates and trace_signals of the judged samples."""
    con = duckdb.connect()
    judged = pd.concat(frames, ignore_index=True)
    judged = judged.assign(judge_version="v1", status="judged")
    con.register("_j", judged)
    con.execute("CREATE TABLE trace_signals AS SELECT DISTINCT trace_id, day, "
                + ", ".join(SLICE_COLUMNS) + " FROM _j")
    con.execute("CREATE TABLE failure_candidates AS SELECT DISTINCT trace_id FROM _j")
    con.execute("CREATE TABLE raw_traces AS SELECT DISTINCT trace_id, day::TIMESTAMPTZ AS \"timestamp\", "
                "0.001 AS cost_usd FROM _j")
    from rag_loop.store.ddl import ONLINE_DDL
    con.execute(ONLINE_DDL)
    con.execute("INSERT INTO trace_judgments BY NAME SELECT trace_id, day, metric, judge_version, status, "
                "score, passed, by_random, streams, inclusion_probability FROM _j")
    con.execute("INSERT INTO judgment_runs (run_id, finished_at, judge_version, planned) "
                "VALUES ('r1', now(), 'v1', 1)")
    return con


def test_the_slo_fires_with_its_sample_size_and_stays_silent_below_the_minimum_sample():
    bad, _ = judged_population(3, n=3000, fail_rate=0.4)
    con = _database([bad])
    targets = {"Faithfulness": 0.9}
    verdict = slo_verdict(con, DAY, "v1", OnlineQualitySettings(slo_targets=targets, min_sample=30))
    assert verdict.fired and verdict.severity == "ERROR" and verdict.n >= 30
    breaches = verdict.details["breaches"]
    assert {b["slice_value"] for b in breaches} >= {"all"} and all(b["n"] >= 30 for b in breaches)
    quiet = slo_verdict(con, DAY, "v1", OnlineQualitySettings(slo_targets=targets, min_sample=10**6))
    assert not quiet.fired and not quiet.evaluated and "minimum sample" in quiet.note  # not a pass
    empty = slo_verdict(con, DAY + dt.timedelta(days=30), "v1", OnlineQualitySettings(slo_targets=targets))
    assert not empty.fired and not empty.evaluated and empty.value is None and "no judged trace" in empty.note
    assert verdict.evaluated


def test_a_days_rows_are_replaced_by_a_rerun_and_costs_are_their_own_line():
    good, _ = judged_population(4, n=3000, fail_rate=0.02)
    con = _database([good])
    settings = OnlineQualitySettings(slo_targets={"Faithfulness": 0.9}, daily_budget_usd=1.0)
    first = online_quality_day(con, DAY, settings)
    rows = con.execute("SELECT count(*) FROM online_quality").fetchall()
    again = online_quality_day(con, DAY, settings)
    assert con.execute("SELECT count(*) FROM online_quality").fetchall() == rows
    assert [v.fired for v in first] == [v.fired for v in again] == [False, False]
    cost = con.execute("SELECT requests, judged_requests, eval_cost_usd, app_cost_usd FROM online_cost").fetchall()
    assert cost[0][0] == len(good) and cost[0][1] == len(good) and cost[0][2] == 0.0


def _window_day(day: dt.date, traffic: int, pass_rate: float, p_random: float, seed: int) -> pd.DataFrame:
    """One day's random-stream sample of `traffic` traces passing at `pass_rate`, drawn at `p_random`."""
    rng = np.random.default_rng(seed)
    passed = rng.random(traffic) < pass_rate
    drawn = np.flatnonzero(rng.random(traffic) < p_random)  # only the drawn rows are built (the rows, index kept)
    passed = passed[drawn]
    return pd.DataFrame({"day": day, "trace_id": [f"{day}-{i}" for i in drawn], "metric": "Faithfulness",
                         "score": np.where(passed, 0.9, 0.2), "passed": passed, "by_random": True,
                         "streams": [["random"]] * len(drawn), "inclusion_probability": p_random,
                         "p_random": p_random, **dict.fromkeys(SLICE_COLUMNS, "x")}, index=drawn)


def test_a_window_of_days_with_different_random_rates_is_weighted_by_day():
    """A busy day whose budget capped its random stream (2 %) beside a quiet day drawn at 20 %:
    each gives ~20 judged traces, but the busy day is ten times the traffic. Unweighted, the
    window's rate would sit halfway between the days (~0.6); weighted, it is the population's."""
    busy, quiet = dt.date(2026, 11, 5), dt.date(2026, 11, 6)
    estimates, covered = [], 0
    for seed in range(100):
        window = pd.concat([_window_day(busy, 10_000, 0.9, 0.002, seed), _window_day(quiet, 1_000, 0.3, 0.02, seed)])
        row = quality_table(window, None, OnlineQualitySettings(slices=[()])).query("estimator == 'random'").iloc[0]
        estimates.append(row["pass_rate"])
        covered += row["ci_low"] <= (9_000 + 300) / 11_000 <= row["ci_high"]
    assert abs(np.mean(estimates) - 9_300 / 11_000) < 0.02  # the plain proportion: ~0.60
    assert covered / 100 > 0.9


def test_one_random_rate_gives_the_plain_proportion_and_wilson_interval():
    sample = _window_day(DAY, 2_000, 0.8, 0.05, 1)
    row = quality_table(sample, None, OnlineQualitySettings(slices=[()])).query("estimator == 'random'").iloc[0]
    passes, n = sample["passed"].sum(), len(sample)
    from rag_loop.selection.estimates import wilson_interval
    low, high = wilson_interval(np.array([passes]), np.array([n]))
    assert row["n"] == n and row["pass_rate"] == pytest.approx(passes / n)
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(low[0]), pytest.approx(high[0]))


def test_a_breach_of_an_untrusted_judge_says_so_and_pages_no_one_unless_asked():
    """Issue 45: beside the SLO verdict, how well the judge agrees with curators; a judge under
    the trust floor warns (never ERROR) unless the setting keeps it paging."""
    from rag_loop.evaluation.trust import TrustSettings
    from rag_loop.store.ddl import GRADE_AGREEMENT_COLUMNS
    bad, _ = judged_population(3, n=3000, fail_rate=0.4)
    con = _database([bad])
    targets = {"Faithfulness": 0.9}
    con.execute(f"CREATE TABLE judge_grade_agreement ({GRADE_AGREEMENT_COLUMNS})")
    con.execute("INSERT INTO judge_grade_agreement (metric, judge_version, language, n, kappa, ci_low, ci_high) "
                "VALUES ('Faithfulness', 'v1', 'all', 40, 0.2, 0.0, 0.4)")
    warned = slo_verdict(con, DAY, "v1", OnlineQualitySettings(slo_targets=targets, trust=TrustSettings()))
    assert warned.fired and warned.severity == "WARN"
    assert warned.note.endswith("judge not trusted: kappa 0.20 [0.00, 0.40], n=40, under the 0.6 floor: pages no one")
    assert {b["severity"] for b in warned.details["breaches"]} == {"WARN"}
    paging = slo_verdict(con, DAY, "v1", OnlineQualitySettings(slo_targets=targets,
                                                               trust=TrustSettings(untrusted="block")))
    assert paging.severity == "ERROR" and "judge not trusted" in paging.note
    con.execute("UPDATE judge_grade_agreement SET kappa = 0.8, ci_low = 0.7, ci_high = 0.9")
    trusted = slo_verdict(con, DAY, "v1", OnlineQualitySettings(slo_targets=targets, trust=TrustSettings()))
    assert trusted.severity == "ERROR"
    assert trusted.note.endswith("judge agrees with curators: kappa 0.80 [0.70, 0.90], n=40")
