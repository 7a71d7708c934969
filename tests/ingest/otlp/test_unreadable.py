"""Unreadable GenAI attributes (issue 23 §5): documents that are not a JSON list, or JSON cut off
by an SDK's attribute length limit, are "retrieval unknown", never "nothing retrieved"; a string
`finish_reasons` and string message `parts` are read, not dropped."""

import json

import duckdb
import pytest

from rag_loop.ingest import ingest_directory
from tests.helpers.otlp import AFTER, line, span, trace_hex, write

QUERY = "How many leave days do contractors get?"
DOCUMENTS = json.dumps([{"id": f"leave@2026#c{i}", "score": 0.9 - i / 10, "content": "x" * 40,
                         "metadata": {"doc_id": "leave", "doc_version": "2026"}} for i in range(4)])


def _messages(role: str, parts) -> str:
    return json.dumps([{"role": role, "parts": parts}])


def genai_spans(trace: int, documents=DOCUMENTS, query: str = QUERY) -> list[dict]:
    """A GenAI request: workflow root, retrieval with `documents` (a string attribute, or an
    OTLP AnyValue dict when given one), chat."""
    retrieval = span(trace, 2, 1, "retrieval kb", {"gen_ai.operation.name": "retrieval",
                                                    "gen_ai.retrieval.query.text": query}, 10, 100)
    retrieval["attributes"].append({"key": "gen_ai.retrieval.documents",
                                    "value": documents if isinstance(documents, dict)
                                    else {"stringValue": documents}})
    return [
        span(trace, 1, None, "invoke_workflow rag", {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.input.messages": _messages("user", [{"type": "text", "content": query}])}, 0, 900),
        retrieval,
        span(trace, 3, 1, "chat m", {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.output.messages": _messages("assistant", [{"type": "text", "content": f"answer {trace}"}])},
             100, 800),
    ]


def _ingest(con, tmp_path, *traces: list[dict]):
    write(tmp_path / "t.jsonl", [line(spans) for spans in traces])
    return ingest_directory(con, tmp_path, now=AFTER)


@pytest.fixture
def con():
    """An in-memory database: the test queries what was ingested, and needs it nowhere else."""
    with duckdb.connect() as connection:
        yield connection


def _stored(con, trace: int) -> tuple:
    return con.execute("""SELECT t.retrieval_unreadable, count(c.trace_id) FROM raw_traces t
                          LEFT JOIN trace_chunks c USING (trace_id) WHERE trace_id = ?
                          GROUP BY ALL""", [trace_hex(trace)]).fetchall()[0]


UNREADABLE = [
    (DOCUMENTS[:30], 0, "JSON cut off at 30 chars"),
    (DOCUMENTS[:-1], 4, "JSON cut off"),  # only the closing bracket lost: every document kept
    (DOCUMENTS[:DOCUMENTS.index("}}, {", DOCUMENTS.index("}}, {") + 1) + 2] + ", {\"id", 2,
     "2 whole documents read"),
    (json.dumps({"documents": json.loads(DOCUMENTS)}), 0, "an object, not a list"),
    ("leave@2026#c0, leave@2026#c1", 0, "not JSON"),
    ('"just a string"', 0, "str, not a list"),
    ("null", 0, "null, not a list"),
    ('[1, "a", null]', 0, "3 of 3 items are not objects"),
    ({"kvlistValue": {"values": [{"key": "id", "value": {"stringValue": "leave@2026#c0"}}]}}, 0,
     "an object, not a list"),
    ({"intValue": "3"}, 0, "int, not a list"),
]
READABLE = [
    ("[]", 0), (" [ ]\n", 0), (DOCUMENTS, 4),
    # OTLP arrays: of objects, and of JSON-encoded objects
    ({"arrayValue": {"values": [{"kvlistValue": {"values": [
        {"key": "id", "value": {"stringValue": "leave@2026#c0"}}]}}]}}, 1),
    ({"arrayValue": {"values": [{"stringValue": json.dumps({"id": "leave@2026#c0"})}]}}, 1),
]



FINISH_REASONS = [
    ({"stringValue": "length"}, "length"),  # a plain string: one finish reason
    ({"stringValue": '["content_filter"]'}, "content_filter"),  # a JSON-encoded array
    ({"arrayValue": {"values": [{"stringValue": "stop"}]}}, "stop"),  # as the SDK writes it
]
PARTS = [
    "The answer is 15 days.",  # the text itself
    json.dumps([{"type": "text", "content": "The answer is 15 days."}]),  # a JSON-encoded list
]
# the trace number of each case: a file and a trace of its own in the shared run
RERANK, USERS_QUERY, CONTENT_NO_PARTS = 401, 402, 403


def _chat(trace: int, finish_reasons: dict | None = None, parts=None) -> list[dict]:
    spans = genai_spans(trace)
    if parts is not None:
        spans[2] = span(trace, 3, 1, "chat m", {"gen_ai.operation.name": "chat",
                                                "gen_ai.output.messages": _messages("assistant", parts)},
                        100, 800)
    if finish_reasons is not None:
        spans[2]["attributes"].append({"key": "gen_ai.response.finish_reasons", "value": finish_reasons})
    return spans


def _rerank_spans(trace: int) -> list[dict]:
    """A request whose reranker output is JSON cut off."""
    spans = genai_spans(trace)
    spans.append(span(trace, 4, 1, "rerank", {"gen_ai.operation.name": "rerank",
                                              "gen_ai.retrieval.documents": DOCUMENTS[:50]}, 100, 120))
    return spans


def _users_query_spans(trace: int) -> list[dict]:
    """A request whose user message's parts are a string, and whose retrieval query differs."""
    spans = genai_spans(trace, query="leave days for contractors (condensed)")
    spans[0] = span(trace, 1, None, "invoke_workflow rag", {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": "and for contractors?"}])}, 0, 900)
    return spans


def _content_no_parts_spans(trace: int) -> list[dict]:
    """A request whose answer message has content and no parts."""
    spans = genai_spans(trace)
    spans[2] = span(trace, 3, 1, "chat m", {"gen_ai.operation.name": "chat", "gen_ai.output.messages":
                                            json.dumps([{"role": "assistant", "content": "Fifteen."}])}, 100, 800)
    return spans


def _cases() -> dict[int, list[dict]]:
    """Every case's spans by its trace number: unreadable documents 1.., readable 101..,
    finish reasons 201.., message parts 301.., then the single cases."""
    cases = {n + 1: genai_spans(n + 1, documents) for n, (documents, _, _) in enumerate(UNREADABLE)}
    cases |= {101 + n: genai_spans(101 + n, documents) for n, (documents, _) in enumerate(READABLE)}
    cases |= {201 + n: _chat(201 + n, finish_reasons=value) for n, (value, _) in enumerate(FINISH_REASONS)}
    cases |= {301 + n: _chat(301 + n, parts=parts) for n, parts in enumerate(PARTS)}
    return cases | {RERANK: _rerank_spans(RERANK), USERS_QUERY: _users_query_spans(USERS_QUERY),
                    CONTENT_NO_PARTS: _content_no_parts_spans(CONTENT_NO_PARTS)}


UNKNOWN = len(UNREADABLE) + 1  # the traces whose retrieval is unknown: the rerank case's too


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Every case in a file of its own (each file is read on its own; every trace id differs),
    ingested in one run into an in-memory database: the report and the connection."""
    directory = tmp_path_factory.mktemp("traces")
    for trace, spans in _cases().items():
        write(directory / f"t{trace}.jsonl", [line(spans)])
    with duckdb.connect() as connection:
        yield ingest_directory(connection, directory, now=AFTER), connection


def _row(con, sql: str, trace: int) -> list[tuple]:
    return con.execute(sql, [trace_hex(trace)]).fetchall()


@pytest.mark.parametrize("documents, chunks, why", UNREADABLE)
def test_unreadable_documents_mark_the_trace_retrieval_unknown(run, documents, chunks, why):
    report, con = run
    trace = UNREADABLE.index((documents, chunks, why)) + 1
    assert report.assembly.ingested == len(_cases()) and report.assembly.retrieval_unknown == UNKNOWN
    unreadable, stored = _stored(con, trace)
    assert stored == chunks
    assert unreadable.startswith("retrieval kb: gen_ai.retrieval.documents: ") and why in unreadable
    assert _row(con, "SELECT state, reason FROM otlp_traces WHERE trace_id = ?", trace) == [
        ("ingested", f"retrieval_unknown: {unreadable}")]
    # the answer and the query are still there: only the retrieval is unknown
    assert _row(con, "SELECT original_query, answer FROM raw_traces WHERE trace_id = ?", trace) == [
        (QUERY, f"answer {trace}")]


@pytest.mark.parametrize("documents, chunks", READABLE)
def test_readable_documents_are_not_unknown(run, documents, chunks):
    report, con = run
    trace = 101 + READABLE.index((documents, chunks))
    assert report.assembly.ingested == len(_cases()) and report.assembly.retrieval_unknown == UNKNOWN
    assert _stored(con, trace) == (None, chunks)
    assert _row(con, "SELECT reason FROM otlp_traces WHERE trace_id = ?", trace) == [(None,)]


def test_an_unreadable_reranker_output_leaves_the_selection_unknown(run):
    _, con = run
    assert _row(con, "SELECT count(*), count(selected) FROM trace_chunks WHERE trace_id = ?", RERANK) == [(4, 0)]
    assert "rerank: gen_ai.retrieval.documents: JSON cut off" in _stored(con, RERANK)[0]


def test_one_unreadable_trace_in_a_run_is_counted_and_every_span_accounted_for(con, tmp_path):
    report = _ingest(con, tmp_path, genai_spans(1), genai_spans(2, DOCUMENTS[:100]), genai_spans(3, "[]"))
    assert report.assembly.ingested == 3 and report.assembly.retrieval_unknown == 1
    assert report.spans().ingested == 9 and report.spans().quarantined == report.spans().duplicates == 0
    assert con.execute("SELECT trace_id FROM otlp_traces WHERE reason LIKE 'retrieval_unknown:%'"
                       ).fetchall() == [(trace_hex(2),)]
    assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]


@pytest.mark.parametrize("value, expected", FINISH_REASONS)
def test_a_string_finish_reasons_is_one_finish_reason(run, value, expected):
    _, con = run
    trace = 201 + FINISH_REASONS.index((value, expected))
    assert _row(con, "SELECT finish_reason, answer FROM raw_traces WHERE trace_id = ?", trace) == [
        (expected, f"answer {trace}")]


@pytest.mark.parametrize("parts", PARTS)
def test_string_message_parts_keep_the_answer(run, parts):
    _, con = run
    trace = 301 + PARTS.index(parts)
    assert _row(con, "SELECT answer FROM raw_traces WHERE trace_id = ?", trace) == [("The answer is 15 days.",)]


def test_string_message_parts_keep_the_users_query(run):
    _, con = run
    assert _row(con, "SELECT original_query, rewritten_query FROM raw_traces WHERE trace_id = ?", USERS_QUERY) == [
        ("and for contractors?", "leave days for contractors (condensed)")]


def test_a_message_with_content_and_no_parts_keeps_the_answer(run):
    _, con = run
    assert _row(con, "SELECT answer FROM raw_traces WHERE trace_id = ?", CONTENT_NO_PARTS) == [("Fifteen.",)]
