"""A bad line is named where a person looks: the summary gives its file and line (the line a
text editor shows) and its reason; no reader's message gives another line number."""

import json
import re

import duckdb
from click.testing import CliRunner

from rag_loop.cli import main as cli
from rag_loop.ingest import ingest_directory
from rag_loop.ingest.pipeline import QUARANTINED_SHOWN
from tests.helpers import PROJECT, trace_line

OTLP_LINE = (PROJECT / "tests/fixtures/otlp/traces/genai/traces-0001.jsonl").read_text().splitlines()[0]


def test_the_summary_names_the_file_and_line_of_every_bad_record_up_to_a_limit(tmp_path):
    traces, home = tmp_path / "traces", tmp_path / "own"
    (traces / "app").mkdir(parents=True)
    home.mkdir()
    lines = [trace_line(f"t{i}") for i in range(600)]
    lines.insert(299, '{"trace_id": "cut", "timestamp": ')  # line 300 of 601, cut by a full disk
    (traces / "app" / "native.jsonl").write_text("\n".join(lines) + "\n")
    (traces / "otlp.jsonl").write_text(OTLP_LINE + "\n" + '{"resourceSpans": [ oops\n')
    many = [json.dumps({"trace_id": f"x{i}"}) for i in range(QUARANTINED_SHOWN + 5)]  # no query, no time
    (traces / "zz-many.jsonl").write_text("\n".join(many) + "\n")
    with duckdb.connect(str(home / "rag_loop.duckdb")) as con:
        report = ingest_directory(con, traces)
    fallbacks = " ".join(why for f in report.files for why in f.fallbacks)
    assert "Malformed JSON" in fallbacks and not re.search(r"line \d", fallbacks)  # DuckDB's said 301

    with duckdb.connect(str(home / "rag_loop.duckdb")) as con:
        total = con.execute("SELECT count(*) FROM quarantine").fetchall()[0][0]
    assert total > QUARANTINED_SHOWN + 2  # the cut line, the OTLP line, the 25 records without a query

    printed = CliRunner().invoke(cli, ["summary"], env={"RAG_LOOP_HOME": str(home)}).output
    header, *shown = printed.split("Quarantined records")[1].splitlines()[:QUARANTINED_SHOWN + 2]
    assert f"{QUARANTINED_SHOWN} of {total}:" in header
    assert shown[0] == "  app/native.jsonl:300: invalid_json [native]"
    assert "  otlp.jsonl:2: invalid_json: Expecting value at column 21 [otlp]" in shown
    assert "  zz-many.jsonl:1: missing_query [native]" in shown
    assert shown[QUARANTINED_SHOWN] == f"  ... {total - QUARANTINED_SHOWN} more: SELECT * FROM quarantine " \
                                       "ORDER BY source_file, line_no"
