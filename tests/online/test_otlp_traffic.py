"""On what real instrumentations write (tests/fixtures/otlp/: LlamaIndex, LangChain, OpenAI
GenAI spans), signals that need data those apps do not emit are unknown, and the judge scores
the traces from the context the spans carried."""

import duckdb
import pytest

from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.ingest import ingest_directory
from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals, signal_counts, signal_coverage
from rag_loop.store.tables import create_tables
from tests.helpers import PROJECT
from tests.helpers.fakes import HashingEmbedder

FIXTURES = PROJECT / "tests" / "fixtures" / "otlp" / "traces"


@pytest.fixture(scope="module")
def otlp(tmp_path_factory):
    con = duckdb.connect(str(tmp_path_factory.mktemp("otlp") / "t.duckdb"))
    create_tables(con)
    ingest_directory(con, FIXTURES)
    compute_signals(con, SignalSettings())
    yield con
    con.close()


def test_no_citation_is_unknown_not_true_when_the_instrumentation_carries_no_citations(otlp):
    traces = otlp.execute("SELECT count(*) FROM raw_traces").fetchall()[0][0]
    counts, coverage = signal_counts(otlp), signal_coverage(otlp)
    assert traces == 132 and counts["no_citation"] == 0 and coverage["no_citation"] == 0
    assert counts["error"] == 3 and counts["any_signal"] == 3  # the failed requests, nothing else
    assert coverage["thumbs_down"] == traces and coverage["latency_over_budget"] == traces
    select_candidates(otlp, SamplingPolicy())
    streams = otlp.execute("SELECT count(*) FILTER (by_bad_signal), count(*) FILTER (NOT by_bad_signal) "
                           "FROM failure_candidates").fetchall()[0]
    assert streams[0] == 3  # the budget is not spent on noise


def test_the_judge_scores_real_spans_from_the_context_they_carried(otlp):
    select_candidates(otlp, SamplingPolicy(random_rate=1.0, daily_budget_usd=None))
    metrics = [OnlineMetric("Faithfulness", 0.75), OnlineMetric("Contextual Relevancy", 0.5)]
    report = judge_traces(otlp, OfflineJudge(HashingEmbedder()), JudgingSettings(metrics))
    status = dict(otlp.execute("SELECT status, count(*) FROM trace_judgments WHERE metric = 'Faithfulness' "
                               "GROUP BY 1").fetchall())
    assert report.errored == 0 and status == {"judged": 128, "unjudgeable": 4}
    reasons = dict(otlp.execute("SELECT reason, count(*) FROM trace_judgments WHERE status = 'unjudgeable' "
                                "AND metric = 'Faithfulness' GROUP BY 1").fetchall())
    # the 3 failed requests have no answer; LlamaIndex's postprocessor dropped every chunk of
    # one request ("Empty Response"): nothing reached the LLM, so there is nothing to be faithful to
    assert reasons == {"unjudgeable: no answer": 3, "unjudgeable: no context": 1}
