"""A user's own traces, end to end: OTLP files from real instrumentations, MLflow and Arize
Phoenix exports read through their mapping presets and what the Langfuse SDK sends, no
knowledge base, their RAG service over HTTP, and not one piece of the demo."""

import json
import os
import shutil
import subprocess
import sys

import duckdb
import pytest

from rag_loop.ingest.presets import preset_path
from tests.helpers import PROJECT
from tests.helpers.ramdisk import in_memory
from tests.helpers.standin_rag import RagService

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def work(tmp_path):
    with in_memory(tmp_path) as folder:
        yield folder


def test_the_loop_runs_on_own_traces_and_evaluates_an_http_service_without_the_demo(work):
    traces = work / "traces"
    shutil.copytree(PROJECT / "tests" / "fixtures" / "otlp" / "traces", traces / "otlp")
    for tool, export, preset in (("mlflow", "traces.parquet", "mlflow-traces"),
                                 ("phoenix", "spans.jsonl", "phoenix-spans")):
        (traces / tool).mkdir()
        shutil.copy(PROJECT / "tests" / "fixtures" / tool / export, traces / tool)
        shutil.copy(preset_path(preset), traces / tool / "rag-loop-mapping.yaml")
    shutil.copytree(PROJECT / "tests" / "fixtures" / "langfuse" / "otlp", traces / "langfuse")  # SDK spans
    service = RagService()
    try:
        env = {**os.environ, "RAG_LOOP_HOME": str(work / "home"),  # anything unnamed
               "RAG_LOOP_TRACES_DIR": str(traces),
               "RAG_LOOP_KB_DIR": "", "RAG_LOOP_DB": str(work / "own.duckdb"),
               "RAG_LOOP_CURATION_DIR": str(work / "curation"),
               "RAG_LOOP_GOLDENS_DIR": str(work / "goldens"),
               "RAG_LOOP_REPORTS_DIR": str(work / "reports"),
               "RAG_LOOP_RAG_APP_URL": service.url + "/ok", "DAGSTER_DISABLE_TELEMETRY": "1",
               "DAGSTER_HOME": str(work / "dagster"),
               "PYTHONPATH": str(PROJECT),
               # torch on one thread: the tests run on every core already, and OpenMP's second
               # thread spinning between batches cost 4-5 CPU s of this test's 34 (same results).
               # Numba's too: one clustering thread, as in the workers (tests/__init__.py)
               "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, str(PROJECT / "tests" / "e2e" / "scripts" / "own_traces_loop.py")],
                              env=env, cwd=work, capture_output=True, text=True, timeout=600)
    finally:
        service.close()
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"loop": True, "release": True, "labels": 6, "demo_imported": []}
    assert (work / "dagster" / "dagster.yaml").exists()  # the runs are recorded for the UI
    assert not (work / "home" / "lake").exists()  # an embedded deployment: every table in own.duckdb
    asked = [r["body"]["query"] for r in service.requests]
    assert len(asked) == 6 and all(r["path"] == "/ok" for r in service.requests)
    with duckdb.connect(str(work / "own.duckdb"), read_only=True) as con:
        assert con.execute("SELECT source_format, count(*) FROM raw_traces GROUP BY 1 ORDER BY 1").fetchall() == [
            ("mapped", 74), ("otlp", 169)]  # MLflow's and Phoenix's 37 each; Langfuse's 37 are OTLP
        by_folder = con.execute("SELECT split_part(r.source_file, '/', 1), count(*) FROM curation_queue q "
                             "JOIN raw_traces r USING (trace_id) GROUP BY 1").fetchall()
        assert {f for f, _ in by_folder} == {"otlp", "mlflow", "phoenix", "langfuse"}, by_folder  # each queued
        assert con.execute("SELECT count(*) FROM quarantine").fetchall() == [(0,)]
        assert con.execute("SELECT count(*) FROM documents").fetchall() == [(0,)]
        queued, texts = con.execute("SELECT count(*), count(DISTINCT lower(trim(input))) "
                                    "FROM curation_queue").fetchall()[0]
        assert queued >= 6 and queued == texts  # one row per text
        languages = con.execute("SELECT count(*) FILTER (language = 'vi'), count(*) FILTER (language = 'en'), "
                                "count(*) FILTER (language_source = 'detected') FROM raw_traces "
                                "WHERE source_file LIKE 'otlp/%'").fetchall()[0]
        assert languages[0] == 27 and languages[1] >= 99 and languages[2] == 132  # truth: 27 vi, 105 en
        runs = con.execute("SELECT rag_app, release_version FROM eval_runs").fetchall()
        assert runs == [(service.url + "/ok", "v0001")]
        errored = con.execute("SELECT count(*) FILTER (errored), count(*) FROM eval_results").fetchall()[0]
        assert errored[0] == 0 and errored[1] >= 6
        answers = con.execute("SELECT DISTINCT input FROM eval_results").fetchall()
        assert sorted(a for (a,) in answers) == sorted(asked)
