"""A knowledge base given as a folder of text and Markdown files: one document per file,
versioned by content, chunked by paragraph; what cannot be read is quarantined, never blocking."""

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rag_loop.ingest.documents import is_heading, load_knowledge_base, paragraph_chunks
from rag_loop.store.tables import create_tables
from tests.helpers import DEMO

LEAVE = """# Leave policy

Full-time employees get 15 days of paid annual leave per year.

## Carry over

Up to 5 unused days can be carried over until 31 March.
"""
VI = "Nhân viên toàn thời gian có mười lăm ngày nghỉ phép năm có lương mỗi năm, theo hợp đồng lao động."


def _tables(con) -> dict[str, list[tuple]]:
    return {"documents": con.execute("SELECT * FROM documents ORDER BY ALL").fetchall(),
            "document_chunks": con.execute("SELECT * FROM document_chunks ORDER BY ALL").fetchall(),
            "quarantine": con.execute("SELECT source_file, line_no, format, reason, raw FROM quarantine "
                                      "ORDER BY ALL").fetchall()}


@pytest.fixture
def kb(tmp_path) -> Path:
    folder = tmp_path / "kb"
    (folder / "hr" / "vi").mkdir(parents=True)
    (folder / "hr" / "leave.md").write_text(LEAVE)
    (folder / "hr" / "vi" / "nghi-phep.txt").write_text(VI + "\n\n" + VI + "\n")
    (folder / "faq.markdown").write_text("Setext title\n============\n\nAsk HR anything about payroll and leave.\n")
    (folder / "notes.rst").write_text("not a KB file")
    (folder / ".obsidian").mkdir()
    (folder / ".obsidian" / "hidden.md").write_text("# Settings")
    os.utime(folder / "hr" / "leave.md", (1767225600, 1767225600))  # 2026-01-01T00:00:00Z
    return folder


def test_each_text_file_is_a_document_with_its_path_as_id_and_a_content_hash_as_version(kb):
    con = duckdb.connect()
    report = load_knowledge_base(con, kb)
    docs = {row[0]: row for row in con.execute("SELECT * FROM documents").fetchall()}
    assert set(docs) == {"hr/leave", "hr/vi/nghi-phep", "faq"} and report.quarantined == 0
    doc_id, version, title, language, updated, indexed, indexed_known = docs["hr/leave"]
    assert len(version) == 12 and title == "Leave policy" and language == "en" and indexed is None
    assert indexed_known is False  # a file says when it changed, not when it was indexed
    assert updated == datetime(2026, 1, 1, tzinfo=UTC)
    assert docs["hr/vi/nghi-phep"][2:4] == ("nghi-phep.txt", "vi")
    assert docs["faq"][2] == "Setext title"
    chunks = con.execute("SELECT chunk_id, text FROM document_chunks WHERE doc_id = 'hr/leave'").fetchall()
    assert chunks == [(f"hr/leave@{version}#1", LEAVE.strip())]  # small paragraphs merged, headings kept


def test_an_edited_file_is_a_new_version_the_old_stays_and_loading_twice_changes_nothing(kb):
    con = duckdb.connect()
    load_knowledge_base(con, kb)
    first = _tables(con)
    load_knowledge_base(con, kb)
    assert _tables(con) == first
    (kb / "hr" / "leave.md").write_text(LEAVE.replace("15 days", "18 days"))
    load_knowledge_base(con, kb)
    versions = con.execute("SELECT version, source_updated_at FROM documents WHERE doc_id = 'hr/leave' "
                           "ORDER BY source_updated_at").fetchall()
    assert len(versions) == 2 and versions[0][0] != versions[1][0]
    newest = con.execute("SELECT text FROM document_chunks WHERE version = ?", [versions[1][0]]).fetchall()
    assert "18 days" in newest[0][0]


def test_the_jsonl_export_and_the_files_load_together(kb):
    shutil.copy(DEMO / "kb" / "documents.jsonl", kb / "documents.jsonl")
    con = duckdb.connect()
    report = load_knowledge_base(con, kb)
    exported = sum(1 for line in (kb / "documents.jsonl").read_text().splitlines() if line.strip())
    assert report.documents == exported + 3 and report.quarantined == 0


def test_files_give_no_index_time_so_freshness_leaves_them_out_and_says_nothing_false(kb):
    from rag_loop.drift.figures import freshness_figures, stale_documents
    from rag_loop.selection.signals import SignalSettings, compute_signals

    shutil.copy(DEMO / "kb" / "documents.jsonl", kb / "documents.jsonl")
    con = duckdb.connect()
    load_knowledge_base(con, kb)
    compute_signals(con, SignalSettings())  # no traffic: the stale-retrieval part reads an empty table
    known = dict(con.execute("SELECT indexed_at_known, count(*) FROM documents GROUP BY 1").fetchall())
    assert known[False] == 3 and known[True] > 3
    day = datetime(2026, 1, 1, tzinfo=UTC).date()  # hr/leave.md's mtime: published that day, never "indexed"
    versions, _ = freshness_figures(con, day, 7, 60)
    assert "hr/leave" not in set(versions["doc_id"])
    assert not any(d.startswith("hr/") for d in stale_documents(con, datetime(2026, 12, 31, tzinfo=UTC).date()))


def test_unreadable_non_utf8_empty_and_clashing_files_are_quarantined_and_the_rest_is_loaded(kb):
    (kb / "latin1.txt").write_bytes("Congés payés: 25 jours".encode("latin-1"))
    (kb / "empty.md").write_text("\n \n\t\n")
    (kb / "faq.txt").write_text("Same id as faq.markdown.")
    os.mkfifo(kb / "pipe.md")  # reading it would block the load
    (kb / "gone.md").symlink_to(kb / "nowhere.md")
    con = duckdb.connect()
    report = load_knowledge_base(con, kb)
    reasons = dict(con.execute("SELECT source_file, split_part(reason, ':', 1) FROM quarantine "
                               "WHERE format = 'document'").fetchall())
    assert reasons == {"latin1.txt": "not_utf8", "empty.md": "empty_document", "faq.txt": "duplicate_document",
                       "pipe.md": "unreadable", "gone.md": "unreadable"}
    assert report.documents == 3 and report.quarantined == 5


def test_paragraphs_are_merged_up_to_the_limit_and_a_heading_stays_with_its_paragraph():
    long = "word " * 250
    text = f"# Title\n\n{long}\n\n## Section\n\nshort one\n\nshort two\n\n{long}\n\n# Trailing heading"
    chunks = paragraph_chunks(text)
    assert chunks[0] == f"# Title\n\n{long.strip()}"
    assert chunks[1] == "## Section\n\nshort one\n\nshort two"
    assert chunks[2:] == [long.strip(), "# Trailing heading"]  # no paragraph after it: a chunk of its own


PARAGRAPH = st.one_of(st.text(min_size=1, max_size=300),
                      st.builds(lambda level, title: "#" * level + " " + title, st.integers(1, 6),
                                st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=30)))


@settings(max_examples=150, deadline=None)
@given(paragraphs=st.lists(PARAGRAPH, max_size=12), limit=st.integers(20, 1200))
def test_chunks_keep_every_word_in_order_and_stay_within_the_limit_unless_one_block_is_longer(paragraphs, limit):
    text = "\n\n".join(paragraphs)
    chunks = paragraph_chunks(text, limit)
    assert " ".join(chunks).split() == text.split()  # nothing lost, nothing moved
    assert all(chunk.strip() for chunk in chunks)
    for n, chunk in enumerate(chunks):
        parts = chunk.split("\n\n")
        if len(chunk) > limit:  # one block: headings, then at most one paragraph
            assert all(is_heading(part) for part in parts[:-1]), chunk
        if n < len(chunks) - 1:
            assert not is_heading(parts[-1]), "a heading is kept with the paragraph after it"


@pytest.fixture
def kb_con():
    """One in-memory database with the tables for every example of a property test (each
    example empties the KB's tables first): a fresh database per example costs its tables."""
    with duckdb.connect() as connection:
        create_tables(connection)
        yield connection


NAME = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1, max_size=40)
CONTENT = st.one_of(st.binary(max_size=400), st.text(max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass")))


# every shape the strategies draw, in every run: each suffix; two files of one id (another
# suffix, another case); stored text with a heading, a BOM, CRLF and NUL; bytes not UTF-8 and
# a lone surrogate; empty and blank-only files; hidden names; names with spaces, glob
# characters, a backslash, a newline, a dot inside and non-ASCII; a folder
HOSTILE_FILES = {
    ("leave policy", ".MD"): b"# Leave\r\n\r\n15 days.\r\n", ("leave policy", ".md"): b"Same id.",
    ("faq*[?]", ".markdown"): "\ufeffSetext\n======\n\nAsk HR.\x00".encode(),
    ("caf\u00e9 \u0111\u00f3ng", ".txt"): "Nh\u00e2n vi\u00ean ngh\u1ec9 ph\u00e9p.".encode(),
    ("latin\\1", ".txt"): "Cong\u00e9s pay\u00e9s".encode("latin-1"),
    ("lone\nsurrogate", ".md"): "a \ud800 b".encode("utf-8", "surrogatepass"),
    ("empty", ".md"): b"", ("blank.only", ".txt"): b"\n \n\t\n", (".hidden", ".md"): b"# Hidden",
}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.dictionaries(st.tuples(NAME, st.sampled_from([".md", ".MD", ".markdown", ".txt"])), CONTENT,
                             min_size=1, max_size=6),
       folder=st.one_of(st.none(), NAME))
@example(files=HOSTILE_FILES, folder=None)
@example(files=HOSTILE_FILES, folder="sub folder \u00e9")
@example(files=HOSTILE_FILES, folder=".hidden")
def test_hostile_file_names_and_contents_never_crash_the_load_and_each_file_is_stored_or_quarantined(
        tmp_path_factory, kb_con, files, folder):
    kb = tmp_path_factory.mktemp("kb")
    written = []
    for (stem, suffix), content in files.items():
        name = f"{folder}/{stem}{suffix}" if folder else f"{stem}{suffix}"
        if any(part.startswith(".") or part in ("", "..") for part in name.split("/")):
            continue  # hidden: not the KB's
        try:
            (kb / name).parent.mkdir(parents=True, exist_ok=True)
            (kb / name).write_bytes(content)
        except OSError:
            continue  # the file system refused the name (too long in bytes)
        if name not in written:
            written.append(name)
    con = kb_con
    con.execute("DELETE FROM documents; DELETE FROM document_chunks; DELETE FROM quarantine")  # a new KB
    report = load_knowledge_base(con, kb)
    load_knowledge_base(con, kb)  # twice: the same tables
    stored = {d for (d,) in con.execute("SELECT doc_id FROM documents").fetchall()}
    quarantined = {f for (f,) in con.execute("SELECT source_file FROM quarantine").fetchall()}
    on_disk = [str(p.relative_to(kb)) for p in kb.rglob("*") if p.is_file()]
    assert sorted(on_disk) == sorted(written)
    for name in written:
        assert name.rsplit(".", 1)[0] in stored or name in quarantined, name
    assert report.documents == len(stored) and report.documents + report.quarantined == len(written)
    orphans = con.execute("SELECT count(*) FROM document_chunks c ANTI JOIN documents USING (doc_id, version)")
    assert orphans.fetchall() == [(0,)]
