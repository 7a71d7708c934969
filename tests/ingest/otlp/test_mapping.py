import json

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rag_loop.demo.otlp_export import to_otlp_line
from rag_loop.ingest import ingest_directory

NATIVE = {
    "trace_id": "tr-1", "request_id": "req-1", "session_id": "s-1", "turn_id": 2,
    "timestamp": "2026-11-11T10:00:00.000Z", "environment": "production",
    "rag_version": "rag-v12", "prompt_version": "qa-v3", "model_name": "m-1", "response_model": "m-1",
    "provider": "in-house", "embedding_model": "e", "reranker_model": "r", "index_version": "kb-1",
    "chunking_version": "chunk-v1", "retrieval_config_version": "ret-v3",
    "original_query": "password rotation?", "rewritten_query": None, "filters": None,
    "chunks": [
        {"doc_id": "password-policy", "chunk_id": "pw@2024#rotation-en", "doc_version": "2024",
         "score": 0.88, "rank": 1, "rerank_score": 0.6, "rerank_rank": 1, "selected": True},
        {"doc_id": "password-policy", "chunk_id": "pw@2026#rotation-en", "doc_version": "2026",
         "score": 0.85, "rank": 2, "rerank_score": 0.5, "rerank_rank": 2, "selected": False}],
    "answer": "180 days [pw@2024#rotation-en]", "citations": ["pw@2024#rotation-en"],
    "temperature": 0.0, "input_tokens": 200, "output_tokens": 10, "finish_reason": "stop",
    "status": "ok", "error": None, "is_fallback": False, "latency_ms": 900.0, "cost_usd": 0.001,
    "spans": [{"name": "retrieval", "kind": "retrieval", "start_time": "2026-11-11T10:00:00.000Z",
               "duration_ms": 100.0, "status": "ok"},
              {"name": "rerank", "kind": "rerank", "start_time": "2026-11-11T10:00:00.100Z",
               "duration_ms": 50.0, "status": "ok"},
              {"name": "generation", "kind": "generation", "start_time": "2026-11-11T10:00:00.150Z",
               "duration_ms": 700.0, "status": "ok"}],
    "feedback": {"rating": "negative", "category": "outdated_source", "comment": None},
    "language": "en", "tenant": "initech", "query_type": "security", "risk_level": "high",
}


@pytest.mark.parametrize("convention", ["genai", "openinference"])
def test_demo_export_round_trips_through_the_otlp_parser(con, tmp_path, convention):
    (tmp_path / "t.otlp.jsonl").write_text(to_otlp_line(NATIVE, convention) + "\n")
    report = ingest_directory(con, tmp_path)
    assert report.by_format()["otlp"].ingested == 1
    row = con.execute("""SELECT session_id, turn_id, prompt_version, index_version, original_query,
                         answer, model_name, input_tokens, tenant, risk_level, latency_ms
                         FROM raw_traces""").fetchall()[0]
    assert row == ("s-1", 2, "qa-v3", "kb-1", "password rotation?", NATIVE["answer"], "m-1", 200,
                   "initech", "high", 900.0)
    chunks = con.execute("""SELECT chunk_id, doc_id, doc_version, score, rank, rerank_score,
                            rerank_rank, selected FROM trace_chunks ORDER BY rank""").fetchall()
    assert chunks == [("pw@2024#rotation-en", "password-policy", "2024", 0.88, 1, 0.6, 1, True),
                      ("pw@2026#rotation-en", "password-policy", "2026", 0.85, 2, 0.5, 2, False)]
    assert con.execute("SELECT rating, category FROM trace_feedback").fetchall() == [
        ("negative", "outdated_source")]
    assert con.execute("SELECT count(*) FROM trace_spans").fetchall() == [(4,)]


def test_spans_from_the_real_opentelemetry_sdk(con, tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"deployment.environment.name": "staging"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("rag-app")
    with tracer.start_as_current_span("rag_request") as root:
        root.set_attribute("rag.tenant", "acme")
        root.set_attribute("rag.prompt_version", "qa-v3")
        root.set_attribute("rag.feedback.rating", "negative")
        with tracer.start_as_current_span("retrieval") as span:
            span.set_attribute("gen_ai.operation.name", "retrieval")
            span.set_attribute("gen_ai.retrieval.query.text", "What does ERR-PAY-942 mean?")
            span.set_attribute("gen_ai.retrieval.documents", json.dumps([
                {"id": "payment-errors@2026.10#err942-en", "score": 0.91,
                 "doc_id": "payment-errors", "doc_version": "2026.10"}]))
        with tracer.start_as_current_span("chat m-1") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", "m-1")
            span.set_attribute("gen_ai.response.model", "m-1-2026")
            span.set_attribute("gen_ai.usage.input_tokens", 321)
            span.set_attribute("gen_ai.usage.output_tokens", 12)
            span.set_attribute("gen_ai.conversation.id", "conv-9")
            span.set_attribute("gen_ai.response.finish_reasons", ["stop"])
            span.set_attribute("gen_ai.output.messages", json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "The issuer declined."}]}]))
    provider.shutdown()
    payload = MessageToJson(encode_spans(exporter.get_finished_spans()), indent=None)
    (tmp_path / "sdk.jsonl").write_text(payload + "\n")
    report = ingest_directory(con, tmp_path)
    assert report.by_format()["otlp"].ingested == 1
    row = con.execute("""SELECT trace_id, original_query, model_name, response_model, input_tokens,
                         output_tokens, conversation_id, session_id, answer, finish_reason, tenant,
                         prompt_version, environment FROM raw_traces""").fetchall()[0]
    sdk_trace_id = format(exporter.get_finished_spans()[0].context.trace_id, "032x")
    assert row == (sdk_trace_id, "What does ERR-PAY-942 mean?", "m-1", "m-1-2026", 321, 12,
                   "conv-9", "conv-9", "The issuer declined.", "stop", "acme", "qa-v3", "staging")
    assert con.execute("SELECT doc_id, chunk_id, score FROM trace_chunks").fetchall() == [
        ("payment-errors", "payment-errors@2026.10#err942-en", 0.91)]
