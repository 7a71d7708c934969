"""A span whose text holds a lone surrogate (`"\\ud800"`: valid JSON, not UTF-8) is refused on
its own, with its line and span id; the file's other spans and traces are stored."""

import json

import duckdb

from rag_loop.ingest import ingest_directory
from tests.helpers.otlp import line, request_spans


def test_one_span_with_a_lone_surrogate_is_refused_alone(tmp_path):
    broken = json.loads(line(request_spans(2)))
    spans = broken["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[0]["name"] = "rerank \ud800"
    (tmp_path / "t.otlp.jsonl").write_text(line(request_spans(1)) + "\n" + json.dumps(broken) + "\n")
    con = duckdb.connect()
    report = ingest_directory(con, tmp_path)
    assert [f.reader for f in report.files] == ["spans"]  # not refused whole
    refused = con.execute("SELECT line_no, span_id, reason FROM quarantine").fetchall()
    assert refused == [(2, spans[0]["spanId"], "invalid_utf8: a lone surrogate in name")]
    stored = con.execute("SELECT count(*) FROM otlp_spans").fetchall()[0][0]
    assert stored == len(request_spans(1)) + len(spans) - 1
    assert con.execute("SELECT count(*) FROM raw_traces").fetchall()[0][0] >= 1
