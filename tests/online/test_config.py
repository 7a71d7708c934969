"""The online judging config as a user writes it in the launchpad: referenceless metrics with
their rates, and GEval criteria without a reference."""

import pytest

from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from rag_loop_dagster.assets.online import JudgingConfig, OnlineQualityConfig
from tests.online.test_judgments import _traces
from tests.online.world import ScriptedJudge, build_world


def test_metrics_and_geval_criteria_become_online_metrics_with_their_rates():
    config = JudgingConfig(metrics=[{"name": "Faithfulness", "threshold": 0.8, "rate": 0.1}],
                           geval=[{"name": "Politeness", "criteria": "Is the answer polite?", "rate": 0.5}])
    faithfulness, politeness = config.settings().metrics
    assert (faithfulness.name, faithfulness.threshold, faithfulness.rate) == ("Faithfulness", 0.8, 0.1)
    assert politeness.name == "Politeness [GEval]" and politeness.rate == 0.5
    assert politeness.geval["criteria"] == "Is the answer polite?" and "rate" not in politeness.geval
    assert politeness.needs() == ("input", "answer")


def test_a_criterion_that_needs_a_reference_is_unjudgeable_online_and_one_the_judge_lacks_too(tmp_path):
    con = build_world(tmp_path, _traces(2))
    metrics = [OnlineMetric("Correct [GEval]", 0.5, geval={"name": "Correct", "criteria": "c",
                                                            "evaluation_params": ["input", "expected_output"]}),
               OnlineMetric("Polite [GEval]", 0.5, geval={"name": "Polite", "criteria": "p"})]
    judge_traces(con, ScriptedJudge(lambda n, c: 1.0), JudgingSettings(metrics))
    reasons = dict(con.execute("SELECT metric, any_value(reason) FROM trace_judgments GROUP BY 1").fetchall())
    assert reasons["Correct [GEval]"] == "unjudgeable: needs an expected output (production has none)"
    assert reasons["Polite [GEval]"] == "unjudgeable: this judge has no such metric"  # the scripted judge builds none


def test_the_slo_estimator_is_checked():
    with pytest.raises(ValueError, match="slo_estimator"):
        OnlineQualityConfig(slo_estimator="naive").settings()
