"""Online evaluation on the demo loop: what was judged, what the judge found that no signal did,
and judged quality per day with its SLO and budget checks."""

from datetime import date, timedelta

import pandas as pd
import pytest

from rag_loop.online.quality import OnlineQualitySettings, online_quality_day
from tests.helpers import DEMO, demo_copy, fake_embedder, metadata_of, query


@pytest.fixture(scope="module")
def truth():
    return pd.read_parquet(DEMO / "truth.parquet", columns=["trace_id", "outcome", "events"])


def test_every_selected_trace_is_judged_or_unjudgeable_with_its_reason(demo_run):
    run, database, _ = demo_run
    meta = metadata_of(run, "trace_judgments")
    assert meta["errored"] == 0 and meta["judged"] > 5000 and meta["unfinished"] == 0
    selected = query(database, "SELECT count(*) FROM failure_candidates")[0][0]
    per_metric = dict(query(database, "SELECT metric, count(DISTINCT trace_id) FROM trace_judgments GROUP BY 1"))
    assert per_metric == dict.fromkeys(["Faithfulness", "Answer Relevancy", "Contextual Relevancy"], selected)
    reasons = dict(query(database, "SELECT reason, count(*) FROM trace_judgments WHERE status = 'unjudgeable' "
                                   "GROUP BY 1"))
    assert set(reasons) == {"unjudgeable: no answer", "unjudgeable: no context"}
    timeouts = query(database, """SELECT DISTINCT j.reason FROM trace_judgments j JOIN raw_traces t
                                  USING (trace_id) WHERE t.status = 'timeout' AND j.metric = 'Faithfulness'""")
    assert timeouts == [("unjudgeable: no answer",)]  # a timeout is never scored unfaithful


def test_the_judge_finds_the_surge_answers_that_no_signal_flags(demo_run, truth):
    """Event 6: ERR-PAY-977 questions answered from another payment code's chunk, with good
    retrieval scores and no complaint: every one that was selected fails Answer Relevancy."""
    _, database, _ = demo_run
    judged = pd.DataFrame(query(database, """
        SELECT j.trace_id, j.passed, s.signal_count FROM trace_judgments j JOIN trace_signals s USING (trace_id)
        WHERE j.metric = 'Answer Relevancy' AND j.status = 'judged'"""),
        columns=["trace_id", "passed", "signal_count"]).merge(truth, on="trace_id")
    quiet = judged[judged["events"].map(lambda e: 6 in list(e)) & (judged["signal_count"] == 0)
                   & (judged["outcome"] == "wrong")]
    assert len(quiet) >= 15 and not quiet["passed"].any()


def test_queue_rows_carry_the_judges_scores_and_p1_is_thumbs_down_with_low_faithfulness(demo_run):
    _, database, paths = demo_run
    rows = query(database, """SELECT q.priority, q.judge_score, s.thumbs_down, q.judge_scores
                              FROM curation_queue q JOIN trace_signals s USING (trace_id)""")
    assert any(r[3] for r in rows) and all(r[1] is None or 0 <= r[1] <= 1 for r in rows)
    for priority, score, thumbs_down, _ in rows:
        if priority == "P1":
            assert thumbs_down and (score is None or score < 0.75)


def test_online_quality_per_day_estimates_from_the_random_stream_and_labels_diagnostics(demo_run, tmp_path):
    con = demo_copy(demo_run, tmp_path)
    settings = OnlineQualitySettings(slo_targets={"Faithfulness": 0.9, "Answer Relevancy": 0.6},
                                     daily_budget_usd=0.6)
    verdicts = {}
    for offset in range(14):
        day = date(2026, 11, 1) + timedelta(days=offset)
        verdicts[day] = {v.name: v for v in online_quality_day(con, day, settings)}
    table = con.execute("SELECT * FROM online_quality").df()
    assert table["day"].nunique() == 14 and set(table["kind"]) == {"estimate", "diagnostic"}
    assert set(table.loc[table["kind"] == "estimate", "estimator"]) == {"random", "horvitz_thompson"}
    assert table.loc[table["kind"] == "diagnostic", "estimator"].str.startswith("diagnostic:").all()
    random_n = con.execute("""SELECT j.day, count(*) FROM trace_judgments j JOIN failure_candidates c USING (trace_id)
                              WHERE j.metric = 'Faithfulness' AND j.status = 'judged' AND j.by_random
                              GROUP BY 1""").fetchall()
    overall = table[(table["slice"] == "all") & (table["metric"] == "Faithfulness") & (table["estimator"] == "random")]
    assert {pd.Timestamp(d).date(): n for d, n in zip(overall["day"], overall["n"])} == dict(random_n)
    for checks in verdicts.values():
        slo = checks["online_slo"]
        for breach in slo.details.get("breaches", []):
            assert breach["n"] >= settings.min_sample  # every alert carries its n, none below the minimum
        assert checks["online_eval_budget"].fired is False  # the offline judge costs nothing
    assert verdicts[date(2026, 11, 1)]["online_slo"].fired is False  # one day of random traffic: too few
    costs = con.execute("SELECT count(*), min(requests), sum(judged_requests) FROM online_cost").fetchall()[0]
    assert costs[0] == 14 and costs[1] > 300 and costs[2] > 2000


def test_online_quality_materializes_a_partition_with_its_checks(demo_run, tmp_path):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.online import online_quality
    from rag_loop_dagster.assets.resources import DuckDBEngineResource, RagLoopPaths
    copy = tmp_path / "rag.duckdb"
    demo_copy(demo_run, tmp_path).close()
    (tmp_path / "copy.duckdb").rename(copy)
    result = materialize([online_quality], partition_key="2026-11-12", resources={
        "duckdb": DuckDBResource(database=str(copy)), "embedder": fake_embedder(),
        "engine": DuckDBEngineResource(), "paths": RagLoopPaths()})
    assert result.success
    checks = {c.check_name for c in result.get_asset_check_evaluations()}
    assert checks == {"online_slo", "online_eval_budget"}
