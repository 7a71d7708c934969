"""The job commands build the run config a user would otherwise write by hand."""

import pytest
from click.testing import CliRunner

import jobs_cli


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
