"""Gates never pass on missing data: a drop with no baseline figure is its own verdict."""

import json

import pandas as pd
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from rag_loop.cli import main as cli
from rag_loop.evaluation.gates import Gate, evaluate_gates
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
