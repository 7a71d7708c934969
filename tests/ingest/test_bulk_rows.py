"""Bookkeeping rows written in one statement (few rows bound as values, many as a table): the
rows, their types, NULLs and order are those given, whatever their number."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest

from rag_loop.ingest.documents import load_knowledge_base
from rag_loop.ingest.lines import Rejected
from rag_loop.ingest.pipeline import FileReport, NewFile, mark_ingested
from rag_loop.ingest.records import BatchCounts, duckdb_type, load_batch, quarantine_rejected
from rag_loop.schema import Trace
from rag_loop.store.tables import create_tables
from tests.helpers import trace_line

SIZES = [1, 3, 20]  # one row, a few, more than are bound as values


@pytest.mark.parametrize("n", [0, *SIZES])
def test_rejected_records_are_quarantined_in_order_with_their_nulls(con, n):
    create_tables(con)
    rejected = [Rejected(n - i, f"why {i}", f"raw {i}", None if i % 2 else f"span {i}") for i in range(n)]
    assert quarantine_rejected(con, rejected, "f.jsonl", "otlp") == BatchCounts(quarantined=n)
    rows = con.execute("SELECT source_file, line_no, format, reason, raw, span_id, quarantined_at IS NOT NULL "
                       "FROM quarantine ORDER BY rowid").fetchall()
    assert rows == [("f.jsonl", r.line_no, "otlp", r.reason, r.raw, r.span_id, True) for r in rejected]


@pytest.mark.parametrize("n", SIZES)
def test_files_read_are_marked_with_their_counts(con, n):
    create_tables(con)
    stored = [(NewFile(i, Path(f"{i}.jsonl"), f"{i}.jsonl", 10 + i, 2**40 + i),
               FileReport(f"{i}.jsonl", "native", BatchCounts(i, 1, 2), reader="retry" if i == 1 else "fast"))
              for i in range(n)]
    mark_ingested(con, stored)
    assert con.execute("SELECT * EXCLUDE (ingested_at) FROM ingested_files ORDER BY rowid").fetchall() == [
        (f"{i}.jsonl", 10 + i, 2**40 + i, "native", i + 3, i, 1, 2) for i in range(n) if i != 1]


@pytest.mark.parametrize("n", SIZES)
def test_each_wrongly_typed_record_is_quarantined_with_its_path(con, n):
    create_tables(con)
    fields = [f for f, kind in duckdb_type(Trace).items()
              if kind == "VARCHAR" and f not in ("trace_id", "original_query", "timestamp")][:n]
    raw = [json.dumps({**json.loads(trace_line(f"t{i}")), field: {"not": "text"}}) for i, field in enumerate(fields)]
    lines = pa.table({"line_no": pa.array(range(1, n + 1), pa.int64()), "raw": pa.array(raw, pa.string())})
    assert load_batch(con, lines, "f.jsonl", "native") == BatchCounts(quarantined=n)
    assert con.execute("SELECT line_no, reason FROM quarantine ORDER BY line_no").fetchall() == [
        (i, f"wrong_type: {field}") for i, field in enumerate(fields, 1)]


def _document(doc_id: str, version: str, title: str, chunk_ids: list[str], updated: str) -> str:
    return json.dumps({"doc_id": doc_id, "version": version, "title": title, "source_updated_at": updated,
                       "chunks": [{"chunk_id": c, "text": f"{title} {c}"} for c in chunk_ids]})


@pytest.mark.parametrize("n", SIZES)
def test_a_repeated_document_version_or_chunk_id_keeps_the_later_one(con, tmp_path, n):
    lines = [_document(f"d{i}", "v1", f"first {i}", [f"c{i}"], "2024-01-01T00:00:00Z") for i in range(n)]
    lines += [_document("d0", "v1", "again", ["c0", "extra"], "2024-02-01T00:00:00Z"),
              _document("other", "v1", "other", [f"c{n - 1}"], "2024-03-01T00:00:00Z")]
    (tmp_path / "kb.jsonl").write_text("\n".join(lines) + "\n")
    for _ in range(2):  # a reload changes nothing
        load_knowledge_base(con, tmp_path)
        documents = con.execute("SELECT doc_id, title, source_updated_at FROM documents ORDER BY ALL").fetchall()
        assert documents == sorted(
            [("d0", "again", datetime(2024, 2, 1, tzinfo=UTC)), ("other", "other", datetime(2024, 3, 1, tzinfo=UTC))]
            + [(f"d{i}", f"first {i}", datetime(2024, 1, 1, tzinfo=UTC)) for i in range(1, n)])
        chunks = dict(con.execute("SELECT chunk_id, doc_id FROM document_chunks").fetchall())
        assert chunks == {**{f"c{i}": f"d{i}" for i in range(n)}, "extra": "d0", f"c{n - 1}": "other"}


@pytest.mark.parametrize("n", SIZES)
def test_a_time_without_offset_is_read_in_the_sessions_time_zone(con, tmp_path, n):
    lines = [_document(f"naive{i}", "v1", "t", [f"n{i}"], "2024-01-01T07:00:00") for i in range(n)]
    lines += [_document("aware", "v1", "t", ["a"], "2024-01-01T07:00:00+07:00")]
    (tmp_path / "kb.jsonl").write_text("\n".join(lines) + "\n")
    con.execute("SET TimeZone = 'Asia/Ho_Chi_Minh'")
    try:
        load_knowledge_base(con, tmp_path)
    finally:
        con.execute("SET TimeZone = 'UTC'")
    times = con.execute("SELECT DISTINCT source_updated_at FROM documents").fetchall()
    assert times == [(datetime(2024, 1, 1, tzinfo=UTC),)]
