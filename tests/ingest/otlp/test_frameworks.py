"""Ingestion of what real instrumentations write, compared field by field with the apps' truth.

The span files and `truth.jsonl` were produced by the real LlamaIndex, LangChain and OpenAI
instrumentations (tests/fixtures/otlp/generate.py; facts in EMITTED.md).
"""

import json

import pytest

from rag_loop.ingest import ingest_directory
from tests.helpers import PROJECT

FIXTURES = PROJECT / "tests" / "fixtures" / "otlp"
TRUTH = [json.loads(line) for line in (FIXTURES / "truth.jsonl").read_text().splitlines()]
FRAMEWORKS = ("llamaindex", "langchain", "genai")


@pytest.fixture(scope="module", params=FRAMEWORKS)
def ingested(request):
    import duckdb
    con = duckdb.connect()
    report = ingest_directory(con, FIXTURES / "traces" / request.param)
    yield request.param, con, report
    con.close()


def truth_of(framework: str, kind: str = "request") -> list[dict]:
    return [t for t in TRUTH if t["framework"] == framework and t["kind"] == kind]


def test_every_trace_is_stored_once_or_classified_and_nothing_is_quarantined(ingested):
    framework, con, report = ingested
    requests, others = truth_of(framework), truth_of(framework, "not_a_request")
    assert report.assembly.ingested == len(requests) and report.assembly.waiting == 0
    assert report.assembly.not_a_request == len(others)
    stored = {t for (t,) in con.execute("SELECT trace_id FROM raw_traces").fetchall()}
    assert stored == {t["trace_id"] for t in requests}
    assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]
    spans = sum(1 for _ in con.execute("SELECT 1 FROM otlp_spans").fetchall())
    assert report.spans().ingested == spans and report.spans().duplicates == 0


FIELDS = ("session_id", "original_query", "rewritten_query", "answer", "status", "model_name",
          "response_model", "input_tokens", "output_tokens", "final_input_tokens",
          "final_output_tokens", "llm_calls")


def test_trace_fields_match_what_the_app_saw(ingested):
    framework, con, _ = ingested
    rows = con.execute(f"SELECT trace_id, {', '.join(FIELDS)} FROM raw_traces").fetchall()
    stored = {row[0]: dict(zip(FIELDS, row[1:])) for row in rows}
    misses = []
    for truth in truth_of(framework):
        expected = {
            "session_id": truth["session_id"], "original_query": truth["original_query"],
            "rewritten_query": truth["rewritten_query"], "answer": truth["answer"],
            "status": "error" if truth["status"] == "error" else None,
            "model_name": truth["request_model"],
            # LlamaIndex never records the model that answered
            "response_model": None if framework == "llamaindex" else truth["response_model"],
            "input_tokens": truth["input_tokens"] or None, "output_tokens": truth["output_tokens"] or None,
            "final_input_tokens": truth["final_input_tokens"],
            "final_output_tokens": truth["final_output_tokens"], "llm_calls": truth["llm_calls"]}
        got = stored[truth["trace_id"]]
        misses += [(truth["trace_id"][:8], k, expected[k], got[k]) for k in FIELDS if got[k] != expected[k]]
    assert misses == []


def test_documents_retrieved_and_context_used_match(ingested):
    framework, con, _ = ingested
    chunks: dict[str, list] = {}
    for trace_id, doc_id, version, text, selected, source in con.execute(
            "SELECT trace_id, doc_id, doc_version, text, coalesce(selected, true), doc_id_from "
            "FROM trace_chunks WHERE rank IS NOT NULL ORDER BY trace_id, rank").fetchall():
        chunks.setdefault(trace_id, []).append((doc_id, version, text, selected, source))
    misses = []
    for truth in truth_of(framework):
        expected = [(d["doc_id"] or d["source"], d["doc_version"], d["text"]) for d in truth["retrieved"]]
        got = chunks.get(truth["trace_id"], [])
        if [g[:3] for g in got] != expected:
            misses.append((truth["trace_id"][:8], "retrieved", expected, got))
        selected = sorted(d["text"] for d in truth["selected"])
        # the apps' truth records no context for a turn whose answer call failed; the spans
        # still say what the reranker kept for it
        if truth["status"] == "ok" and sorted(g[2] for g in got if g[3]) != selected:
            misses.append((truth["trace_id"][:8], "selected", selected, got))
    assert misses == []
    assert {g[4] for rows in chunks.values() for g in rows} <= {"doc_id", "source", "file_path"}


def test_worker_processes_store_exactly_what_one_process_stores(monkeypatch):
    import duckdb

    import rag_loop.ingest.pipeline as pipeline
    monkeypatch.setattr(pipeline, "PARALLEL_FILE_BYTES", 0)  # every file, in small blocks
    monkeypatch.setattr(pipeline, "OTLP_BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(pipeline, "ASSEMBLY_BATCH_TRACES", 25)  # 132 traces: six batches (5 took twice as long)
    tables = {"raw_traces": "* EXCLUDE (ingested_at)", "trace_chunks": "*", "trace_spans": "*",
              "otlp_spans": "* EXCLUDE (received_at)", "otlp_traces": "* EXCLUDE (assembled_at)",
              "quarantine": "* EXCLUDE (quarantined_at)"}
    stored = []
    for workers in (1, 2):
        with duckdb.connect() as con:
            ingest_directory(con, FIXTURES / "traces", workers=workers)
            stored.append({t: sorted(map(str, con.execute(f"SELECT {columns} FROM {t}").fetchall()))
                           for t, columns in tables.items()})
    assert stored[0] == stored[1]
    assert len(stored[0]["raw_traces"]) == len(truth_of("llamaindex") + truth_of("langchain")
                                                + truth_of("genai"))


SERVICES = {"llamaindex": "helpdesk-rag-llamaindex", "langchain": "helpdesk-rag-langchain",
            "genai": "helpdesk-rag-openai"}


def test_every_trace_knows_the_service_that_emitted_it(ingested):
    framework, con, _ = ingested
    assert con.execute("SELECT DISTINCT service FROM raw_traces").fetchall() == [(SERVICES[framework],)]
