"""Load the knowledge base (versioned documents with their chunks) into DuckDB.

One JSON document version per line (`schema.Document`). Loading is an upsert keyed by
(doc_id, version), so re-running is idempotent; invalid lines land in quarantine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
from pydantic import ValidationError

from rag_loop.ingest.lines import preview
from rag_loop.schema import Document
from rag_loop.store.tables import create_tables


@dataclass
class KnowledgeReport:
    documents: int
    chunks: int
    quarantined: int


def load_knowledge_base(con: duckdb.DuckDBPyConnection, directory: Path) -> KnowledgeReport:
    """Upsert every document version found in `directory`'s *.jsonl files."""
    create_tables(con)
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
    con.execute("BEGIN")
    con.executemany(
        "INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?, ?, ?)",
        [(d.doc_id, d.version, d.title, d.language, d.source_updated_at, d.indexed_at)
         for d in documents])
    con.executemany(
        "INSERT OR REPLACE INTO document_chunks VALUES (?, ?, ?, ?)",
        [(c.chunk_id, d.doc_id, d.version, c.text) for d in documents for c in d.chunks])
    con.execute("DELETE FROM quarantine WHERE format = 'document'")  # the KB is reloaded whole
    if bad:
        con.executemany("INSERT INTO quarantine (source_file, line_no, format, reason, raw, "
                        "quarantined_at) VALUES (?, ?, ?, ?, ?, now())", bad)
    con.execute("COMMIT")
    return KnowledgeReport(len(documents), sum(len(d.chunks) for d in documents), len(bad))
