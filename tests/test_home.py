"""A deployment of your own never touches the demo's state: one home for everything it writes."""

import os
import subprocess

import duckdb
from click.testing import CliRunner

from rag_loop.cli import main as cli
from rag_loop.home import home
from rag_loop.ingest import ingest_directory
from rag_loop_dagster.assets.resources import build_resources
from tests.helpers import PROJECT, trace_line

PARTS = ("RAG_LOOP_DB", "RAG_LOOP_CURATION_DIR", "RAG_LOOP_GOLDENS_DIR", "RAG_LOOP_REPORTS_DIR", "DAGSTER_HOME")


def test_everything_a_deployment_writes_is_beneath_its_home_and_each_part_can_move(tmp_path):
    mine = home({"RAG_LOOP_HOME": str(tmp_path)})
    assert [mine.database, mine.curation_dir, mine.goldens_dir, mine.reports_dir, mine.dagster_home] == [
        tmp_path / "rag_loop.duckdb", tmp_path / "curation", tmp_path / "goldens", tmp_path / "reports",
        tmp_path / "dagster"]
    moved = home({"RAG_LOOP_HOME": str(tmp_path), "RAG_LOOP_DB": "/elsewhere/x.duckdb"})
    assert str(moved.database) == "/elsewhere/x.duckdb" and moved.goldens_dir == tmp_path / "goldens"
    assert home({}).root == PROJECT / ".rag-loop"  # never the demo's .demo/ nor data/


def test_the_resources_of_a_deployment_live_in_its_home(tmp_path, monkeypatch):
    for name in PARTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAG_LOOP_HOME", str(tmp_path))
    resources = build_resources()
    paths = resources["paths"]
    written = [resources["duckdb"].database, paths.curation_dir, paths.goldens_dir, paths.reports_dir]
    assert all(str(p).startswith(str(tmp_path)) for p in written), written


def test_make_run_refuses_the_demos_home_and_the_demo_keeps_to_its_own():
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    # -o: the venv's install stamp is taken as up to date, so a pyproject.toml newer than it does
    # not reinstall the venv (pip, Numba's cache: half a minute) in the middle of a test run
    stamp = ["-o", ".venv/.installed"]
    refused = subprocess.run(["make", "-s", *stamp, "run"], cwd=PROJECT, capture_output=True, text=True, timeout=300,
                             env={**env, "RAG_LOOP_TRACES_DIR": "/nowhere", "RAG_LOOP_HOME": str(PROJECT / ".demo")})
    assert refused.returncode == 2 and "the demo's" in refused.stdout + refused.stderr
    demo = subprocess.run(["make", "-n", *stamp, "demo"], cwd=PROJECT, capture_output=True, text=True, timeout=60,
                          env={**env, "RAG_LOOP_HOME": "/my/home", "RAG_LOOP_DB": "/my/db.duckdb"}).stdout
    runs = [line for line in demo.splitlines() if "rag-loop run" in line or "rag-loop demo" in line]
    assert runs and all(f'RAG_LOOP_HOME="{PROJECT}/.demo"' in line and "/my/" not in line for line in runs)


def test_the_summary_shows_a_failed_check_and_next_steps_that_work_when_pasted(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    (traces / "t.jsonl").write_text(trace_line("a") + "\n" + trace_line("b") + "\n{not json\n")
    database = tmp_path / "own" / "rag_loop.duckdb"
    database.parent.mkdir()
    with duckdb.connect(str(database)) as con:
        ingest_directory(con, traces)
    printed = CliRunner().invoke(cli, ["summary", "--next-steps"], env={"RAG_LOOP_HOME": str(tmp_path / "own")})
    assert printed.exit_code == 0, printed.output
    assert "Check raw_traces_quarantine_rate: ERROR: 1 of 3 records quarantined (33.3%" in printed.output
    serve = printed.output.index(f"RAG_LOOP_HOME={tmp_path / 'own'} .venv/bin/rag-loop serve")
    assert serve < printed.output.index(f"RAG_LOOP_HOME={tmp_path / 'own'} .venv/bin/rag-loop label")  # serve first
    assert f"RAG_LOOP_HOME={tmp_path / 'own'} .venv/bin/rag-loop release --notes" in printed.output
    assert ".venv/bin/rag-loop eval --release latest" in printed.output
