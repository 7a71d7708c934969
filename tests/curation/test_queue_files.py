"""TODO docstring."""

from rag_loop.curation.queue_files import export_queue, read_queue


def test_queue_files_round_trip(tmp_path):
    rows = [{"trace_id": "t1", "input": "Nghỉ phép, \"bao nhiêu\"?", "signals": ["thumbs_down"],
             "retrieval_context": [{"chunk_id": "c1", "text": "15 ngày,\nmỗi năm"}],
             "expected_sources": [], "decision": ""}]
    jsonl, csv = export_queue(rows, tmp_path, "batch-1")
    assert read_queue(jsonl) == rows
    assert read_queue(csv) == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-1.csv", "batch-1.jsonl"]
