"""Queue exports round-trip through JSONL and CSV; the CSV never hands a spreadsheet a formula."""

import csv

from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.curation.queue_files import FORMULA_STARTS, export_queue, read_queue


def test_queue_files_round_trip(tmp_path):
    rows = [{"trace_id": "t1", "input": "Nghỉ phép, \"bao nhiêu\"?", "signals": ["thumbs_down"],
             "retrieval_context": [{"chunk_id": "c1", "text": "15 ngày,\nmỗi năm"}],
             "expected_sources": [], "decision": ""}]
    jsonl, csv = export_queue(rows, tmp_path, "batch-1")
    assert read_queue(jsonl) == rows
    assert read_queue(csv) == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-1.csv", "batch-1.jsonl"]


FORMULAS = ("=HYPERLINK(\"http://x\",\"click\")", "+1+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=12) | st.sampled_from(FORMULAS), min_size=1, max_size=4))
def test_no_csv_cell_starts_a_formula_and_every_text_round_trips(tmp_path_factory, texts):
    directory = tmp_path_factory.mktemp("queue")
    rows = [{"trace_id": f"t{i}", "input": text, "expected_output": text, "decision": ""}
            for i, text in enumerate(texts)]
    _, csv_path = export_queue(rows, directory, "b")
    with open(csv_path, newline="", encoding="utf-8") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert not [c for c in cells if c.startswith(FORMULA_STARTS)]
    assert [(r["input"], r["expected_output"]) for r in read_queue(csv_path)] == [(t, t) for t in texts]
