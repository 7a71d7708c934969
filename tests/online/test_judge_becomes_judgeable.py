"""A trace × metric left unjudgeable for want of an input is judged once the input appears (a
knowledge base that resolves id-only chunks, a late span with the answer); until then a run
leaves it as it is and counts it apart."""

import json
import shutil

import duckdb
import pyarrow.parquet as pq
import pytest

from rag_loop.curation.exports import export_knowledge
from rag_loop.curation.label_rules import KnownSources, check_source
from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.ingest import ingest_directory
from rag_loop.ingest.documents import load_knowledge_base
from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import create_tables
from rag_loop.store.traces import trace_details
from tests.helpers import PROJECT
from tests.helpers.fakes import HashingEmbedder
from tests.online.world import ScriptedJudge, build_world

OTLP = PROJECT / "tests" / "fixtures" / "otlp"
METRICS = [OnlineMetric("Faithfulness", 0.75), OnlineMetric("Answer Relevancy", 0.7),
           OnlineMetric("Contextual Relevancy", 0.5)]
ID_ONLY = {"doc_id": "leave", "chunk_id": "leave", "score": 0.8, "rank": 1}  # OTel GenAI `[{id, score}]`
KB = [{"doc_id": "leave", "version": "2025", "title": "Leave", "source_updated_at": "2025-01-01T00:00:00Z",
       "chunks": [{"chunk_id": "leave@2025#1", "text": "Employees get 12 days."}]},
      {"doc_id": "leave", "version": "2026", "title": "Leave", "source_updated_at": "2026-01-01T00:00:00Z",
       "chunks": [{"chunk_id": "leave@2026#10", "text": "Carry over 5 days."},
                  {"chunk_id": "leave@2026#2", "text": "Employees get 15 days."}]}]


def _rows(con) -> dict[tuple[str, str], tuple]:
    return {(t, m): tuple(rest) for t, m, *rest in con.execute(
        "SELECT trace_id, metric, status, reason, run_id, judged_at FROM trace_judgments").fetchall()}


def _load_kb(con, tmp_path) -> None:
    (tmp_path / "kb").mkdir()
    (tmp_path / "kb" / "documents.jsonl").write_text("\n".join(json.dumps(d) for d in KB) + "\n")
    load_knowledge_base(con, tmp_path / "kb")


def test_id_only_traces_are_judged_once_the_kb_resolves_their_documents_and_left_alone_until_then(tmp_path):
    traces = [{"trace_id": "newest", "answer": "15 days.", "chunks": [ID_ONLY]},
              {"trace_id": "v2025", "answer": "12 days.", "chunks": [{**ID_ONLY, "doc_version": "2025"}]},
              {"trace_id": "v2019", "answer": "10 days.", "chunks": [{**ID_ONLY, "doc_version": "2019"}]}]
    con = build_world(tmp_path, traces, knowledge=False)
    contexts: dict[str, list] = {}

    def verdict(name, case):
        if case.retrieval_context:
            contexts[case.actual_output] = case.retrieval_context
        return 0.9
    judge = ScriptedJudge(verdict)
    first = judge_traces(con, judge, JudgingSettings(METRICS))
    assert (first.planned, first.judged, first.unjudgeable) == (9, 3, 6)
    before = _rows(con)
    again = judge_traces(con, judge, JudgingSettings(METRICS))
    assert (again.planned, again.still_unjudgeable, again.newly_judgeable) == (0, 6, 0)
    assert _rows(con) == before  # not rewritten
    _load_kb(con, tmp_path)
    after = judge_traces(con, judge, JudgingSettings(METRICS))
    assert (after.planned, after.judged, after.unjudgeable, after.newly_judgeable, after.still_unjudgeable) == (
        4, 4, 0, 4, 2)
    assert contexts["15 days."] == ["Employees get 15 days.\n\nCarry over 5 days."]  # newest, in chunk order
    assert contexts["12 days."] == ["Employees get 12 days."]  # the version the trace named
    assert "10 days." not in contexts  # a version the KB does not have: no text
    status = {key: row[0] for key, row in _rows(con).items()}
    assert status[("v2019", "Faithfulness")] == "unjudgeable" and status[("newest", "Faithfulness")] == "judged"
    assert _rows(con)[("v2019", "Faithfulness")] == before[("v2019", "Faithfulness")]
    run = con.execute("SELECT planned, judged, unjudgeable, errored, unfinished, newly_judgeable, still_unjudgeable "
                      "FROM judgment_runs WHERE run_id = ?", [after.run_id]).fetchall()
    assert run == [(4, 4, 0, 0, 0, 4, 2)]


def test_a_late_answer_is_judged_and_a_row_missing_something_else_now_is_rewritten_with_that_reason(tmp_path):
    traces = [{"trace_id": "late", "answer": None, "status": "timeout",
               "chunks": [{**ID_ONLY, "chunk_id": "leave#1", "text": "Employees get 15 days."}]},
              {"trace_id": "bare", "answer": None, "status": "timeout", "chunks": []}]
    con = build_world(tmp_path, traces, knowledge=False)
    judge = ScriptedJudge(lambda name, case: 0.9)
    faithfulness = [OnlineMetric("Faithfulness", 0.75)]
    judge_traces(con, judge, JudgingSettings(faithfulness))
    assert {k[0]: v[1] for k, v in _rows(con).items()} == {"late": "unjudgeable: no answer",
                                                           "bare": "unjudgeable: no answer"}
    # the answer span arrives late: assembly writes the trace again, with its answer
    con.execute("UPDATE raw_traces SET answer = '15 days.', status = 'ok' WHERE trace_id IN ('late', 'bare')")
    run = judge_traces(con, judge, JudgingSettings(faithfulness))
    assert (run.planned, run.judged, run.unjudgeable, run.newly_judgeable, run.still_unjudgeable) == (2, 1, 1, 1, 0)
    status = {k[0]: v[:2] for k, v in _rows(con).items()}
    assert status["late"][0] == "judged" and status["bare"] == ("unjudgeable", "unjudgeable: no context")


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """The OTLP fixtures' traffic, with the canary deployment whose documents are ids only."""
    folder = tmp_path_factory.mktemp("traffic")
    shutil.copytree(OTLP / "traces", folder / "traces" / "traces")
    shutil.copytree(OTLP / "canary" / "genai-canary", folder / "traces" / "genai-canary")
    con = duckdb.connect(str(folder / "t.duckdb"))
    create_tables(con)
    ingest_directory(con, folder / "traces")
    compute_signals(con, SignalSettings())
    select_candidates(con, SamplingPolicy(random_rate=1.0, daily_budget_usd=None))
    yield con, folder
    con.close()


def _exported(con, folder) -> list[dict]:
    return pq.read_table(export_knowledge(con, folder)).to_pylist()


def _canary(con, status: str, reason: str | None = None) -> set[tuple[str, str]]:
    return set(con.execute("""SELECT j.trace_id, j.metric FROM trace_judgments j JOIN raw_traces t USING (trace_id)
                              WHERE t.source_file LIKE 'genai-canary/%' AND j.status = ?
                              AND (? IS NULL OR j.reason = ?)""", [status, reason, reason]).fetchall())


def test_id_only_canary_traffic_is_cited_from_traffic_without_a_kb_and_judged_once_the_kb_is_loaded(traffic):
    con, folder = traffic
    judge, settings = OfflineJudge(HashingEmbedder()), JudgingSettings(METRICS[::2])
    first = judge_traces(con, judge, settings)
    no_context = _canary(con, "unjudgeable", "unjudgeable: no context")
    requests = con.execute("SELECT count(*) FROM raw_traces WHERE source_file LIKE 'genai-canary/%' "
                           "AND trace_id IN (SELECT trace_id FROM failure_candidates)").fetchall()[0][0]
    assert first.errored == 0 and not _canary(con, "judged")  # ids only: nothing to judge against
    assert len(no_context) == 2 * requests - len(_canary(con, "unjudgeable", "unjudgeable: no answer"))

    exported = {(r["doc_id"], r["chunk_id"]): r["seen_in"] for r in _exported(con, folder)}
    retrieved = set(con.execute("SELECT DISTINCT doc_id, chunk_id FROM trace_chunks").fetchall())
    assert retrieved <= set(exported) and set(exported.values()) == {"traces"}
    known = KnownSources.load(con)
    details = trace_details(con, [t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()])
    cited = {c["source"] for d in details.values() for c in d["retrieved"] or []}
    assert cited and all(check_source(s, known)[0] is None for s in cited)
    assert all(check_source(chunk, known)[0] is None for _, chunk in retrieved)

    report = load_knowledge_base(con, OTLP / "kb")
    assert report.quarantined == 0
    unjudgeable_before = con.execute("SELECT count(*) FROM trace_judgments WHERE status = 'unjudgeable'").fetchall()
    after = judge_traces(con, judge, settings)
    assert after.newly_judgeable == len(no_context) == after.planned == after.judged
    assert _canary(con, "judged") == no_context
    assert after.still_unjudgeable == unjudgeable_before[0][0] - len(no_context)
    assert {r["seen_in"] for r in _exported(con, folder)} == {"knowledge_base"}  # the KB has every document
    known = KnownSources.load(con)
    details = trace_details(con, list(details))
    assert all(check_source(c["source"], known)[0] is None for d in details.values() for c in d["retrieved"] or [])
    last = judge_traces(con, judge, settings)
    assert (last.planned, last.still_unjudgeable) == (0, after.still_unjudgeable)

