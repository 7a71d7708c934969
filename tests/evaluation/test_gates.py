"""Gates never pass on missing data: a drop with no baseline figure is its own verdict."""

import json

import duckdb
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rag_loop.cli import main as cli
from rag_loop.evaluation.gates import SLICES, Gate, evaluate_gates, summarize
from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.evaluation.regression import run_regression
from rag_loop.evaluation.settings import EvalSettings
from rag_loop.reporting.reports import eval_report
from rag_loop.store.tables import create_tables

METRIC = "Correctness [GEval]"


def _table(deltas: list[float | None]) -> pd.DataFrame:
    rows = [{"metric": METRIC, "slice": "all", "slice_value": "all", "n": 50, "errored": 0,
             "mean": 0.8, "pass_rate": 0.8, "delta_pass_rate": 0.0}]
    rows += [{"metric": METRIC, "slice": "language", "slice_value": f"v{i}", "n": 5, "errored": 0,
              "mean": 0.8, "pass_rate": 0.8, "delta_pass_rate": float("nan") if d is None else d}
             for i, d in enumerate(deltas)]
    return pd.DataFrame(rows)


@given(st.lists(st.one_of(st.none(), st.floats(-1, 1)), min_size=1, max_size=6))
def test_a_drop_gate_never_passes_a_slice_it_could_not_compare(deltas):
    table = _table(deltas)
    missing = {f"v{i}" for i, d in enumerate(deltas) if d is None}
    dropped = {f"v{i}" for i, d in enumerate(deltas) if d is not None and d < -0.1}
    (warn,) = evaluate_gates(table, [Gate(METRIC, max_drop=0.1, slices=("all", "language"))])
    assert {u["value"] for u in warn.not_evaluated} == missing
    assert {f["value"] for f in warn.failures} == dropped and warn.passed == (not dropped)
    (block,) = evaluate_gates(table, [Gate(METRIC, max_drop=0.1, slices=("all", "language"),
                                           without_baseline="block")])
    assert {f["value"] for f in block.failures} == dropped | missing
    assert block.passed == (not dropped and not missing)


def test_a_first_run_says_its_drop_gates_were_not_evaluated(small_release, tmp_path):
    goldens_dir, con = small_release
    create_tables(con)  # replay: the traces are missing, so the cases are errored; fine here
    report = run_regression(con, goldens_dir, OfflineJudge(), EvalSettings(mode="replay", max_error_rate=1.0))
    assert report.baseline_run_id is None
    unevaluated = {(o.gate.metric, u["slice"]) for o in report.gates for u in o.not_evaluated}
    assert (METRIC, "all") in unevaluated and ("Answer Relevancy", "all") in unevaluated
    stored = json.loads(con.execute("SELECT gates_not_evaluated FROM eval_runs").fetchall()[0][0])
    assert {(u["metric"], u["slice"]) for u in stored} == unevaluated
    page = eval_report(con, report.run_id, tmp_path / "reports").read_text()
    assert "gate checks not evaluated" in page and "no baseline run: flips not computed" in page
    con.close()
    printed = CliRunner().invoke(cli, ["summary", "--db", str(goldens_dir.parent / "eval.duckdb")])
    assert printed.exit_code == 0, printed.output
    assert "no baseline run: flips and drops not evaluated" in printed.output
    assert "gate checks not evaluated (no baseline figure)" in printed.output


def _summary_per_group(results: pd.DataFrame, severe_below: float) -> pd.DataFrame:
    """The plain computation `summarize` vectorised (a pandas Series per group), the reference."""
    rows = []
    for dimension in SLICES:
        if dimension == "all":
            keyed = results.assign(slice_value="all")
        elif dimension == "tag":
            keyed = results.explode("tags").dropna(subset=["tags"])
            keyed = keyed.assign(slice_value=keyed["tags"].astype(str))
        else:
            keyed = results.assign(slice_value=results[dimension].fillna("(none)").astype(str))
        for (metric, value), group in keyed.groupby(["metric", "slice_value"], sort=True):
            scores = group.loc[~group["errored"], "score"].astype(float)
            gated = group.loc[~group["errored"], "passed"].dropna().astype(float)
            rows.append({"metric": metric, "slice": dimension, "slice_value": value, "n": len(group),
                         "errored": group["errored"].sum(), "mean": scores.mean(), "median": scores.median(),
                         "pass_rate": gated.mean() if len(gated) else np.nan, "p10": scores.quantile(0.1),
                         "severe": (scores < severe_below).sum()})
    order = {d: i for i, d in enumerate(SLICES)}
    table = pd.DataFrame(rows).sort_values(["slice", "metric", "slice_value"], key=lambda c: c.map(order)
                                           if c.name == "slice" else c, kind="stable")
    return table.astype({c: float for c in ("n", "errored", "severe")}).reset_index(drop=True)


@pytest.mark.parametrize("tagged", [True, False])
def test_the_summary_is_the_per_group_computation(tagged):
    """On drawn results (errored cases, cases without a score or a verdict, ungraded metrics,
    missing slice values, several or no tags; a run without any tag), as stored and read back."""
    rng = np.random.default_rng(44)
    n = 300
    errored = rng.random(n) < 0.1
    # an errored case's score and verdict, when it has one, must not count
    score = np.where(rng.random(n) < 0.05, np.nan, rng.choice([0.0, 0.2, 0.5, 1.0, 0.73], n))
    passed = np.where(rng.random(n) < 0.15, None, rng.random(n) < 0.7)
    tags = [[], None, ["a"], ["a", "b"], ["c", "b", "a"]]
    with duckdb.connect() as con:  # the dtypes eval_results gives back
        con.register("drawn", pd.DataFrame({
            "metric": rng.choice(["Faithfulness", "Correctness [GEval]", "Vibe"], n), "score": score,
            "passed": passed, "errored": errored, "language": rng.choice(["en", "vi", None], n),
            "query_type": rng.choice(["policy", "howto"], n), "origin": "manual",
            "failure_type": rng.choice(["none", "wrong_doc"], n),
            "tags": [tags[i] if tagged else None for i in rng.integers(0, len(tags), n)]}))
        results = con.execute("SELECT metric, score, passed::BOOLEAN AS passed, errored, language, query_type, "
                              "origin, failure_type, tags::VARCHAR[] AS tags FROM drawn").df()
    pd.testing.assert_frame_equal(summarize(results, 0.3), _summary_per_group(results, 0.3),
                                  check_exact=False, rtol=1e-12)
