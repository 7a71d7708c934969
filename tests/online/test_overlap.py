"""A new judge version judges the same traces again: the scale shift is measured on the overlap,
and a judge change on the day the application changed is flagged."""

from datetime import UTC, datetime

from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from rag_loop.online.overlap import changed_with_the_app, judge_shift
from tests.online.test_judgments import _traces
from tests.online.world import ScriptedJudge, build_world

METRICS = JudgingSettings([OnlineMetric("Faithfulness", 0.5)])


def _at(day: str):
    return lambda: datetime.fromisoformat(f"{day}T12:00:00+00:00").astimezone(UTC)


def test_the_shift_between_two_judge_versions_is_measured_on_the_traces_both_judged(tmp_path):
    con = build_world(tmp_path, _traces(10))
    old = judge_traces(con, ScriptedJudge(lambda n, c: 0.8, "old"), METRICS)
    scores = iter([0.6] * 5 + [0.3] * 5)
    new = judge_traces(con, ScriptedJudge(lambda n, c: next(scores), "new"), METRICS)
    shift = judge_shift(con, new.judge_version).iloc[0]
    assert shift["old_version"] == old.judge_version and shift["n"] == 10
    assert abs(shift["mean_difference"] - (0.45 - 0.8)) < 1e-9 and shift["agreement"] == 0.5
    assert judge_shift(con, old.judge_version)["n"].tolist() == [10]  # symmetric: the old one sees it too


def test_a_judge_change_on_the_day_a_new_prompt_reached_traffic_is_flagged(tmp_path):
    traces = [{**t, "prompt_version": "qa-v3", "timestamp": "2026-11-01T08:00:00Z"} for t in _traces(3)]
    traces += [{**t, "trace_id": f"n{i}", "prompt_version": "qa-v4", "timestamp": "2026-11-06T08:00:00Z"}
               for i, t in enumerate(_traces(3))]
    con = build_world(tmp_path, traces)
    first = judge_traces(con, ScriptedJudge(lambda n, c: 0.9, "1"), METRICS, now=_at("2026-11-06"))
    assert changed_with_the_app(con, first.judge_version) == []  # the first judge changes nothing
    quiet = judge_traces(con, ScriptedJudge(lambda n, c: 0.9, "2"), METRICS, now=_at("2026-11-05"))
    assert changed_with_the_app(con, quiet.judge_version) == []
    same_day = judge_traces(con, ScriptedJudge(lambda n, c: 0.9, "3"), METRICS, now=_at("2026-11-06"))
    changes = changed_with_the_app(con, same_day.judge_version)
    assert [(c["kind"], c["version"]) for c in changes] == [("prompt_version", "qa-v4")]
