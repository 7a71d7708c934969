"""Aligning the judge to curators (issue 45): a pass threshold fitted per metric (and language)
from curators' grades, measured on held-out grades only, published as a new judge version."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.curation.labels import store_label_files
from rag_loop.evaluation.alignment import (
    Alignment,
    AlignmentSettings,
    align,
    cross_validate,
    fit_threshold,
    judge_version,
    kappa_at,
    load_alignment,
    store_alignment,
)
from rag_loop.online.judgments import JudgingSettings, OnlineMetric, judge_traces
from rag_loop.online.overlap import judge_shift
from tests.helpers import GOOD, write_labels
from tests.online.world import CHUNK, ScriptedJudge, build_world


def _grades(scores, human, metric="Faithfulness", language="en", version="v1", threshold=0.7) -> pd.DataFrame:
    return pd.DataFrame({"trace_id": [f"t{i}" for i in range(len(scores))], "metric": metric, "language": language,
                         "judge_version": version, "score": scores, "human_passed": human, "threshold": threshold})


def _informative(n: int, seed: int, cut: float = 0.3, noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scores = rng.random(n)
    return scores, (scores + rng.normal(0, noise, n)) >= cut


def test_a_threshold_set_too_high_is_lowered_and_the_gain_shows_on_held_out_grades():
    scores, human = _informative(120, 1)  # curators pass from about 0.3; the judge fails below 0.7
    table, alignment = align(_grades(scores, human), {})
    row = table.set_index("language").loc["all"]
    assert row["adopted"] and row["current_threshold"] == 0.7 and row["fitted_threshold"] == pytest.approx(0.3, abs=0.1)
    assert row["kappa_after"] > row["kappa_before"] + 0.3 and row["gain_low"] > 0
    assert alignment.thresholds == {"Faithfulness": row["fitted_threshold"]} and alignment.source_version == "v1"
    assert not {"kappa_fitted", "in_sample"} & set(table.columns)  # the fit on its own grades is never reported


def test_a_language_with_enough_grades_gets_its_own_threshold():
    en_scores, en_human = _informative(80, 2, cut=0.3)
    vi_scores, vi_human = _informative(80, 3, cut=0.8)
    grades = pd.concat([_grades(en_scores, en_human, language="en", threshold=0.5),
                        _grades(vi_scores, vi_human, language="vi", threshold=0.5)], ignore_index=True)
    few = _grades(*_informative(10, 4), language="th", threshold=0.5)
    table, alignment = align(pd.concat([grades, few], ignore_index=True), {},
                             AlignmentSettings(min_language_grades=40))
    assert alignment.by_language["Faithfulness"]["en"] == pytest.approx(0.3, abs=0.1)
    assert alignment.by_language["Faithfulness"]["vi"] == pytest.approx(0.8, abs=0.1)
    assert "th" not in alignment.by_language["Faithfulness"]
    assert "fewer than the 40" in table.set_index("language").loc["th", "why"]
    assert alignment.threshold("Faithfulness", "vi", 0.5) == alignment.by_language["Faithfulness"]["vi"]
    assert alignment.threshold("Answer Relevancy", "vi", 0.5) == 0.5  # nothing fitted: as configured


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(40, 120), pass_rate=st.floats(0.2, 0.8))
def test_random_grades_give_no_gain_on_average(seed, n, pass_rate):
    """Curators independent of the scores: whatever a threshold fits is noise, and held-out
    grades say so (the fit on its own grades would claim a gain)."""
    rng = np.random.default_rng(seed)
    gains, in_sample = [], []
    for _ in range(30):
        scores, human = rng.random(n), rng.random(n) < pass_rate
        held = cross_validate(scores, human, 0.5, seed=int(rng.integers(1 << 30)))
        if held.gain is not None:
            gains.append(held.gain)
        fitted = fit_threshold(scores, human, 0.5)
        before, after = kappa_at(scores, human, np.array([0.5, fitted]))
        in_sample.append(after - before)
    assert np.mean(gains) < 0.1  # none on held-out grades (a gain's noise here: sd ~0.03)
    assert np.mean(in_sample) > 0  # what reporting the fit on its own grades would have claimed
    table, alignment = align(_grades(scores, human, threshold=0.5), {})
    assert not table["adopted"].any() or table.loc[table["adopted"], "gain_low"].gt(0).all()


def test_no_grades_or_one_verdict_only_adopt_nothing():
    table, alignment = align(_grades([0.2, 0.9] * 20, [True] * 40), {})
    assert not table["adopted"].any() and "one verdict only" in table["why"].iloc[0]
    assert alignment.thresholds == {} and alignment.by_language == {}


def test_an_aligned_judge_is_a_new_version_with_its_thresholds_per_language(tmp_path):
    traces = [{"trace_id": f"t{i}", "original_query": f"How many leave days? ({i})", "answer": "15 days.",
               "chunks": [CHUNK], "citations": [CHUNK["chunk_id"]], "language": language}
              for i, language in enumerate(["en", "en", "vi", "vi"])]
    con = build_world(tmp_path, traces)
    judge = ScriptedJudge(lambda name, case: 0.6)
    metrics = [OnlineMetric("Faithfulness", 0.5)]
    plain = judge_traces(con, judge, JudgingSettings(metrics))
    alignment = Alignment("a1", plain.judge_version, {"Faithfulness": 0.55}, {"Faithfulness": {"vi": 0.7}})
    aligned = judge_traces(con, judge, JudgingSettings(metrics, alignment=alignment))
    assert judge_version(judge) == (plain.judge_id, plain.judge_version) != (aligned.judge_id, aligned.judge_version)
    assert aligned.judged == 4  # the new version judges the selection again, beside the old rows
    verdicts = dict(con.execute("SELECT trace_id, passed FROM trace_judgments WHERE judge_version = ?",
                                [aligned.judge_version]).fetchall())
    assert verdicts == {"t0": True, "t1": True, "t2": False, "t3": False}
    shift = judge_shift(con, aligned.judge_version).iloc[0]  # the change protocol's overlap
    assert shift["n"] == 4 and shift["agreement"] == 0.5


def test_the_alignment_is_stored_and_loaded_by_id_or_as_latest(db, tmp_path):
    rows = []
    scores, human = _informative(60, 5)
    db.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query, language) "
               "SELECT 'g' || i, TIMESTAMPTZ '2026-11-05 10:00:00+00', 'q', 'en' FROM range(60) t(i)")
    for i, (score, passed) in enumerate(zip(scores, human, strict=True)):
        grade = {"metric": "Faithfulness", "judge_version": "v1", "judge_passed": bool(score >= 0.7),
                 "judge_score": float(score), "curator_passed": bool(passed)}
        rows.append({**GOOD, "trace_id": f"g{i}", "judge_grades": [grade]})
    write_labels(tmp_path / "labels", "a.jsonl", rows)
    assert store_label_files(db, tmp_path / "labels").stored == 60
    table, alignment = store_alignment(db, {"Faithfulness": 0.7})
    assert table.set_index("language").loc["all", "adopted"]
    assert load_alignment(db, "latest") == load_alignment(db, alignment.alignment_id) == alignment
    store_alignment(db, {"Faithfulness": 0.7})  # the same grades: the same id, stored once
    assert db.execute("SELECT count(DISTINCT alignment_id), count(*) FROM judge_alignment").fetchall() == [(1, 2)]
    assert load_alignment(db, "") is None
    with pytest.raises(ValueError, match="not in judge_alignment"):
        load_alignment(db, "nope")
