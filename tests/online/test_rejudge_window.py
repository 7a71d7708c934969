"""Re-judging has a bound: a new judge version re-judges the selection's last `rejudge_days`
days (the overlap, the SLO window); older traces keep the earlier verdict, said in the run's
summary and marked wherever quality figures use them; new traffic is judged whatever its day."""

from datetime import date

from rag_loop.online.judgments import (
    JudgingSettings,
    OnlineMetric,
    judge_traces,
    kept_verdicts,
    rejudge_window,
    rejudging,
)
from rag_loop.online.overlap import judge_shift
from rag_loop.online.quality import judged_traces, versions_used
from tests.online.world import CHUNK, ScriptedJudge, build_world

FAITHFULNESS, RELEVANCY = OnlineMetric("Faithfulness", 0.75), OnlineMetric("Answer Relevancy", 0.7)


def _traces(days: int = 10, per_day: int = 2) -> list[dict]:
    return [{"trace_id": f"d{d:02d}-{i}", "original_query": f"How many leave days? ({d}, {i})",
             "answer": "You get 15 days.", "chunks": [CHUNK], "timestamp": f"2026-11-{d:02d}T08:00:00Z"}
            for d in range(1, days + 1) for i in range(per_day)]


def test_a_new_version_rejudges_the_last_days_and_keeps_the_older_verdicts_marked(tmp_path):
    con = build_world(tmp_path, _traces())
    old = judge_traces(con, ScriptedJudge(lambda n, c: 0.9, "1"), JudgingSettings([FAITHFULNESS]))
    # the new version also judges a metric the old one did not: new work, judged on every day
    settings = JudgingSettings([FAITHFULNESS, RELEVANCY], rejudge_days=3)
    new = judge_traces(con, ScriptedJudge(lambda n, c: 0.2, "2"), settings)
    assert old.judged == 20 and rejudge_window(con, settings, new.judge_version) == date(2026, 11, 8)
    assert new.judged == 6 + 20  # Faithfulness re-judged on Nov 8-10; Answer Relevancy everywhere
    summary = rejudging(con, new.judge_version)
    assert summary["rejudge_from"] == "2026-11-08" and summary["rejudge_days"] == 3
    assert summary["rejudged"].to_dict("records") == [
        {"metric": "Faithfulness", "rows": 6, "first_day": "2026-11-08", "last_day": "2026-11-10"}]
    assert summary["kept"][["metric", "rows", "first_day", "last_day", "earlier_versions"]].to_dict("records") == [
        {"metric": "Faithfulness", "rows": 14, "first_day": "2026-11-01", "last_day": "2026-11-07",
         "earlier_versions": old.judge_version}]
    # the window is the version's: a later run plans nothing and does not move it
    again = judge_traces(con, ScriptedJudge(lambda n, c: 0.2, "2"), settings)
    assert again.planned == 0 and rejudging(con, new.judge_version)["rejudge_from"] == "2026-11-08"
    # the overlap, judged by both, is where the scale shift is measured
    assert judge_shift(con, new.judge_version)[["metric", "n"]].to_dict("records") == [
        {"metric": "Faithfulness", "n": 6}]
    # quality figures: an old day uses the kept verdicts and says so; a day in the window does not mix
    early = judged_traces(con, date(2026, 11, 2), date(2026, 11, 2), new.judge_version)
    assert set(zip(early["metric"], early["judge_version"], strict=True)) == {
        ("Faithfulness", old.judge_version), ("Answer Relevancy", new.judge_version)}
    assert versions_used(early, new.judge_version) == \
        f"{new.judge_version}; kept from earlier: {old.judge_version} (2 of 4 verdicts)"
    late = judged_traces(con, date(2026, 11, 9), date(2026, 11, 9), new.judge_version)
    assert set(late["judge_version"]) == {new.judge_version} and len(late) == 4
    assert versions_used(late, new.judge_version) == new.judge_version


def test_without_a_bound_or_for_the_first_version_everything_is_judged(tmp_path):
    con = build_world(tmp_path, _traces(days=4, per_day=1))
    first = judge_traces(con, ScriptedJudge(lambda n, c: 0.9, "1"), JudgingSettings([FAITHFULNESS], rejudge_days=1))
    assert first.judged == 4 and rejudging(con, first.judge_version)["rejudge_from"] is None
    every = judge_traces(con, ScriptedJudge(lambda n, c: 0.2, "2"), JudgingSettings([FAITHFULNESS], rejudge_days=None))
    assert every.judged == 4 and len(kept_verdicts(con, every.judge_version)) == 0
    assert len(rejudging(con, every.judge_version)["kept"]) == 0


def test_an_earlier_errored_row_is_not_kept_and_new_traffic_on_an_old_day_is_judged(tmp_path):
    con = build_world(tmp_path, _traces(days=5, per_day=1))
    flaky = ScriptedJudge(lambda n, c: float("nan") if "(1, 0)" in c.input else 0.9, "1")
    old = judge_traces(con, flaky, JudgingSettings([FAITHFULNESS]))
    assert old.errored == 1
    con.execute("INSERT INTO failure_candidates SELECT * REPLACE ('d02-late' AS trace_id) FROM failure_candidates "
                "WHERE trace_id = 'd02-0'")  # selected after the old version ran: never judged
    con.execute("INSERT INTO raw_traces SELECT * REPLACE ('d02-late' AS trace_id) FROM raw_traces "
                "WHERE trace_id = 'd02-0'")
    con.execute("INSERT INTO trace_chunks SELECT * REPLACE ('d02-late' AS trace_id) FROM trace_chunks "
                "WHERE trace_id = 'd02-0'")
    new = judge_traces(con, ScriptedJudge(lambda n, c: 0.2, "2"), JudgingSettings([FAITHFULNESS], rejudge_days=1))
    judged = {t for (t,) in con.execute("SELECT trace_id FROM trace_judgments WHERE judge_version = ?",
                                        [new.judge_version]).fetchall()}
    assert judged == {"d01-0", "d02-late", "d05-0"}  # errored before, never judged, in the window
