"""Unreadable retrieval output is "retrieval unknown", never an empty retrieval (issue 23 §5)."""

import json
import tempfile
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory
from rag_loop.selection.signals import SIGNALS, SignalSettings, compute_signals
from tests.helpers import trace_line
from tests.helpers.otlp import AFTER, line, span, trace_hex, write

DOCUMENTS = json.dumps([{"id": f"leave@2026#c{i}", "score": 0.8, "content": "Fifteen days.",
                         "metadata": {"doc_id": "leave", "doc_version": "2026"}} for i in range(3)])


def genai_request(trace: int, documents: str, finish_reasons: dict | None = None,
                  parts=None) -> list[dict]:
    """A GenAI request (workflow, retrieval, chat) whose documents attribute is `documents`."""
    parts = [{"type": "text", "content": f"answer {trace}"}] if parts is None else parts
    chat = span(trace, 3, 1, "chat m", {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}])}, 100, 800)
    if finish_reasons is not None:
        chat["attributes"].append({"key": "gen_ai.response.finish_reasons", "value": finish_reasons})
    return [
        span(trace, 1, None, "invoke_workflow rag", {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "How many leave days?"}]}])},
             0, 900),
        span(trace, 2, 1, "retrieval kb", {"gen_ai.operation.name": "retrieval",
                                           "gen_ai.retrieval.query.text": "How many leave days?",
                                           "gen_ai.retrieval.documents": documents}, 10, 100),
        chat,
    ]


def _signals(con, directory: Path, *traces: list[dict]) -> dict[str, tuple]:
    write(directory / "t.jsonl", [line(spans) for spans in traces])
    ingest_directory(con, directory, now=AFTER)
    compute_signals(con, SignalSettings())
    return {row[0]: row[1:] for row in con.execute(
        "SELECT trace_id, empty_retrieval, retrieval_unknown, signals FROM trace_signals").fetchall()}


@pytest.mark.parametrize("documents", [
    DOCUMENTS[:25],  # cut off by an attribute length limit, no whole document
    json.dumps({"documents": json.loads(DOCUMENTS)}),  # a dict, not a list
    "not json at all",
    '["leave@2026#c0"]',  # items that are not objects
])
def test_unreadable_documents_are_retrieval_unknown_not_empty_retrieval(con, tmp_path, documents):
    flags = _signals(con, tmp_path, genai_request(1, documents))
    empty, unknown, signals = flags[trace_hex(1)]
    assert (empty, unknown) == (False, True)
    assert "empty_retrieval" not in signals and "retrieval_unknown" not in signals


def test_a_cut_off_list_keeps_its_whole_documents_and_stays_unknown(con, tmp_path):
    cut = DOCUMENTS[:DOCUMENTS.index('}}, {"id"') + 2] + ', {"id": "leave@20'
    flags = _signals(con, tmp_path, genai_request(1, cut))
    assert flags[trace_hex(1)][:2] == (False, True)
    assert con.execute("SELECT chunk_id FROM trace_chunks").fetchall() == [("leave@2026#c0",)]


def test_a_readable_empty_list_is_still_an_empty_retrieval(con, tmp_path):
    flags = _signals(con, tmp_path, genai_request(1, "[]"), genai_request(2, DOCUMENTS))
    assert flags[trace_hex(1)][:2] == (True, False) and "empty_retrieval" in flags[trace_hex(1)][2]
    assert flags[trace_hex(2)][:2] == (False, False)


def test_string_finish_reasons_and_parts_are_kept(con, tmp_path):
    _signals(con, tmp_path, genai_request(1, DOCUMENTS, finish_reasons={"stringValue": "length"},
                                          parts="Fifteen days [leave@2026#c0]."))
    assert con.execute("SELECT finish_reason, answer FROM raw_traces").fetchall() == [
        ("length", "Fifteen days [leave@2026#c0].")]
    # the answer was read, and it names a retrieved chunk: no false no_citation either
    assert con.execute("SELECT signals FROM trace_signals").fetchall() == [([],)]


def test_retrieval_unknown_is_a_column_not_a_sampling_signal():
    assert "retrieval_unknown" not in SIGNALS and "empty_retrieval" in SIGNALS


def test_native_traces_carry_the_field_or_leave_it_out(con, tmp_path):
    (tmp_path / "t.jsonl").write_text("\n".join([
        trace_line("plain"), trace_line("unknown", retrieval_unreadable="retriever: timed out reading"),
        trace_line("bad", retrieval_unreadable=["not", "a", "string"])]) + "\n")
    report = ingest_directory(con, tmp_path)
    assert report.total().ingested == 2 and report.total().quarantined == 1
    assert con.execute("SELECT reason FROM quarantine").fetchall() == [("wrong_type: retrieval_unreadable",)]
    compute_signals(con, SignalSettings())
    assert con.execute("SELECT trace_id, empty_retrieval, retrieval_unknown FROM trace_signals "
                       "ORDER BY trace_id").fetchall() == [("plain", True, False), ("unknown", False, True)]


def _readable(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


documents_text = st.one_of(
    st.text(),
    st.text(alphabet='[]{}",: 0123456789abnlu\\', max_size=30),  # JSON-ish punctuation
    st.integers(0, len(DOCUMENTS)).map(lambda n: DOCUMENTS[:n]),  # cut off anywhere
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                 | st.text(max_size=10),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                             max_size=3),
                 max_leaves=6).map(json.dumps),
)


# One ingest of a handful of traces costs what one trace costs (the DuckDB file, the tables):
# each example ingests a list of texts, about as many texts in all as 60 one-text examples did,
# and also shows that one trace's documents never change another's flags.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(documents_text, min_size=1, max_size=8))
@example(["[]", DOCUMENTS, DOCUMENTS[:25], "not json at all", '["leave@2026#c0"]', "", "null", "[{}]"])
def test_arbitrary_documents_text_is_empty_retrieval_only_when_a_readable_empty_list(texts):
    with tempfile.TemporaryDirectory() as directory, duckdb.connect() as con:
        flags = _signals(con, Path(directory), *(genai_request(n, text) for n, text in enumerate(texts, 1)))
        assert con.execute("SELECT state FROM otlp_traces").fetchall() == [("ingested",)] * len(texts)
        chunks = dict(con.execute("SELECT trace_id, count(*) FROM trace_chunks GROUP BY trace_id").fetchall())
        for n, text in enumerate(texts, 1):
            parsed = _readable(text)
            empty, unknown, _ = flags[trace_hex(n)]
            assert empty == (parsed == [])
            readable = isinstance(parsed, list) and all(isinstance(d, dict) for d in parsed)
            assert unknown == (not readable)
            if readable:
                assert chunks.get(trace_hex(n), 0) == len(parsed)
