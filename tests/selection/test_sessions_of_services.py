"""Two deployments that reuse session ids, as real instrumented apps wrote them: the genai app and
its canary (tests/fixtures/otlp/canary) run the same conversations under the same session ids,
seconds apart. A session is its id within the service: the canary's turns do not rephrase the
genai service's."""

import shutil

import duckdb

from rag_loop.ingest import ingest_directory
from rag_loop.selection.signals import SignalSettings, compute_signals
from tests.helpers import PROJECT

OTLP = PROJECT / "tests" / "fixtures" / "otlp"


def test_services_reusing_session_ids_are_not_one_session(tmp_path):
    shutil.copytree(OTLP / "traces" / "genai", tmp_path / "genai")
    shutil.copytree(OTLP / "canary" / "genai-canary", tmp_path / "genai-canary")
    con = duckdb.connect()
    ingest_directory(con, tmp_path)
    shared, gap = con.execute("""
        SELECT count(DISTINCT a.session_id), max(abs(epoch(b."timestamp") - epoch(a."timestamp")))
        FROM raw_traces a JOIN raw_traces b ON a.session_id = b.session_id AND a.service < b.service
        WHERE a.original_query = b.original_query""").fetchall()[0]
    assert shared == 22 and gap < SignalSettings().rephrase_window_seconds  # the same questions, seconds apart
    compute_signals(con, SignalSettings())
    assert con.execute("SELECT count(*) FILTER (immediate_rephrase), count(*) FROM trace_signals").fetchall() == \
        [(0, 88)]
