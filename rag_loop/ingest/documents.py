"""Load the knowledge base (versioned documents with their chunks) into DuckDB.

Two forms, in one folder (docs/knowledge-base.md):
- `*.jsonl` at its top: one `schema.Document` version per line, as a KB export writes them;
- text and Markdown files (`*.md`, `*.markdown`, `*.txt`, in any subfolder): one document per
  file, its id the path without suffix, its version a hash of its content (an edited file is a
  new version), chunked by paragraph.

Loading is an upsert keyed by (doc_id, version), so re-running is idempotent; an invalid line
or an unreadable file lands in quarantine (format `document`) and never blocks the rest.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
from pydantic import ValidationError

from rag_loop.ingest.language import EVERY_LANGUAGE, LanguageSettings, identify
from rag_loop.ingest.lines import preview
from rag_loop.ingest.records import insert_rows
from rag_loop.schema import Document, DocumentChunk
from rag_loop.store.tables import create_tables

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
CHUNK_CHARS = 1000  # paragraphs are merged up to about this many characters
LANGUAGE_SAMPLE = 20_000  # characters of a file the language is identified from
VERSION_CHARS = 12
_ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_BLANK_LINES = re.compile(r"\n[ \t]*\n")

Quarantined = tuple[str, int | None, str, str, str]  # source_file, line_no, format, reason, raw
_QUARANTINED_ROW = pa.schema([("source_file", pa.string()), ("line_no", pa.int64()), ("format", pa.string()),
                              ("reason", pa.string()), ("raw", pa.string())])
_DOCUMENT_ROW = pa.schema([("doc_id", pa.string()), ("version", pa.string()), ("title", pa.string()),
                           ("language", pa.string()), ("updated", pa.timestamp("us", "UTC")),
                           ("updated_naive", pa.timestamp("us")), ("indexed", pa.timestamp("us", "UTC")),
                           ("indexed_naive", pa.timestamp("us")), ("known", pa.bool_())])
_CHUNK_ROW = pa.schema([("chunk_id", pa.string()), ("doc_id", pa.string()), ("version", pa.string()),
                        ("text", pa.string())])


@dataclass
class KnowledgeReport:
    documents: int
    chunks: int
    quarantined: int


def load_knowledge_base(con: duckdb.DuckDBPyConnection, directory: Path,
                        languages: LanguageSettings = EVERY_LANGUAGE) -> KnowledgeReport:
    """Upsert every document version of `directory`: its top-level *.jsonl exports and its
    text/Markdown files; what cannot be read is quarantined with its reason."""
    create_tables(con)
    exported, bad = read_exports(directory)
    files, unreadable = read_text_files(directory, languages)
    documents = exported + files
    bad += unreadable
    con.execute("BEGIN")
    try:
        _upsert_documents(con, exported, files)
        # one chunk id given twice: the later one wins, as row-by-row upserts would leave it
        chunks = {c.chunk_id: (c.chunk_id, d.doc_id, d.version, c.text) for d in documents for c in d.chunks}
        insert_rows(con, "INSERT OR REPLACE INTO document_chunks SELECT * FROM _ingest_rows",
                    list(chunks.values()), _CHUNK_ROW)
        con.execute("DELETE FROM quarantine WHERE format = 'document'")  # the KB is reloaded whole
        insert_rows(con, "INSERT INTO quarantine (source_file, line_no, format, reason, raw, quarantined_at) "
                         "SELECT *, now() FROM _ingest_rows", bad, _QUARANTINED_ROW)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return KnowledgeReport(len(documents), sum(len(d.chunks) for d in documents), len(bad))


def _upsert_documents(con: duckdb.DuckDBPyConnection, exported: list[Document],
                      files: list[Document]) -> None:
    """Upsert the document versions, the later of a repeated (doc_id, version) winning."""
    rows = {(d.doc_id, d.version): (d.doc_id, d.version, d.title, d.language,
                                    *_aware_or_naive(d.source_updated_at), *_aware_or_naive(d.indexed_at), known)
            for group, known in ((exported, True), (files, False)) for d in group}
    insert_rows(con, """
        INSERT OR REPLACE INTO documents (doc_id, version, title, language, source_updated_at,
                                          indexed_at, indexed_at_known)
        SELECT doc_id, version, title, language, coalesce(updated, updated_naive::TIMESTAMPTZ),
               coalesce(indexed, indexed_naive::TIMESTAMPTZ), known FROM _ingest_rows""",
                list(rows.values()), _DOCUMENT_ROW)


def _aware_or_naive(time: datetime | None) -> tuple[datetime | None, datetime | None]:
    """A time in the first place if aware, else in the second: DuckDB reads a naive time in the
    session's time zone, as it reads a naive datetime given as a parameter."""
    return (time, None) if time is not None and time.utcoffset() is not None else (None, time)


def read_exports(directory: Path) -> tuple[list[Document], list[Quarantined]]:
    """The document versions of the folder's *.jsonl files, and the lines that are none."""
    documents, bad = [], []
    for path in sorted(directory.glob("*.jsonl")):
        for line_no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                documents.append(Document.model_validate_json(line))
            except ValidationError as error:
                reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
                bad.append((path.name, line_no, "document", f"invalid_document: {reason}"[:500],
                            preview(line)))
    return documents, bad


def text_files(directory: Path) -> Iterator[Path]:
    """The folder's text and Markdown files, in any subfolder, in path order; hidden files and
    folders (`.git/`, `.obsidian/`) are not the KB's, and links to folders are not followed."""
    for root, folders, names in os.walk(directory):
        folders[:] = sorted(f for f in folders if not f.startswith("."))
        yield from (Path(root) / name for name in sorted(names)
                    if not name.startswith(".") and Path(name).suffix.lower() in TEXT_SUFFIXES)


def read_text_files(directory: Path, languages: LanguageSettings = EVERY_LANGUAGE
                    ) -> tuple[list[Document], list[Quarantined]]:
    """One document per text file; a file that cannot be read, is not UTF-8, holds no text or
    has the id of a file read before it is quarantined with its name and reason."""
    documents: dict[str, Document] = {}
    bad: list[Quarantined] = []
    for path in text_files(directory):
        name = path.relative_to(directory).as_posix()
        try:
            if not path.is_file():  # a pipe or a broken link: reading would block or fail
                raise OSError(f"not a regular file: {name}")
            data, mtime = path.read_bytes(), path.stat().st_mtime
        except OSError as error:
            bad.append((name, None, "document", f"unreadable: {error.strerror or error}"[:500], ""))
            continue
        doc_id = name[: -len(path.suffix)]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            bad.append((name, None, "document", f"not_utf8: {error.reason} at byte {error.start}", preview(data)))
            continue
        if doc_id in documents:
            bad.append((name, None, "document", f"duplicate_document: {doc_id!r} is also a file read before "
                                                f"(another suffix)"[:500], preview(text)))
            continue
        document = text_document(doc_id, text, datetime.fromtimestamp(mtime, UTC), path.name, languages)
        if document.chunks:
            documents[doc_id] = document
        else:
            bad.append((name, None, "document", "empty_document: no text", preview(text)))
    return list(documents.values()), bad


def text_document(doc_id: str, text: str, updated_at: datetime, file_name: str,
                  languages: LanguageSettings = EVERY_LANGUAGE) -> Document:
    """A text file as a document version: versioned by a hash of its text, titled by its first
    heading (else `file_name`), chunked by paragraph with ids `doc@version#n`."""
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    version = hashlib.sha256(text.encode()).hexdigest()[:VERSION_CHARS]
    chunks = [DocumentChunk(chunk_id=f"{doc_id}@{version}#{n}", text=chunk)
              for n, chunk in enumerate(paragraph_chunks(text), 1)]
    return Document(doc_id=doc_id, version=version, title=first_heading(text) or file_name,
                    language=identify(text[:LANGUAGE_SAMPLE], languages), source_updated_at=updated_at,
                    indexed_at=None, chunks=chunks)


def first_heading(text: str) -> str | None:
    """The text of the first Markdown heading (`# Title`, or a line underlined with = or -)."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        atx = _ATX_HEADING.match(line)
        if atx and (atx.group(1) or "").strip():
            return atx.group(1).strip()
        if (line.strip() and i + 1 < len(lines) and _SETEXT_UNDERLINE.match(lines[i + 1])
                and (i == 0 or not lines[i - 1].strip())):
            return line.strip()
    return None


def is_heading(paragraph: str) -> bool:
    """Whether a paragraph is only headings: every line an ATX heading, or a setext heading."""
    lines = paragraph.split("\n")
    return (all(_ATX_HEADING.match(line) for line in lines)
            or (len(lines) == 2 and bool(_SETEXT_UNDERLINE.match(lines[1]))))


def paragraph_chunks(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """Blank-line separated paragraphs, a heading kept with the paragraph after it, and small
    neighbours merged while the chunk stays within `limit` characters (a longer paragraph is
    a chunk of its own: a paragraph is never cut)."""
    blocks: list[str] = []
    heading = ""
    for paragraph in (p.strip("\n").rstrip() for p in _BLANK_LINES.split(text)):
        if not paragraph.strip():
            continue
        if is_heading(paragraph):
            heading = f"{heading}\n\n{paragraph}" if heading else paragraph
            continue
        blocks.append(f"{heading}\n\n{paragraph}" if heading else paragraph)
        heading = ""
    blocks += [heading] if heading else []
    chunks: list[str] = []
    for block in blocks:
        if chunks and len(chunks[-1]) + 2 + len(block) <= limit:
            chunks[-1] = f"{chunks[-1]}\n\n{block}"
        else:
            chunks.append(block)
    return chunks
