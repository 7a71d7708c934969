"""Regression eval: offline metrics, the DeepEval-native path on a stand-in server, gates, demo."""

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from deepeval.test_case import LLMTestCase

from rag_loop.evaluation.gates import Gate, evaluate_gates, summarize
from rag_loop.evaluation.judges.evidence import Evidence, key_tokens, statements
from rag_loop.evaluation.judges.llm import LlmJudge
from rag_loop.evaluation.judges.offline import (
    OfflineAnswerRelevancy,
    OfflineContextualPrecision,
    OfflineContextualRecall,
    OfflineContextualRelevancy,
    OfflineCorrectness,
    OfflineFaithfulness,
    OfflineJudge,
    average_precision,
)
from rag_loop.evaluation.regression import EvalSettings, run_regression
from rag_loop.evaluation.runner import EvalError
from rag_loop.evaluation.settings import LlmJudgeSettings
from tests.helpers import DEMO_APP, undeclared_tables
from tests.helpers.standin_openai import StandIn


@pytest.fixture(scope="module")
def evidence():
    return Evidence()


def test_contextual_precision_is_average_precision_as_in_seed_000():
    assert average_precision([True, True, False, False, True]) == pytest.approx(0.867, abs=1e-3)
    assert average_precision([False, False, True, True, True]) == pytest.approx(0.478, abs=1e-3)
    assert average_precision([False, False]) == 0.0


@pytest.mark.slow
def test_offline_metrics_on_the_seed_worked_examples(evidence):
    faithfulness = OfflineFaithfulness(evidence).measure(LLMTestCase(
        input="When was GPT-4 released?",
        actual_output="GPT-4 was released in March 2023. It was developed by OpenAI. "
                      "It has a context window of 8192 tokens.",
        retrieval_context=["GPT-4 was released in March 2023. GPT-4 was developed by OpenAI."]))
    recall = OfflineContextualRecall(evidence).measure(LLMTestCase(
        input="leave policy?", actual_output="-",
        expected_output="Full-time employees get 15 days of paid annual leave. Up to 7 unused days "
                        "carry over until 31 March. Sick leave is 10 days per year. Parental leave "
                        "is 16 weeks fully paid.",
        retrieval_context=["Full-time employees get 15 days of paid annual leave per year.",
                           "Up to 7 unused leave days can be carried over until 31 March.",
                           "Employees get 10 days of paid sick leave per year."]))
    relevancy = OfflineContextualRelevancy(evidence).measure(LLMTestCase(
        input="How do I reset my MFA?", actual_output="-",
        retrieval_context=["To reset MFA, open the IT portal and choose Reset authenticator.",
                           "MFA reset needs your employee badge number.", "The office opens at 8:00.",
                           "Payday is the 25th of each month.",
                           "After an MFA reset you enrol a new authenticator app."]))
    answer = OfflineAnswerRelevancy(evidence).measure(LLMTestCase(
        input="How does self-attention work?",
        actual_output="Self-attention creates Query, Key and Value vectors for each token. Attention "
                      "scores express how related two tokens are. The Transformer paper was "
                      "published in 2017."))
    assert (faithfulness, recall, relevancy, answer) == pytest.approx((2 / 3, 3 / 4, 3 / 5, 2 / 3))


@pytest.mark.slow
def test_precision_metric_ranks_relevant_nodes(evidence):
    expected = "Full-time employees get 15 days of paid annual leave per year."
    nodes = ["The office opens at 8:00.", "Payday is the 25th.", expected, "Parking is free.", expected]
    metric = OfflineContextualPrecision(evidence)
    score = metric.measure(LLMTestCase(input="leave days?", actual_output="-", expected_output=expected,
                                       retrieval_context=nodes))
    assert score == pytest.approx((1 / 3 + 2 / 5) / 2) and "--R-R" in metric.reason


@pytest.mark.slow
def test_numbers_and_codes_must_match_exactly(evidence):
    assert key_tokens("ERR-PAY-942 means 15 days, mail it@corp.example") >= {"err-pay-942", "15"}
    assert statements("Fifteen days [leave@2026#annual-en]. Ask HR!") == ["Fifteen days", "Ask HR!"]
    case = LLMTestCase(input="leave?", actual_output="Employees get 12 days of paid annual leave.",
                       expected_output="Employees get 15 days of paid annual leave.")
    metric = OfflineCorrectness(evidence, threshold=0.7)
    assert metric.measure(case) == 0.0 and metric.is_successful() is False


def _results(rows):
    frame = pd.DataFrame(rows)
    for column in ("language", "query_type", "origin", "failure_type"):
        frame[column] = frame.get(column, "x")
    frame["tags"] = [["t"]] * len(frame)
    return frame


def test_summary_is_a_vector_with_tails_and_errors_apart():
    scores = [0.88, 0.90, 0.91, 0.89, 0.92, 0.90, 1.0, 1.0, 1.0, 1.0, 0.4, 1.0]
    rows = [{"golden": f"g{i}", "metric": "Faithfulness" if i < 6 else "Answer Relevancy",
             "score": s, "passed": s >= 0.8, "errored": False} for i, s in enumerate(scores)]
    rows.append({"golden": "g99", "metric": "Faithfulness", "score": None, "passed": None, "errored": True})
    table = summarize(_results(rows)).set_index(["metric", "slice"])
    steady, tail = table.loc[("Faithfulness", "all")], table.loc[("Answer Relevancy", "all")]
    assert steady["mean"] == pytest.approx(0.9) and tail["mean"] == pytest.approx(0.9)
    assert steady["errored"] == 1 and steady["n"] == 7 and steady["pass_rate"] == 1.0
    assert tail["severe"] == 0 and tail["p10"] < 0.75 < steady["p10"] and tail["pass_rate"] == pytest.approx(5 / 6)


@pytest.mark.parametrize("bad", [{"mode": "shadow"}, {"max_error_rate": 2.0},
                                 {"gates": [Gate("Vibes", min_mean=0.5)]}])
def test_eval_settings_refuse_bad_values(bad):
    with pytest.raises(ValueError):
        EvalSettings(**bad)


def test_gates_name_the_failing_slice():
    table = pd.DataFrame([
        {"metric": "Correctness [GEval]", "slice": "all", "slice_value": "all", "n": 20, "errored": 0,
         "mean": 0.6, "pass_rate": 0.6, "delta_pass_rate": -0.05},
        {"metric": "Correctness [GEval]", "slice": "language", "slice_value": "vi", "n": 8, "errored": 0,
         "mean": 0.4, "pass_rate": 0.4, "delta_pass_rate": -0.3},
        {"metric": "Correctness [GEval]", "slice": "language", "slice_value": "de", "n": 2, "errored": 0,
         "mean": 0.0, "pass_rate": 0.0, "delta_pass_rate": -1.0}])  # below min_cases
    (outcome,) = evaluate_gates(table, [Gate("Correctness [GEval]", max_drop=0.1, slices=("all", "language"))])
    assert not outcome.passed and [(f["slice"], f["value"]) for f in outcome.failures] == [("language", "vi")]
    (ok,) = evaluate_gates(table, [Gate("Correctness [GEval]", min_pass_rate=0.5)])
    assert ok.passed


def test_deepeval_native_metrics_through_an_openai_compatible_endpoint(small_release, monkeypatch):
    goldens_dir, con = small_release
    monkeypatch.setenv("STANDIN_KEY", "secret-123")
    with StandIn() as server:
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="stand-in-judge",
                                          api_key_env="STANDIN_KEY", max_retries=0, timeout_seconds=5,
                                          input_cost_per_million=1.0, output_cost_per_million=2.0))
        report = run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP))
        calls = len(server.requests)
        again = run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP))
    assert report.errored == 0 and calls > 10 and report.usage.calls == calls
    assert {r["path"] for r in server.requests} == {"/v1/chat/completions"}
    assert {r["authorization"] for r in server.requests} == {"Bearer secret-123"}
    assert {r["body"]["model"] for r in server.requests} == {"stand-in-judge"}
    schemas = {r["body"]["response_format"]["json_schema"]["name"] for r in server.requests}
    assert {"Claims", "Truths", "Verdicts"} <= schemas
    results = con.execute("SELECT metric, score, passed FROM eval_results WHERE run_id = ?",
                          [report.run_id]).df()
    assert set(results["metric"]) >= {"Faithfulness", "Contextual Precision", "Correctness [GEval]"}
    assert results["score"].between(0, 1).all()
    assert report.usage.cost_usd == pytest.approx(calls * (100 * 1.0 + 20 * 2.0) / 1e6)
    # the rerun costs nothing (a prompt asked twice at once was paid once: a hit the first time)
    assert again.usage.calls == 0 and again.usage.cache_hits == calls + report.usage.cache_hits
    run = con.execute("SELECT judge->>'model', deepeval_version, release_sha256, cost_usd FROM eval_runs "
                      "WHERE run_id = ?", [report.run_id]).fetchall()[0]
    manifest = json.loads((goldens_dir / "v0001" / "manifest.json").read_text())
    assert run[0] == "stand-in-judge" and run[1] == "4.3.1" and run[2] == manifest["sha256"] and run[3] > 0


def test_a_remote_judges_regression_eval_keeps_its_calls_in_flight_as_online_judging_does(small_release):
    """One case at a time by `concurrency`, but a remote judge's bound on calls opens as many
    cases (`cases_at_once`, the online rule): the two goldens' calls overlap in time."""
    goldens_dir, con = small_release
    with StandIn() as server:
        server.delay = 0.05
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0, timeout_seconds=5,
                                          max_in_flight=16))
        report = run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP, concurrency=1))
    spans = {}
    for request in server.requests:
        prompt = request["body"]["messages"][0]["content"]
        golden = "g0" if "annual leave" in prompt else "g1" if "password" in prompt else None
        if golden:
            first, last = spans.get(golden, (request["arrived"], request["answered"]))
            spans[golden] = (min(first, request["arrived"]), max(last, request["answered"]))
    assert report.errored == 0 and set(spans) == {"g0", "g1"}
    (a_start, a_end), (b_start, b_end) = spans["g0"], spans["g1"]
    assert a_start < b_end and b_start < a_end  # the cases ran at once
    assert 1 < server.max_in_flight <= 16


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_a_judge_outage_marks_cases_errored_never_passed(small_release, mode):
    goldens_dir, con = small_release
    with StandIn() as server:
        server.mode = mode
        judge = LlmJudge(LlmJudgeSettings(base_url=server.base_url, model="m", max_retries=0,
                                          timeout_seconds=0.1))  # "hang" holds a reply 3 s
        with pytest.raises(EvalError, match="cannot be trusted"):
            run_regression(con, goldens_dir, judge, EvalSettings(**DEMO_APP))
    stored = con.execute("SELECT count(*), count(*) FILTER (errored), count(*) FILTER (passed) "
                         "FROM eval_results").fetchall()[0]
    assert stored[0] > 0 and stored[1] == stored[0] and stored[2] == 0


def test_replay_scores_what_production_answered(small_release):
    goldens_dir, con = small_release
    from rag_loop.store.tables import create_tables
    create_tables(con)
    con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query, answer) VALUES "
                "('t0', now(), 'q', 'Full-time employees get 15 days of paid annual leave per year.')")
    con.execute("INSERT INTO trace_chunks (trace_id, doc_id, chunk_id, rank, selected, text, day) VALUES "
                "('t0', 'leave', 'c1', 1, true, 'Full-time employees get 15 days of paid annual leave per year.', "
                "CAST(timezone('UTC', now()) AS DATE))")
    report = run_regression(con, goldens_dir, OfflineJudge(), EvalSettings(mode="replay", max_error_rate=1.0))
    results = con.execute("SELECT golden, metric, score, errored FROM eval_results WHERE run_id = ? "
                          "ORDER BY 1, 2", [report.run_id]).df()
    found = results[results["golden"] == "g0"].set_index("metric")["score"]
    assert found["Correctness [GEval]"] == 1.0 and found["Contextual Recall"] == 1.0
    assert results[results["golden"] == "g1"]["errored"].all()  # its trace is not stored


@pytest.mark.slow
def test_demo_candidate_fails_a_gate_that_the_baseline_passes(demo_releases):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.evaluation import regression_eval
    from rag_loop_dagster.assets.resources import LocalEmbedderResource, OfflineJudgeResource, PythonRagAppResource
    root, paths = demo_releases

    def evaluate(config):
        return materialize([regression_eval], raise_on_error=False, resources={
            "duckdb": DuckDBResource(database=str(root / "rag.duckdb")), "paths": paths,
            "rag_app": PythonRagAppResource(import_path=DEMO_APP["rag_app"], config={"config": config}),
            "judge": OfflineJudgeResource(), "embedder": LocalEmbedderResource()})

    baseline = evaluate("baseline")
    candidate = evaluate("candidate")
    assert baseline.success and not candidate.success
    checks = {c.check_name: c for c in candidate.get_asset_check_evaluations()}
    hard = checks["hard_gates"]
    assert not hard.passed and hard.severity.value == "ERROR"
    failures = hard.metadata["failures"].value
    assert "Correctness" in failures and "vi" in failures and "policy" in failures
    # the failed run's first error line is the reason (issue 44), not "1 blocking asset check failed"
    (failure,) = candidate.get_step_failure_events()
    reason = failure.step_failure_data.user_failure_data.description
    assert reason.startswith("BLOCKED by its hard gates: Correctness [GEval] on language=vi: pass rate dropped ")
    assert "on query_type=policy: pass rate dropped " in reason and hard.description == reason
    assert all(c.passed for c in baseline.get_asset_check_evaluations() if c.check_name == "hard_gates")
    with duckdb.connect(str(root / "rag.duckdb"), read_only=True) as con:
        flipped = con.execute("""SELECT f.input, r.language, r.query_type FROM eval_flips f
                                 JOIN eval_results r ON r.run_id = f.run_id AND r.golden = f.golden
                                  AND r.metric = f.metric
                                 WHERE f.run_id = (SELECT max(run_id) FROM eval_runs)""").fetchall()
        assert flipped and all(lang == "vi" and qtype == "policy" for _, lang, qtype in flipped)
        blocked = con.execute("SELECT rag_config->>'config', blocked FROM eval_runs ORDER BY started_at").fetchall()
        assert blocked == [("baseline", False), ("candidate", True)]
    report = Path(candidate.asset_materializations_for_node("regression_eval")[0].metadata["report"].value)
    page = report.read_text()
    assert report.parent == root / "reports" and "BLOCKED" in page
    assert all(layer in page for layer in ("PRODUCT layer", "QUALITY layer", "PERFORMANCE layer", "CHANGE layer"))
    assert "kb-2026-11-09" in page and page.count("data:image/png;base64,") >= 6
    assert undeclared_tables(root / "rag.duckdb") == set()
    _the_workspace_compares_the_candidate_with_the_baseline(paths)


def _the_workspace_compares_the_candidate_with_the_baseline(paths):
    """The curator workspace's eval page, from the runs' exports: the vi / policy flips first,
    each with the expected output and both answers."""
    from starlette.testclient import TestClient

    from rag_loop.workspace.app import create_app
    from rag_loop.workspace.store import Workspace
    workspace = Workspace(Path(paths.curation_dir), Path(paths.reports_dir))
    runs = workspace.eval_runs()
    candidate = next(r for r in runs if r["blocked"])
    rows = workspace.compare(candidate["run_id"], candidate["baseline_run_id"])
    flipped = [r for r in rows if r["flipped"]]
    assert flipped and rows[:len(flipped)] == flipped  # flips first
    assert all(r["language"] == "vi" and r["query_type"] == "policy" for r in flipped)
    assert all(r["expected_output"] and r["baseline_answer"] and r["answer"] != r["baseline_answer"] for r in flipped)
    client = TestClient(create_app(workspace), base_url="http://127.0.0.1")  # a host the workspace serves
    client.cookies.set("rl_curator", "ana")
    html = client.get(f"/evals/{candidate['run_id']}").text
    assert f"{len(flipped)} case × metric flipped" in html and html.count('class="flipped"') == len(flipped)
    assert client.get("/evals").text.count("BLOCKED") == 1


@pytest.mark.slow
def test_evidence_ranks_a_paraphrase_above_an_unrelated_sentence_and_checks_numbers(evidence):
    claim = ["Passwords rotate every 90 days"]
    context = ["Passwords are rotated every 90 days.", "The cafeteria opens at noon.",
               "Passwords are rotated every 180 days."]
    paraphrase, unrelated, _ = evidence.similarity(claim, context)[0]
    assert paraphrase > 0.6 > unrelated
    assert evidence.supported(claim, context[:1]) == [True]
    assert evidence.supported(claim, context[1:]) == [False]  # 180 is not 90
