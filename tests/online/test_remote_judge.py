"""A remote judge online: bounded calls in flight, 429 / 5xx / stalls retried with backoff, and
a case that still fails is errored, never passed, and judged again by the next run."""

import pytest

from rag_loop.evaluation.judges.llm import JudgeReplyError, LlmJudge, completion_parts
from rag_loop.evaluation.settings import LlmJudgeSettings
from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from tests.helpers.standin_openai import StandIn
from tests.online.test_judgments import REFERENCELESS, _traces
from tests.online.world import build_world


def _judge(server, **overrides) -> LlmJudge:
    values = {"base_url": server.base_url, "model": "stand-in", "timeout_seconds": 1.0,
              "max_retries": 6, "max_in_flight": 4, "input_cost_per_million": 1.0,
              "output_cost_per_million": 2.0, **overrides}
    return LlmJudge(LlmJudgeSettings(**values))


def test_refusals_and_stalls_are_retried_and_no_case_is_lost(tmp_path, monkeypatch):
    # the first wait before another attempt (0.5 s, doubling) scaled down: how long is
    # retry_wait's (test_remote_pace), what is proven here is that nothing is lost
    monkeypatch.setattr("rag_loop.evaluation.judges.llm.INITIAL_BACKOFF_SECONDS", 0.05)
    con = build_world(tmp_path, _traces(2))
    with StandIn() as server:
        server.flaky, server.stall_seconds = 0.3, 0.5
        report = judge_traces(con, _judge(server, timeout_seconds=0.3), JudgingSettings(REFERENCELESS, concurrency=8))
    assert {0, 429, 500, 503} <= set(server.refused)  # every kind of refusal was met
    assert report.errored == 0 and report.judged == 6 and report.unfinished == 0
    assert server.max_in_flight <= 4  # the bound holds over every case and metric
    costs = con.execute("SELECT count(*) FILTER (cost_usd > 0), sum(cost_usd) FROM trace_judgments").fetchall()[0]
    # each judgement's own cost: a prompt both traces ask (the same context's truths) is paid
    # once, by the first to ask, so the other's may be 0
    assert costs[0] >= 3 and abs(costs[1] - report.cost_usd) < 1e-9


def test_a_judge_that_stays_down_errors_its_cases_marks_the_run_and_the_next_run_retries(tmp_path):
    con = build_world(tmp_path, _traces(3))
    metrics = JudgingSettings([OnlineMetric("Faithfulness", 0.75)], max_error_rate=0.05)
    with StandIn() as server:
        server.mode = "fail"
        down = judge_traces(con, _judge(server, max_retries=0), metrics)
        server.mode = "ok"
        back = judge_traces(con, _judge(server, max_retries=0), metrics)
    assert down.errored == 3 and down.over_error_budget(0.05)
    assert con.execute("SELECT over_error_budget FROM judgment_runs ORDER BY finished_at").fetchall() == [
        (True,), (False,)]
    assert back.planned == 3 and back.judged == 3  # errored cases are judged again
    assert con.execute("SELECT status, count(*) FROM trace_judgments GROUP BY 1").fetchall() == [("judged", 3)]


def test_the_run_deadline_leaves_the_rest_for_the_next_run(tmp_path):
    con = build_world(tmp_path, _traces(6))
    metrics = [OnlineMetric("Answer Relevancy", 0.7)]
    with StandIn() as server:
        server.delay = 0.15  # 2-3 calls a case: a case takes > 0.3 s, six > 1.8 s
        first = judge_traces(con, _judge(server, max_in_flight=1),
                             JudgingSettings(metrics, concurrency=1, deadline_seconds=0.6))
        server.delay = 0.0
        rest = judge_traces(con, _judge(server), JudgingSettings(metrics))
    assert 0 < first.unfinished < 6 and first.errored == 0
    assert rest.judged == first.unfinished
    assert con.execute("SELECT count(*) FROM trace_judgments WHERE status = 'judged'").fetchall() == [(6,)]


def test_connections_are_kept_alive_through_refusals(tmp_path):
    """Every reply of the stand-in says its length (HTTP/1.1), so a run reuses its connections,
    after a 429 or a 5xx too: no more connections than calls in flight (a stall drops one)."""
    con = build_world(tmp_path, _traces(3))
    with StandIn() as server:
        server.flaky, server.refusals = 0.3, (429, 500, 503)
        report = judge_traces(con, _judge(server), JudgingSettings(REFERENCELESS, concurrency=8))
    assert report.errored == 0 and report.judged == 9 and server.refused
    assert len(server.requests) > 3 * server.connections and server.connections <= 4


@pytest.mark.parametrize("body", [b"<html>busy</html>", b"{}", b'{"choices": []}', b"[1]",
                                  b'{"choices": [{"message": {"content": 7}}]}'])
def test_a_reply_that_is_not_a_chat_completion_is_refused(body):
    with pytest.raises(JudgeReplyError):
        completion_parts(body)
    assert completion_parts(b'{"choices": [{"message": {"content": "{}"}}]}') == ("{}", 0, 0)
