"""The job commands build the run config a user would otherwise write by hand, and record the
process that runs them."""

import os
import shutil
import subprocess
import sys
import types

import pytest
from click.testing import CliRunner
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    MaterializeResult,
    asset,
    define_asset_job,
    job,
    op,
)
from dagster._core.test_utils import create_run_for_test

from rag_loop_dagster import jobs_cli
from rag_loop_dagster.assets.run_liveness import HOST_TAG, PID_TAG, START_TAG, RagLoopRunLauncher, process_tags


@pytest.fixture
def launched(monkeypatch):
    calls = []
    monkeypatch.setattr(jobs_cli, "run_job", lambda job, config=None, partition_range=None, log_file=None:
                        calls.append((job, config, partition_range)) or True)
    return calls


def test_release_and_eval_set_their_options_on_top_of_a_config_file(launched, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("ops:\n  golden_release:\n    config: {notes: old, redaction: {}}\n")
    runner = CliRunner()
    assert runner.invoke(jobs_cli.main, ["release", "--notes", "June", "--by", "ana", "-c", str(config),
                                         "--settle-seconds", "0"]).exit_code == 0
    assert runner.invoke(jobs_cli.main, ["eval", "--release", "v0002", "--mode", "replay"]).exit_code == 0
    (release, release_config, _), (evaluation, eval_config, _) = launched
    assert release == "release_goldens" and release_config["ops"]["golden_release"]["config"] == {
        "notes": "June", "redaction": {}, "released_by": "ana"}
    assert release_config["ops"]["curated_labels"]["config"] == {"settle_seconds": 0.0}
    assert evaluation == "regression_eval_job"
    assert eval_config == {"ops": {"regression_eval": {"config": {"release": "v0002", "mode": "replay"}}}}


def test_run_passes_a_partition_range_and_refuses_a_malformed_one(launched):
    runner = CliRunner()
    assert runner.invoke(jobs_cli.main, ["run", "drift_job", "--partition-range",
                                         "2026-11-01...2026-11-14"]).exit_code == 0
    assert launched == [("drift_job", {}, "2026-11-01...2026-11-14")]


def test_a_malformed_range_is_refused_before_anything_runs(monkeypatch):
    monkeypatch.setattr(jobs_cli, "instance_home", lambda: pytest.fail("nothing may run"))
    result = CliRunner().invoke(jobs_cli.main, ["run", "drift_job", "--partition-range", "2026-11-01"])
    assert result.exit_code != 0 and "FIRST...LAST" in result.output


@op
def nothing():
    print("what a library prints")  # noqa: T201
    os.system("echo what a child process prints")  # noqa: S605


@job
def tiny_job():
    nothing()


@op
def broken():
    raise ValueError("the knowledge base folder is empty\nsecond line")


@job
def broken_job():
    broken()


@asset(check_specs=[AssetCheckSpec("fresh", asset="checked"), AssetCheckSpec("complete", asset="checked")])
def checked():
    return MaterializeResult(check_results=[
        AssetCheckResult(check_name="fresh", passed=False, severity=AssetCheckSeverity.WARN, description="stale"),
        AssetCheckResult(check_name="complete", passed=False, severity=AssetCheckSeverity.ERROR)])


def _tiny_definitions(monkeypatch):
    checked_job = Definitions(assets=[checked], jobs=[define_asset_job("checked_job", [checked])]
                              ).resolve_job_def("checked_job")
    jobs = {"tiny_job": tiny_job, "broken_job": broken_job, "checked_job": checked_job}
    monkeypatch.setitem(sys.modules, "rag_loop_dagster.definitions", types.SimpleNamespace(
        defs=types.SimpleNamespace(resolve_job_def=jobs.__getitem__, resolve_all_job_defs=jobs.values)))


def test_a_run_with_a_log_prints_one_line_and_writes_the_rest_to_the_log(monkeypatch, tmp_path, capfd):
    """Issue 44: `make demo` printed ~940 lines of Dagster DEBUG before its summary."""
    _tiny_definitions(monkeypatch)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    log = tmp_path / "home" / "demo.log"
    for name in ("tiny_job", "tiny_job"):
        result = CliRunner().invoke(jobs_cli.main, ["run", name, "--log", str(log)])
        assert result.exit_code == 0, result.output
        (line,) = result.output.splitlines()  # one line per run, nothing else
        assert line.startswith("tiny_job: SUCCESS (run ")
    terminal = capfd.readouterr()
    assert "DEBUG" not in terminal.out + terminal.err and "child process" not in terminal.out + terminal.err
    written = log.read_text()
    assert written.count("RUN_SUCCESS") == 2 and written.count("tiny_job: SUCCESS (run ") == 2  # appended
    assert "what a library prints" in written and "what a child process prints" in written
    failed = CliRunner().invoke(jobs_cli.main, ["run", "broken_job", "--log", str(log)])
    assert failed.exit_code == 1
    assert failed.output.splitlines() == [failed.output.splitlines()[0],
                                          "  broken failed: ValueError: the knowledge base folder is empty"]
    assert failed.output.startswith("broken_job: FAILURE (run ") and "Traceback" not in failed.output
    checks = CliRunner().invoke(jobs_cli.main, ["run", "checked_job", "--log", str(log)])
    assert checks.output.splitlines()[1:] == ["  checks that failed: complete (ERROR); fresh (WARN)"]


def test_a_run_records_its_process_and_first_ends_the_runs_whose_process_died(monkeypatch, tmp_path, capsys):
    """Issue 43: a run killed mid-run held the instance's one run slot forever."""
    _tiny_definitions(monkeypatch)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    shutil.copy(jobs_cli.INSTANCE_SETTINGS, tmp_path / "dagster.yaml")
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tags = process_tags(killed.pid)
    killed.kill()
    killed.wait()
    with DagsterInstance.from_config(str(tmp_path)) as instance:  # deploy/dagster.yaml as the daemon reads it
        assert isinstance(instance.run_launcher, RagLoopRunLauncher) and instance.run_monitoring_enabled
        dead = create_run_for_test(instance, job_name="release_goldens", status=DagsterRunStatus.STARTED, tags=tags)

    assert jobs_cli.run_job("tiny_job")
    said = capsys.readouterr()
    assert f"Ended run {dead.run_id} (release_goldens, STARTED): process {killed.pid} on host" in said.err
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
        (run,) = [r for r in instance.get_runs() if r.job_name == "tiny_job"]
        assert run.status == DagsterRunStatus.SUCCESS and f"(run {run.run_id})" in said.out
        mine, keys = process_tags(), (HOST_TAG, PID_TAG, START_TAG)
        assert {k: run.tags[k] for k in keys} == {k: mine[k] for k in keys}


def test_rag_loop_release_refuses_an_empty_releaser_before_running_anything(tmp_path):
    """`--by "$USER"` where USER is unset gives an empty name: refused, no run started."""
    refused = CliRunner().invoke(jobs_cli.main, ["release", "--notes", "June refresh", "--by", ""],
                                 env={"RAG_LOOP_HOME": str(tmp_path)})
    assert refused.exit_code == 2 and "say who releases" in refused.output
    assert not (tmp_path / "dagster").exists()  # no instance set up, no run recorded
