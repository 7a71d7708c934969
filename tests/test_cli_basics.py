"""The `rag-loop` command's basics: its version, a one-line error for a job that does not
exist (listing the jobs), and the eval command's help naming the service it evaluates."""

from __future__ import annotations

from importlib.metadata import version

from click.testing import CliRunner

from rag_loop_dagster.jobs_cli import main


def test_version():
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output == f"rag-loop, version {version('rag-loop')}\n"


def test_an_unknown_job_is_one_line_naming_the_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    result = CliRunner().invoke(main, ["run", "rag_loop_jbo"])
    assert result.exit_code == 2 and result.exception is not None and "Traceback" not in result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "no job 'rag_loop_jbo'" in error[0]
    assert "rag_loop_job" in error[0] and "regression_eval_job" in error[0] and "__ASSET_JOB" not in error[0]


def test_eval_help_names_the_service_variable():
    assert "RAG_LOOP_RAG_APP_URL" in CliRunner().invoke(main, ["eval", "--help"]).output
