"""`rag-loop eval --alignment / --few-shot / --baseline-run`: set on top of a config file, as
`--release` and `--mode` are, so that a judge version is chosen without writing run config."""

import pytest
from click.testing import CliRunner

from rag_loop_dagster import jobs_cli


@pytest.fixture
def launched(monkeypatch):
    calls = []
    monkeypatch.setattr(jobs_cli, "run_job", lambda job, config=None, partition_range=None, log_file=None:
                        calls.append((job, config)) or True)
    return calls


def _eval_config(launched) -> dict:
    (job, config), = launched
    assert job == "regression_eval_job"
    return config["ops"]["regression_eval"]["config"]


def test_the_judge_version_options_reach_the_eval_config(launched):
    result = CliRunner().invoke(jobs_cli.main, ["eval", "--alignment", "latest", "--few-shot", "fs-1a2b",
                                                "--baseline-run", "eval-20261201"])
    assert result.exit_code == 0, result.output
    assert _eval_config(launched) == {"release": "latest", "alignment": "latest", "few_shot": "fs-1a2b",
                                      "baseline_run": "eval-20261201"}


def test_the_options_override_the_config_file_and_none_turns_one_off(launched, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("ops:\n  regression_eval:\n    config:\n      alignment: al-1\n      few_shot: fs-1\n"
                      "      concurrency: 4\n")
    result = CliRunner().invoke(jobs_cli.main, ["eval", "-c", str(config), "--alignment", "none",
                                                "--few-shot", "latest"])
    assert result.exit_code == 0, result.output
    assert _eval_config(launched) == {"alignment": "", "few_shot": "latest", "concurrency": 4, "release": "latest"}


def test_without_the_options_the_config_file_decides(launched, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("ops:\n  regression_eval:\n    config:\n      alignment: al-1\n")
    assert CliRunner().invoke(jobs_cli.main, ["eval", "-c", str(config)]).exit_code == 0
    assert _eval_config(launched) == {"alignment": "al-1", "release": "latest"}


def test_the_help_says_what_each_option_takes():
    text = CliRunner().invoke(jobs_cli.main, ["eval", "--help"], terminal_width=200).output
    for option in ("--alignment ID|latest|none", "--few-shot ID|latest|none", "--baseline-run RUN_ID"):
        assert option in text
    assert "judge_alignment" in text and "judge_few_shot" in text and "same judge version" in text
