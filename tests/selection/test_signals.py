import duckdb
import pytest

from rag_loop.ingest import ingest_directory
from rag_loop.selection.signals import SIGNALS, SignalSettings, compute_signals
from tests.helpers import trace_line

CHUNK = {"doc_id": "faq", "chunk_id": "faq@1#a", "doc_version": "1", "score": 0.8, "rank": 1,
         "rerank_score": 0.7, "rerank_rank": 1, "selected": True}
GOOD = {"chunks": [CHUNK], "answer": "Fifteen days. [faq@1#a]", "citations": ["faq@1#a"],
        "status": "ok", "is_fallback": False, "latency_ms": 900.0}


DEFAULTS = SignalSettings()


def _signals(con, tmp_path, *lines, settings=DEFAULTS):
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    ingest_directory(con, tmp_path)
    compute_signals(con, settings)
    rows = con.execute(f"SELECT trace_id, {', '.join(SIGNALS)} FROM trace_signals").fetchall()
    return {row[0]: {s for s, on in zip(SIGNALS, row[1:]) if on} for row in rows}


def test_a_healthy_trace_raises_no_signal(con, tmp_path):
    assert _signals(con, tmp_path, trace_line("ok", **GOOD)) == {"ok": set()}


CRAFTED = [
    ({"feedback": {"rating": "negative", "category": "incorrect"}}, {"thumbs_down"}),
    ({"feedback": {"rating": "positive"}}, set()),
    ({"feedback": None}, set()),
    ({"chunks": [], "citations": [], "is_fallback": True, "answer": "I don't know."},
     {"empty_retrieval", "fallback"}),
    ({"chunks": [{**CHUNK, "rerank_score": 0.1}]}, {"low_rerank_score"}),
    ({"chunks": [{**CHUNK, "rerank_score": None}]}, set()),  # no reranker: not low
    ({"citations": []}, set()),  # the answer names the chunk id in its text
    ({"citations": [], "answer": "Fifteen days."}, {"no_citation"}),
    ({"citations": None, "answer": "Fifteen days."}, set()),  # no citation list: unknown, not missing
    ({"citations": [], "answer": "Sorry.", "is_fallback": True}, {"fallback"}),
    ({"status": "timeout", "error": "deadline", "citations": [], "answer": None}, {"timeout"}),
    ({"status": "error", "error": "boom", "citations": [], "answer": None}, {"error"}),
    ({"latency_ms": 9000.0}, {"latency_over_budget"}),
]


@pytest.fixture(scope="module")
def crafted_signals(tmp_path_factory):
    """The signals of every crafted trace, ingested and computed together once: each signal's
    threshold is fixed and no trace has a session, so a trace's signals are its own."""
    with duckdb.connect() as con:
        return _signals(con, tmp_path_factory.mktemp("crafted"),
                        *(trace_line(f"t{i}", **{**GOOD, **fields}) for i, (fields, _) in enumerate(CRAFTED)))


@pytest.mark.parametrize("fields, expected", CRAFTED)
def test_each_signal_on_a_crafted_trace(crafted_signals, fields, expected):
    assert len(crafted_signals) == len(CRAFTED)
    assert crafted_signals[f"t{CRAFTED.index((fields, expected))}"] == expected


def test_the_feedback_category_is_kept(con, tmp_path):
    _signals(con, tmp_path, trace_line("t", feedback={"rating": "negative", "category": "too_slow"}))
    assert con.execute("SELECT feedback_category FROM trace_signals").fetchall() == [("too_slow",)]


def _turn(trace_id, turn, seconds, query):
    return trace_line(trace_id, session_id="s", turn_id=turn, original_query=query,
                      timestamp=f"2026-11-01T08:{seconds // 60:02d}:{seconds % 60:02d}Z", **GOOD)


def test_immediate_rephrase_flags_the_rephrased_turn_not_the_last_one(con, tmp_path):
    flagged = _signals(con, tmp_path,
                       _turn("t1", 1, 0, "how many leave days do I get?"),
                       _turn("t2", 2, 20, "how many days of leave do I get per year"),
                       _turn("t3", 3, 50, "and what about parental leave?"))
    assert flagged == {"t1": {"immediate_rephrase"}, "t2": set(), "t3": set()}


def test_a_similar_next_turn_outside_the_window_is_not_a_rephrase(con, tmp_path):
    flagged = _signals(con, tmp_path,
                       _turn("t1", 1, 0, "how many leave days do I get?"),
                       _turn("t2", 2, 600, "how many leave days do I get??"))
    assert flagged == {"t1": set(), "t2": set()}


@pytest.mark.parametrize("first, second, rephrased", [
    ({}, {}, True),  # one session
    ({"service": "helpdesk-eu"}, {"service": "helpdesk-us"}, False),  # two services reuse the id
    ({"service": "helpdesk"}, {"service": "helpdesk"}, True),
    ({"service": "helpdesk"}, {}, False),  # a trace without a service is not the service's
    ({"user_id": "ana"}, {"user_id": "bo"}, False),  # another user in the same session
    ({"user_id": "ana", "service": "x"}, {"user_id": "ana", "service": "x"}, True),
])
def test_a_rephrase_is_the_same_users_next_turn_of_a_session_of_one_service(con, tmp_path, first, second,
                                                                             rephrased):
    flagged = _signals(con, tmp_path,
                       trace_line("t1", session_id="s", turn_id=1, original_query="how many leave days do I get?",
                                  timestamp="2026-11-01T08:00:00Z", **GOOD, **first),
                       trace_line("t2", session_id="s", turn_id=1, original_query="how many leave days do I get",
                                  timestamp="2026-11-01T08:00:20Z", **GOOD, **second))
    assert flagged == {"t1": {"immediate_rephrase"} if rephrased else set(), "t2": set()}


def _load_documents(con):
    con.execute("""
        INSERT INTO documents (doc_id, version, title, language, source_updated_at, indexed_at) VALUES
          ('leave', '2025', 'Leave 2025', 'en', '2025-01-01 00:00:00+00', '2025-01-01 00:10:00+00'),
          ('leave', '2026', 'Leave 2026', 'en', '2026-11-03 09:00:00+00', '2026-11-03 09:10:00+00')""")


@pytest.mark.parametrize("at, selected, doc_version, stale", [
    ("2026-11-03T08:55:00Z", True, "2025", False),  # before the new version was published
    ("2026-11-03T09:05:00Z", True, "2025", True),  # published, not indexed yet: still stale
    ("2026-11-03T09:05:00Z", False, "2025", False),  # retrieved but not in the context
    ("2026-11-04T00:00:00Z", True, "2026", False),
    ("2026-11-04T00:00:00Z", True, "2019", False),  # a version the documents table lacks
])
def test_stale_source_uses_the_newest_version_at_request_time(con, tmp_path, at, selected,
                                                             doc_version, stale):
    from rag_loop.store.tables import create_tables
    create_tables(con)
    _load_documents(con)
    chunk = {**CHUNK, "doc_id": "leave", "doc_version": doc_version, "selected": selected}
    flagged = _signals(con, tmp_path, trace_line("t", timestamp=at, **{**GOOD, "chunks": [chunk]}))
    assert ("stale_source" in flagged["t"]) is stale
    documents = con.execute("SELECT stale_documents FROM trace_signals").fetchall()[0][0]
    assert documents == (["leave@2025"] if stale else None)


def test_thresholds_come_from_settings(con, tmp_path):
    line = trace_line("t", **{**GOOD, "latency_ms": 3000.0})
    assert _signals(con, tmp_path, line, settings=SignalSettings(latency_budget_ms=2000)) == \
        {"t": {"latency_over_budget"}}
