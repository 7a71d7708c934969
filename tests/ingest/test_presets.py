"""The shipped mapping presets on exports the real tools wrote (tests/fixtures/<tool>/, made by
their own SDKs and export APIs): every trace the app served is stored once, with the query,
answer, session, retrieved chunks in rank order and day the app knew; the loop's next stages run
on them."""

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from rag_loop.cli import main
from rag_loop.ingest import ingest_directory
from rag_loop.ingest.field_map import load_mapping
from rag_loop.ingest.presets import PRESETS, preset_path
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from tests.helpers import PROJECT

FIXTURES = PROJECT / "tests" / "fixtures"


def _truth(tool: str) -> dict[str, dict]:
    rows = [json.loads(line) for line in (FIXTURES / tool / "truth.jsonl").read_text().splitlines() if line]
    return {row["trace_id"]: row for row in rows}


def _ingested(tmp_path: Path, preset: str, files: list[Path]) -> duckdb.DuckDBPyConnection:
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(preset_path(preset), folder / "rag-loop-mapping.yaml")
    for file in files:
        shutil.copy(file, folder / file.name)
    con = duckdb.connect()
    ingest_directory(con, folder)
    return con


def test_every_preset_loads_and_prints():
    assert set(PRESETS) >= set(EXPORTS)
    for name in PRESETS:
        load_mapping(preset_path(name))
        printed = CliRunner().invoke(main, ["ingest", "preset", name])
        assert printed.exit_code == 0 and printed.output == preset_path(name).read_text()
    unknown = CliRunner().invoke(main, ["ingest", "preset", "splunk"])
    assert unknown.exit_code == 1 and "no preset 'splunk'" in unknown.output


EXPORTS = {"phoenix-spans": ("phoenix", ["spans.parquet", "spans.jsonl"]),
           "mlflow-traces": ("mlflow", ["traces.parquet", "traces.jsonl.gz"])}
RATINGS = {"mlflow-traces": {"thumbs_up": "positive", "thumbs_down": "negative"}}  # Phoenix: in another export


@pytest.mark.parametrize("preset", sorted(EXPORTS))
def test_a_tools_export_in_both_formats_gives_the_apps_traces_once(tmp_path, preset):
    tool, names = EXPORTS[preset]
    truth = _truth(tool)
    con = _ingested(tmp_path, preset, [FIXTURES / tool / name for name in names])
    stored = con.execute("""SELECT trace_id, original_query, answer, session_id, user_id,
                                   strftime("timestamp", '%Y-%m-%d') AS day, status, rewritten_query, latency_ms
                            FROM raw_traces""").df().set_index("trace_id")
    assert set(stored.index) == set(truth)  # the second format's copies are duplicates, not new traces
    assert con.execute("SELECT count(*) FROM trace_duplicates").fetchall() == [(len(truth),)]
    assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]
    for trace_id, known in truth.items():
        row = stored.loc[trace_id]
        assert row.original_query == known["original_query"]
        assert (row.answer if isinstance(row.answer, str) else None) == known["answer"]
        assert (row.session_id, row.user_id, str(row.day)) == (known["session_id"], known["user_id"], known["day"])
        assert row.status == known["status"] and row.latency_ms > 0
        assert row.rewritten_query == (known["rewritten_query"] or known["original_query"]) or not known["retrieval"]
        chunks = con.execute("SELECT chunk_id, doc_id, text, score FROM trace_chunks WHERE trace_id = ? "
                             "ORDER BY rank", [trace_id]).fetchall()
        assert [(c, d, t) for c, d, t, _ in chunks] == [
            (r["id"], r["doc_id"] or r["source"], r["content"]) for r in known["retrieved"]], trace_id
        assert [s for *_, s in chunks] == pytest.approx([r["score"] for r in known["retrieved"]])
    if preset in RATINGS:
        rated = dict(con.execute("SELECT trace_id, rating FROM trace_feedback").fetchall())
        assert rated == {t: RATINGS[preset][k["feedback"]] for t, k in truth.items() if k["feedback"]}
    languages = con.execute("SELECT trace_id, language FROM raw_traces").fetchall()
    right = sum(language == truth[t]["language"] for t, language in languages)
    assert right >= 0.9 * len(truth)  # identified from the query: no language in the export
    compute_signals(con, SignalSettings())
    select_candidates(con, SamplingPolicy())
    assert con.execute("SELECT count(*) FROM failure_candidates").fetchall()[0][0] > 0
    empty = con.execute("SELECT count(*) FROM trace_signals WHERE empty_retrieval").fetchall()[0][0]
    assert empty == sum(not t["retrieved"] for t in truth.values())
