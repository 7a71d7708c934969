"""trace_judgments: what is judged, once per judge version, with what context; what cannot be."""

import math
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from tests.online.world import CHUNK, TEXT, ScriptedJudge, build_world

REFERENCELESS = [OnlineMetric("Faithfulness", 0.75), OnlineMetric("Answer Relevancy", 0.7),
                 OnlineMetric("Contextual Relevancy", 0.5)]


def _traces(n: int, **fields) -> list[dict]:
    return [{"trace_id": f"t{i:03d}", "original_query": f"How many leave days do I get? ({i})",
             "answer": "You get 15 days.", "chunks": [CHUNK],
             "citations": [CHUNK["chunk_id"]], **fields} for i in range(n)]


def _rows(con, version=None):
    sql = "SELECT trace_id, metric, status, score, passed, reason, judge_version FROM trace_judgments"
    rows = con.execute(sql + (" WHERE judge_version = ?" if version else "") + " ORDER BY ALL",
                       [version] if version else []).fetchall()
    return rows


def test_each_selected_trace_is_judged_once_per_metric_and_a_rerun_judges_nothing(tmp_path):
    con = build_world(tmp_path, _traces(6))
    judge = ScriptedJudge(lambda name, case: 0.9)
    first = judge_traces(con, judge, JudgingSettings(REFERENCELESS))
    assert (first.planned, first.judged, first.unjudgeable, first.errored) == (18, 18, 0, 0)
    again = judge_traces(con, judge, JudgingSettings(REFERENCELESS))
    assert again.planned == 0 and len(judge.calls) == 18 and len(_rows(con)) == 18


def test_a_new_judge_version_judges_again_and_the_old_rows_stay(tmp_path):
    con = build_world(tmp_path, _traces(4))
    old = judge_traces(con, ScriptedJudge(lambda n, c: 0.9, "1"), JudgingSettings(REFERENCELESS))
    new = judge_traces(con, ScriptedJudge(lambda n, c: 0.2, "2"), JudgingSettings(REFERENCELESS))
    assert old.judge_version != new.judge_version and new.judged == 12
    assert {r[4] for r in _rows(con, old.judge_version)} == {True}
    assert {r[4] for r in _rows(con, new.judge_version)} == {False}


def test_the_context_is_the_traces_text_else_the_knowledge_bases_and_missing_is_unjudgeable(tmp_path):
    traces = [{"trace_id": "kb", "answer": "15 days.", "chunks": [CHUNK]},
              {"trace_id": "own", "answer": "15 days.", "chunks": [{**CHUNK, "chunk_id": "own#1",
                                                                    "text": "Own text."}]},
              {"trace_id": "ids-only", "answer": "15 days.", "chunks": [{**CHUNK, "chunk_id": "gone#1"}]},
              {"trace_id": "nothing", "answer": "15 days.", "chunks": []},
              {"trace_id": "no-answer", "answer": None, "chunks": [CHUNK], "status": "timeout"}]
    con = build_world(tmp_path, traces)
    seen = {}
    judge = ScriptedJudge(lambda name, case: seen.setdefault(case.actual_output + str(case.retrieval_context), 1.0))
    judge_traces(con, judge, JudgingSettings(REFERENCELESS))
    status = {(t, m): (s, r) for t, m, s, _, _, r, _ in _rows(con)}
    assert status[("kb", "Faithfulness")][0] == "judged" and status[("own", "Faithfulness")][0] == "judged"
    assert f"15 days.{[TEXT]}" in seen and "15 days.['Own text.']" in seen
    for trace in ("ids-only", "nothing"):
        assert status[(trace, "Faithfulness")] == ("unjudgeable", "unjudgeable: no context")
        assert status[(trace, "Contextual Relevancy")] == ("unjudgeable", "unjudgeable: no context")
        assert status[(trace, "Answer Relevancy")][0] == "judged"
    assert status[("no-answer", "Faithfulness")] == ("unjudgeable", "unjudgeable: no answer")
    assert status[("no-answer", "Contextual Relevancy")][0] == "judged"
    unjudged = [row for row in _rows(con) if row[2] == "unjudgeable"]
    assert all(row[3] is None and row[4] is None for row in unjudged)  # never scored, never failed


def test_each_metric_judges_its_own_share_and_records_its_inclusion_probability(tmp_path):
    con = build_world(tmp_path, _traces(400))
    metrics = [OnlineMetric("Faithfulness", 0.75, rate=1.0), OnlineMetric("Answer Relevancy", 0.7, rate=0.25)]
    judge_traces(con, ScriptedJudge(lambda n, c: 1.0), JudgingSettings(metrics))
    counts = dict(con.execute("SELECT metric, count(*) FROM trace_judgments GROUP BY 1").fetchall())
    assert counts["Faithfulness"] == 400 and 70 <= counts["Answer Relevancy"] <= 130
    pis = dict(con.execute("SELECT metric, any_value(inclusion_probability) FROM trace_judgments "
                           "GROUP BY 1").fetchall())
    assert pis == {"Faithfulness": 1.0, "Answer Relevancy": 0.25}


def test_rates_outside_zero_one_and_metrics_that_need_a_reference_are_refused():
    with pytest.raises(ValueError, match="rate"):
        OnlineMetric("Faithfulness", 0.7, rate=1.5)
    with pytest.raises(ValueError, match="referenceless"):
        OnlineMetric("Contextual Recall", 0.7)


@pytest.fixture(scope="module")
def world_of(tmp_path_factory) -> Callable[[int], duckdb.DuckDBPyConnection]:
    """A fresh copy of the world of `n` traces (`_traces(n)`): each built once (a build is most
    of a property example's time), closed, and its database file copied for every example."""
    built: dict[int, Path] = {}

    def copy(n: int) -> duckdb.DuckDBPyConnection:
        if n not in built:
            folder = tmp_path_factory.mktemp(f"world{n}")
            build_world(folder, _traces(n)).close()
            built[n] = folder / "world.duckdb"
        copied = tmp_path_factory.mktemp("w") / "world.duckdb"
        shutil.copy(built[n], copied)
        return duckdb.connect(str(copied))
    return copy


HOSTILE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none(),
                    st.sampled_from(["raise", "timeout", "error-flag"]))


@settings(max_examples=10, deadline=None)
@given(replies=st.lists(HOSTILE, min_size=1, max_size=12))
def test_hostile_judge_replies_are_errored_never_passed_and_never_block_the_others(world_of, replies):
    con = world_of(len(replies))

    def verdict(name, case):
        reply = replies[len(calls) % len(replies)]
        calls.append(reply)
        if reply == "raise":
            raise RuntimeError("judge down")
        if reply == "timeout":
            raise TimeoutError("judge timed out")
        if reply == "error-flag" or reply is None:
            return None
        return reply
    calls: list = []
    report = judge_traces(con, ScriptedJudge(verdict), JudgingSettings([OnlineMetric("Faithfulness", 0.5)]))
    rows = con.execute("SELECT status, score, passed FROM trace_judgments").fetchall()
    assert len(rows) == len(replies) and report.judged + report.errored == len(replies)
    for status, score, passed in rows:
        if status == "judged":
            assert score is not None and math.isfinite(score) and 0.0 <= score <= 1.0
            assert passed == (score >= 0.5)
        else:
            assert status == "errored" and passed is None and score is None


@settings(max_examples=6, deadline=None)
@given(kill_after=st.integers(0, 29), flush_every=st.integers(1, 8))
def test_a_run_killed_half_way_keeps_what_it_judged_and_the_rerun_judges_only_the_rest(
        world_of, kill_after, flush_every):
    con = world_of(10)
    calls: list[str] = []

    def dying(name, case):
        if len(calls) == kill_after:
            raise KeyboardInterrupt  # the process is stopped mid-run
        calls.append(name)
        return 0.9
    metrics = JudgingSettings(REFERENCELESS, concurrency=2, flush_every=flush_every)
    with pytest.raises(KeyboardInterrupt):
        judge_traces(con, ScriptedJudge(dying), metrics)
    kept = con.execute("SELECT count(*) FROM trace_judgments").fetchall()[0][0]
    assert kept <= kill_after
    rest = judge_traces(con, ScriptedJudge(lambda n, c: 0.9), metrics)
    assert rest.planned == 30 - kept and rest.judged == 30 - kept
    assert con.execute("SELECT count(*), count(DISTINCT (trace_id, metric)) FROM trace_judgments "
                       "").fetchall() == [(30, 30)]


CHUNKS = st.lists(st.fixed_dictionaries({
    "text": st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=30)),
    "in_kb": st.booleans(), "selected": st.sampled_from([True, False, None])}), max_size=4)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces=st.lists(CHUNKS, min_size=1, max_size=5))
def test_a_trace_is_unjudgeable_for_want_of_context_exactly_when_no_text_reached_the_llm(tmp_path_factory, traces):
    """Chunks with and without text, in the knowledge base or not, selected or dropped by the
    reranker: Faithfulness is judged iff some selected chunk has text, never scored otherwise."""
    rows, expected = [], {}
    for i, chunks in enumerate(traces):
        spec = [{**CHUNK, "chunk_id": f"c{i}-{j}", "rank": j + 1, "selected": c["selected"],
                 **({"text": c["text"]} if c["text"] is not None else {})} for j, c in enumerate(chunks)]
        rows.append({"trace_id": f"t{i}", "original_query": f"q {i}", "answer": "15 days.", "chunks": spec})
        reached = [c for c in chunks if c["selected"] is not False]
        expected[f"t{i}"] = any(c["text"] or c["in_kb"] for c in reached)
    con = build_world(tmp_path_factory.mktemp("w"), rows, knowledge=False)
    for i, chunks in enumerate(traces):
        for j, chunk in enumerate(chunks):
            if chunk["in_kb"]:
                con.execute("INSERT INTO document_chunks VALUES (?, 'leave', '2026', 'Kb text.')", [f"c{i}-{j}"])
    judge_traces(con, ScriptedJudge(lambda n, c: 1.0), JudgingSettings([OnlineMetric("Faithfulness", 0.5)]))
    status = dict(con.execute("SELECT trace_id, status FROM trace_judgments").fetchall())
    assert status == {t: "judged" if judged else "unjudgeable" for t, judged in expected.items()}
    assert con.execute("SELECT count(*) FROM trace_judgments WHERE status = 'unjudgeable' "
                       "AND (score IS NOT NULL OR passed IS NOT NULL)").fetchall() == [(0,)]


@settings(max_examples=20, deadline=None)
@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["judged", "errored"]),
                                           st.floats(0, 1)), max_size=8), min_size=1, max_size=4))
def test_duplicate_judgements_are_stored_once_and_the_latest_stands(batches):
    """The same trace × metric × version written again (in one batch or across runs) is one row."""
    import duckdb

    from rag_loop.online.judgments import store_judgments
    from rag_loop.store.ddl import ONLINE_DDL
    con = duckdb.connect()
    con.execute(ONLINE_DDL)
    last = {}
    for batch in batches:
        unique = {}
        for trace, status, score in batch:
            unique[trace] = {"trace_id": f"t{trace}", "metric": "Faithfulness", "judge_version": "v",
                             "status": status, "score": score, "streams": ["random"]}
        if unique:
            store_judgments(con, list(unique.values()))
            last.update({f"t{t}": row["status"] for t, row in unique.items()})
    stored = dict(con.execute("SELECT trace_id, status FROM trace_judgments").fetchall())
    assert stored == last
