"""The job commands build the run config a user would otherwise write by hand, and record the
process that runs them."""

import shutil
import subprocess
import sys
import types

import pytest
from click.testing import CliRunner
from dagster import DagsterInstance, DagsterRunStatus, job, op
from dagster._core.test_utils import create_run_for_test

from rag_loop_dagster import jobs_cli
from rag_loop_dagster.assets.run_liveness import HOST_TAG, PID_TAG, START_TAG, RagLoopRunLauncher, process_tags


@pytest.fixture
def launched(monkeypatch):
    calls = []
    monkeypatch.setattr(jobs_cli, "run_job", lambda job, config=None, partition_range=None:
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


def test_a_run_records_its_process_and_first_ends_the_runs_whose_process_died(monkeypatch, tmp_path, capsys):
    """Issue 43: a run killed mid-run held the instance's one run slot forever."""
    @op
    def nothing():
        pass

    @job
    def tiny_job():
        nothing()

    monkeypatch.setitem(sys.modules, "rag_loop_dagster.definitions", types.SimpleNamespace(
        defs=types.SimpleNamespace(resolve_job_def=lambda name: tiny_job)))
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
