"""The regression eval's `http` rag_app: a user's RAG service over HTTP, on a loopback stand-in."""

import pytest

from rag_loop.evaluation.http_app import HttpFields, HttpRagApp, RagAppError
from rag_loop.evaluation.runner import build_cases
from rag_loop_dagster.assets.resources import HttpRagAppResource
from tests.helpers.standin_rag import RagService


@pytest.fixture
def service():
    running = RagService()
    yield running
    running.close()


def test_answer_context_latency_and_the_request_sent(service, monkeypatch):
    monkeypatch.setenv("MY_RAG_TOKEN", "Bearer s3cret")
    app = HttpRagAppResource(url=service.url + "/ok", config={"variant": "b"},
                             headers_env={"Authorization": "MY_RAG_TOKEN"}).app()
    reply = app("leave days?", attributes={"language": "en"}, variant="b")
    assert reply["answer"] == "echo leave days?"
    assert [c["text"] for c in reply["retrieval_context"]] == ["plain text", "object"]
    assert reply["latency_ms"] > 0
    assert service.requests == [{"path": "/ok", "auth": "Bearer s3cret", "body": {
        "variant": "b", "query": "leave days?", "attributes": {"language": "en"}}}]


def test_field_mapping_reads_nested_replies(service):
    app = HttpRagApp(service.url + "/nested", fields=HttpFields(
        query="q", attributes=None, answer="data.output.text", retrieval_context="data.sources",
        context_text="content"))
    reply = app("hi")
    assert reply.pop("latency_ms") > 0
    assert reply == {"answer": "nested", "retrieval_context": [{"chunk_id": None, "text": "s"}]}
    assert service.requests == [{"path": "/nested", "auth": None, "body": {"q": "hi"}}]


@pytest.mark.parametrize("path, message", [
    ("/error", "HTTP 500"), ("/slow", "no reply"), ("/text", "not JSON"), ("/empty", "no string")])
def test_a_bad_reply_errors_the_case_and_never_passes_it(service, path, message):
    # /slow holds its reply 2 s: a short timeout there is met twice; the others answer at once
    app = HttpRagApp(service.url + path, timeout_seconds=0.2 if path == "/slow" else 5.0)
    with pytest.raises(RagAppError, match=message):
        app("q")
    golden = {"input": "q", "expected_output": "a", "additional_metadata": {"language": "en"}}
    [case] = build_cases([golden], "live", app, {}, None)
    assert case.app_error.startswith("rag_app: RagAppError") and case.test_case.actual_output == ""


def test_a_missing_header_variable_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    with pytest.raises(ValueError, match="NOT_SET_ANYWHERE"):
        HttpRagAppResource(url="http://127.0.0.1:9/x", headers_env={"X-Key": "NOT_SET_ANYWHERE"}).app()
