"""A run its hard gates block says why where people look (issue 44): the failed run's error
starts with the reason, the asset's metadata starts with the verdict, the `hard_gates` check's
description names the gates, and `rag-loop eval` prints them with the report and exits 1."""

import types

import pytest
from click.testing import CliRunner
from dagster import DagsterEventType, Definitions, materialize
from dagster_duckdb import DuckDBResource

from rag_loop_dagster import jobs_cli
from rag_loop_dagster.assets.evaluation import regression_eval, regression_eval_job
from rag_loop_dagster.assets.resources import OfflineJudgeResource, PythonRagAppResource, RagLoopPaths
from tests.helpers import DEMO_APP, fake_embedder

# a floor no run reaches: the release is blocked on the whole run, whatever the app answers
UNREACHABLE = {"metric": "Correctness [GEval]", "min_mean": 1.5}
REASON = "BLOCKED by its hard gates: Correctness [GEval] on the whole run: mean "


@pytest.fixture
def evaluation(small_release, tmp_path):
    goldens_dir, con = small_release
    con.close()
    resources = {"duckdb": DuckDBResource(database=str(tmp_path / "eval.duckdb")),
                 "paths": RagLoopPaths(goldens_dir=str(goldens_dir), reports_dir=str(tmp_path / "reports"),
                                       curation_dir=str(tmp_path / "curation")),
                 "rag_app": PythonRagAppResource(import_path=DEMO_APP["rag_app"], config=DEMO_APP["rag_config"]),
                 "judge": OfflineJudgeResource(), "embedder": fake_embedder()}
    return resources, tmp_path


def _config(*gates):
    return {"ops": {"regression_eval": {"config": {"gates": list(gates), "monitoring_only": []}}}}


def test_the_failed_runs_error_starts_with_the_blocking_gates(evaluation):
    resources, tmp_path = evaluation
    result = materialize([regression_eval], resources=resources, raise_on_error=False,
                         run_config=_config(UNREACHABLE))
    assert not result.success
    (failure,) = result.get_step_failure_events()
    data = failure.step_failure_data
    assert data.error.message.startswith(f"dagster._core.definitions.events.Failure: {REASON}")
    assert data.user_failure_data.description.startswith(REASON)  # what the run's page shows first
    assert "report" in data.user_failure_data.metadata
    (materialization,) = result.asset_materializations_for_node("regression_eval")[:1]
    first_key, first = next(iter(materialization.metadata.items()))
    assert first_key == "verdict" and first.value.startswith(REASON)
    hard = next(c for c in result.get_asset_check_evaluations() if c.check_name == "hard_gates")
    assert not hard.passed and hard.description.startswith(REASON)
    assert [f["metric"] for f in hard.metadata["failed_gates"].value] == ["Correctness [GEval]"]
    # everything is recorded before the step fails: the part tables' row counts too
    materialized = {e.asset_key.to_user_string() for e in result.all_events
                    if e.event_type == DagsterEventType.ASSET_MATERIALIZATION}
    assert {"regression_eval", "eval_runs", "eval_results", "eval_summary"} <= materialized


def test_a_passing_run_says_so_first(evaluation):
    resources, _ = evaluation
    result = materialize([regression_eval], resources=resources, run_config=_config(
        {"metric": "Correctness [GEval]", "min_mean": 0.0}))
    metadata = result.asset_materializations_for_node("regression_eval")[0].metadata
    assert next(iter(metadata)) == "verdict" and metadata["verdict"].value == "passes its hard gates"
    hard = next(c for c in result.get_asset_check_evaluations() if c.check_name == "hard_gates")
    assert hard.passed and hard.description == "passes its hard gates"


@pytest.fixture
def eval_definitions(evaluation, monkeypatch):
    """`rag-loop eval` on the definitions of `evaluation`, in an instance of its own."""
    resources, tmp_path = evaluation
    defs = Definitions(assets=[regression_eval], jobs=[regression_eval_job], resources=resources)
    monkeypatch.setitem(__import__("sys").modules, "rag_loop_dagster.definitions", types.SimpleNamespace(defs=defs))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    return tmp_path


def test_rag_loop_eval_prints_the_verdict_the_failed_gates_and_the_report_and_exits_1(eval_definitions, tmp_path):
    config = tmp_path / "eval.yaml"
    config.write_text("ops:\n  regression_eval:\n    config:\n      monitoring_only: []\n      gates:\n"
                      "        - {metric: 'Correctness [GEval]', min_mean: 1.5}\n"
                      "        - {metric: Faithfulness, min_mean: 1.5, blocking: false}\n")
    log = tmp_path / "eval.log"
    result = CliRunner().invoke(jobs_cli.main, ["eval", "--mode", "live", "-c", str(config), "--log", str(log)])
    lines = result.output.splitlines()
    assert result.exit_code == 1 and result.exception.code == 1, (result.output, result.exception)
    assert lines[0].startswith("regression_eval_job: FAILURE (run ")
    assert lines[1].startswith(f"  verdict: {REASON}")
    assert "  hard_gates on regression_eval failed (ERROR, blocking):" in lines
    assert any(line.startswith("    - Correctness [GEval] on the whole run (n=2): mean ") for line in lines)
    assert "  monitoring_gates on regression_eval failed (WARN):" in lines
    assert any(line.startswith("    - Faithfulness on the whole run (n=2): mean ") for line in lines)
    (report,) = [line for line in lines if line.startswith("  report: ")]
    assert report.endswith(".html") and (tmp_path / "reports").is_dir()
    assert len(lines) == 7 and "DEBUG" not in result.output  # Dagster's event log went to the file
    written = log.read_text()
    assert "RUN_FAILURE" in written and "DEBUG" in written and written.rstrip().endswith(lines[-1])


def test_rag_loop_run_of_a_passing_eval_exits_0_with_its_verdict(eval_definitions, tmp_path):
    config = tmp_path / "eval.yaml"
    config.write_text("ops:\n  regression_eval:\n    config:\n      monitoring_only: []\n      gates:\n"
                      "        - {metric: 'Correctness [GEval]', min_mean: 0.0}\n")
    result = CliRunner().invoke(jobs_cli.main, ["run", "regression_eval_job", "-c", str(config)])
    assert result.exit_code == 0, result.output
    assert "  verdict: passes its hard gates" in result.output.splitlines()



def test_a_run_cut_off_by_its_deadline_fails_its_hard_gates_check_as_eval_runs_says():
    """eval_runs marked such a run blocked while the hard_gates check passed: one list now."""
    import pandas as pd

    from rag_loop.evaluation.judges.base import JudgeUsage
    from rag_loop.evaluation.regression import RegressionReport
    from rag_loop_dagster.assets.evaluation import _gate_check
    cut = {"metric": "run deadline", "blocking": True, "slice": "all", "value": "all", "n": 60,
           "problems": "12/60 cases not scored within 7200 s"}
    report = RegressionReport("eval-1", "v0002", None, pd.DataFrame(), pd.DataFrame(), [], JudgeUsage(), 60, 12,
                              7200.0, [cut])
    check = _gate_check(report, blocking=True)
    assert report.blocked and not check.passed
    assert check.description == "BLOCKED by its hard gates: run deadline on the whole run: 12/60 cases not " \
                                "scored within 7200 s"
    assert _gate_check(report, blocking=False).passed
