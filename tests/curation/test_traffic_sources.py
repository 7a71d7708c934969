"""Sources without a knowledge-base export: the chunks production traces retrieved are what
curators search and cite, marked as seen in traces; a knowledge base wins per document; the
workspace (knowledge.parquet) and the label stage (the database) accept the same sources."""

import json

import duckdb
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.curation.exports import export_knowledge
from rag_loop.curation.label_rules import KnownSources, check_source
from rag_loop.ingest import ingest_directory
from rag_loop.ingest.documents import load_knowledge_base
from rag_loop.store.tables import create_tables
from rag_loop.store.traces import trace_details
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.helpers import DEMO, trace_line
from tests.workspace.conftest import Curator

VPN_OLD = {"doc_id": "wiki/vpn", "chunk_id": "0b6f6a8e-1c1d-4c59-9f3e-5d1a2b3c4d5e", "doc_version": "3", "rank": 1}
VPN_NEW = {"doc_id": "wiki/vpn", "chunk_id": "7d2c9e41-8a0b-4f6e-b1c2-3d4e5f607182", "doc_version": "4", "rank": 1}
TRAFFIC = [  # what apps send: ids only (OTel GenAI documents), ids and text, a KB document's chunk
    {"trace_id": "ids-only", "timestamp": "2026-11-01T08:00:00Z",
     "chunks": [{"doc_id": "IT-001", "chunk_id": "IT-001", "score": 0.8, "rank": 1}]},
    {"trace_id": "vpn-3", "timestamp": "2026-11-02T08:00:00Z",
     "chunks": [{**VPN_OLD, "text": "Connect with the old VPN app."}]},
    {"trace_id": "vpn-4", "timestamp": "2026-11-03T08:00:00Z",
     "chunks": [{**VPN_NEW, "text": "Use the new VPN client, version 4."}]},
    {"trace_id": "vpn-3-earlier", "timestamp": "2026-10-30T08:00:00Z", "chunks": [VPN_OLD]},
    {"trace_id": "leave", "timestamp": "2026-11-04T08:00:00Z",
     "chunks": [{"doc_id": "leave-policy", "chunk_id": "5c4b3a29-leave", "doc_version": "2026", "rank": 1,
                 "text": "Full-time employees get 15 days."}]},
]


def _traffic(tmp_path) -> duckdb.DuckDBPyConnection:
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "t.jsonl").write_text("\n".join(trace_line(**t) for t in TRAFFIC) + "\n")
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    create_tables(con)
    ingest_directory(con, folder)
    return con


def _exported(con, tmp_path) -> dict[str, dict]:
    queue = tmp_path / "curation" / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    return {f"{r['doc_id']}|{r['chunk_id']}|{r['version']}": r
            for r in pq.read_table(export_knowledge(con, queue)).to_pylist()}


def _with_kb(con, tmp_path) -> None:
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "documents.jsonl").write_text((DEMO / "kb" / "documents.jsonl").read_text() + json.dumps({
        "doc_id": "handbook", "version": "7", "title": "Handbook", "source_updated_at": "2026-01-01T00:00:00Z",
        "chunks": [{"chunk_id": "e3b0c442-98fc-1c14", "text": "A chunk id from a vector store."}]}) + "\n")
    (kb / "a@b#c.md").write_text("# Odd name\n\nA file name with @ and # in it.\n")
    load_knowledge_base(con, kb)


def test_without_a_kb_the_chunks_traffic_retrieved_are_the_sources_seen_in_traces(tmp_path):
    con = _traffic(tmp_path)
    rows = _exported(con, tmp_path)
    assert {r["seen_in"] for r in rows.values()} == {"traces"}
    assert set(rows) == {"IT-001|IT-001|None", f"wiki/vpn|{VPN_OLD['chunk_id']}|3",
                         f"wiki/vpn|{VPN_NEW['chunk_id']}|4", "leave-policy|5c4b3a29-leave|2026"}
    old = rows[f"wiki/vpn|{VPN_OLD['chunk_id']}|3"]
    assert old["text"] == "Connect with the old VPN app."  # a trace sent it, another did not
    assert old["newest_version"] == "4"  # the version seen most recently
    assert old["source_updated_at"].isoformat().startswith("2026-10-30")  # first seen
    assert rows["IT-001|IT-001|None"]["text"] is None and rows["IT-001|IT-001|None"]["title"] is None
    known = KnownSources.load(con)
    assert check_source("IT-001", known) == (None, None)
    assert check_source(VPN_NEW["chunk_id"], known) == (None, None)
    assert check_source(VPN_OLD["chunk_id"], known) == (
        None, f"expected_sources: {VPN_OLD['chunk_id']} is not the newest version (4)")
    assert check_source("wiki/vpn@4", known) == (None, None)
    assert check_source("wiki/vpn@9", known)[0] == "expected_sources: wiki/vpn has no version '9'"
    assert check_source("nope", known)[0] == "expected_sources: unknown document 'nope'"


def test_a_kb_wins_per_document_and_a_kb_chunk_id_is_accepted_as_a_chunk(tmp_path):
    con = _traffic(tmp_path)
    _with_kb(con, tmp_path)
    rows = _exported(con, tmp_path)
    leave = {r["seen_in"] for r in rows.values() if r["doc_id"] == "leave-policy"}
    assert leave == {"knowledge_base"} and "leave-policy|5c4b3a29-leave|2026" not in rows
    assert {r["seen_in"] for r in rows.values() if r["doc_id"] == "wiki/vpn"} == {"traces"}
    known = KnownSources.load(con)
    assert check_source("e3b0c442-98fc-1c14", known) == (None, None)  # not taken for a document id
    assert check_source("5c4b3a29-leave", known)[0] == "expected_sources: unknown document '5c4b3a29-leave'"
    assert check_source("leave-policy@2025#annual-en", known)[1].endswith("is not the newest version (2026)")
    odd = next(r for r in rows.values() if r["doc_id"] == "a@b#c")
    for source in ("a@b#c", f"a@b#c@{odd['version']}", odd["chunk_id"]):
        assert check_source(source, known) == (None, None), source


@pytest.mark.parametrize("kb", [False, True])
def test_the_workspace_and_the_label_stage_accept_the_same_sources_and_use_as_source_is_accepted(tmp_path, kb):
    con = _traffic(tmp_path)
    if kb:
        _with_kb(con, tmp_path)
    rows = _exported(con, tmp_path)
    in_database, in_workspace = KnownSources.load(con), Workspace(tmp_path / "curation").known_sources()
    candidates = {s for r in rows.values() for s in (r["chunk_id"], r["doc_id"], f"{r['doc_id']}@{r['version']}")
                  if s} | {"nope", "wiki/vpn@9", "IT-001#x", "@", "#", ""}
    assert {s: check_source(s, in_database) for s in candidates} == {s: check_source(s, in_workspace)
                                                                     for s in candidates}
    details = trace_details(con, [t["trace_id"] for t in TRAFFIC])
    cited = [c["source"] for d in details.values() for c in d["retrieved"]]
    assert len(cited) == len(TRAFFIC) and all(check_source(s, in_database)[0] is None for s in cited), cited


def test_the_workspace_search_finds_traffic_sources_and_says_why_when_there_are_none(tmp_path):
    con = _traffic(tmp_path)
    _exported(con, tmp_path)
    workspace = Workspace(tmp_path / "curation")
    hits = workspace.search_sources("vpn client")
    assert [(h["source"], h["seen_in"], h["newest"]) for h in hits] == [(VPN_NEW["chunk_id"], "traces", True)]
    assert [h["source"] for h in workspace.search_sources("it-001")] == ["IT-001"]  # no text: found by its id
    assert workspace.sources_note() is None
    ana = Curator(create_app(workspace), "ana")
    reply = ana.client.get("/sources", params={"q": "vpn"})
    assert [h["seen_in"] for h in reply.json()] == ["traces", "traces"] and "x-sources-note" not in reply.headers
    empty = duckdb.connect()
    create_tables(empty)
    _exported(empty, tmp_path)
    reply = ana.client.get("/sources", params={"q": "vpn"})
    assert reply.json() == [] and reply.headers["x-sources-note"] == "no knowledge base and no retrieved chunks yet"


def test_the_search_on_the_demo_kb_with_traffic_shows_the_kb_first(tmp_path):
    con = _traffic(tmp_path)
    _with_kb(con, tmp_path)
    _exported(con, tmp_path)
    hits = Workspace(tmp_path / "curation").search_sources("policy")
    assert hits and {h["seen_in"] for h in hits} == {"knowledge_base"}
    assert all(h["newest"] for h in hits[:5])
    traffic = Workspace(tmp_path / "curation").search_sources("old vpn app")
    assert [(h["source"], h["seen_in"], h["newest"]) for h in traffic] == [(VPN_OLD["chunk_id"], "traces", False)]


IDS = st.text(st.sampled_from("ab@#/.-_ 1é"), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.none(), IDS), IDS, st.one_of(st.none(), IDS)), max_size=8),
       source=st.one_of(st.text(max_size=30), IDS))
def test_hostile_sources_never_crash_check_source_and_every_known_id_is_accepted(rows, source):
    newest = {doc: version for _, doc, version in rows}
    known = KnownSources.from_rows([(chunk, doc, version, newest[doc]) for chunk, doc, version in rows])
    error, warning = check_source(source, known)
    assert error is None or (error.startswith("expected_sources: ") and warning is None)
    for chunk, doc, version in rows:
        assert check_source(doc, known)[0] is None
        if chunk is not None:
            assert check_source(chunk, known)[0] is None
        if version is not None:
            assert check_source(f"{doc}@{version}", known)[0] is None
