"""What the Langfuse SDK (5.x) sends, captured from a small RAG app (tests/fixtures/langfuse/),
read by the OTLP ingestion: every request the app served, with its query, rewritten query,
answer, session, user, day, error, tokens and chunks in rank order as the app knew them."""

import json

import duckdb
import pytest

from rag_loop.ingest import ingest_directory
from rag_loop.ingest.otlp.langfuse import as_known_conventions
from tests.helpers import PROJECT

LANGFUSE = PROJECT / "tests" / "fixtures" / "langfuse"


def test_the_langfuse_sdks_spans_are_the_apps_requests():
    truth = {row["trace_id"]: row for row in map(json.loads, (LANGFUSE / "truth.jsonl").read_text().splitlines())}
    con = duckdb.connect()
    report = ingest_directory(con, LANGFUSE / "otlp")
    assert report.assembly.ingested == len(truth) == 37 and report.assembly.not_a_request == 0
    stored = con.execute("""SELECT trace_id, original_query, rewritten_query, answer, session_id, user_id,
                                   strftime("timestamp", '%Y-%m-%d') AS day, status, input_tokens
                            FROM raw_traces""").df().set_index("trace_id")
    assert set(stored.index) == set(truth)
    for trace_id, known in truth.items():
        row = stored.loc[trace_id]
        assert (row.original_query, row.session_id, row.user_id, row.day) == (
            known["original_query"], known["session_id"], known["user_id"], known["day"])
        assert (row.rewritten_query if isinstance(row.rewritten_query, str) else None) == known["rewritten_query"]
        assert (row.answer if isinstance(row.answer, str) else None) == known["answer"]
        assert (row.status if isinstance(row.status, str) else "ok") == known["status"]
        assert known["status"] == "error" or row.input_tokens > 0
        chunks = con.execute("SELECT chunk_id, text, score FROM trace_chunks WHERE trace_id = ? ORDER BY rank",
                             [trace_id]).fetchall()
        assert [(c, t) for c, t, _ in chunks] == [(r["id"], r["content"]) for r in known["retrieved"]]
        assert [s for *_, s in chunks] == pytest.approx([r["score"] for r in known["retrieved"]])


def test_only_langfuse_observations_are_read_anew_and_their_own_keys_win():
    plain = {"input.value": "q", "openinference.span.kind": "LLM", "langfuse.observation.type": "retriever"}
    assert as_known_conventions(plain) is plain  # OpenInference already: as it is
    assert as_known_conventions({"x": 1}) == {"x": 1}
    read = as_known_conventions({"langfuse.observation.type": "retriever", "input.value": "mine",
                                 "langfuse.observation.input": '{"query": "theirs"}',
                                 "langfuse.observation.output": '{"documents": [{"id": "d1"}]}'})
    assert read["input.value"] == "mine" and read["openinference.span.kind"] == "RETRIEVER"
    assert read["gen_ai.retrieval.documents"] == [{"id": "d1"}]
