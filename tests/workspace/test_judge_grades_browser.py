"""Issue 45 in a real browser (Debian's Chromium through chromium-driver and Selenium): a curator
grades the judge's verdicts with the keyboard only, the label job stores the grades, and the judge's
agreement with curators shows in the asset's metadata and on the workspace's dashboard."""

import duckdb
import pytest

from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.helpers.browser import CHROMIUM, DRIVER, MISSING
from tests.workspace.test_browser import Server, _keys, _trace_of, _wait

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)]


def _verdicts(faithful: bool, relevant: bool) -> dict:
    return {"Faithfulness": {"score": 0.9 if faithful else 0.2, "passed": faithful, "reason": "claims checked",
                             "judge_version": "v1"},
            "Answer Relevancy": {"score": 0.8 if relevant else 0.3, "passed": relevant, "reason": "on topic",
                                 "judge_version": "v1"}}


def _queue(folder) -> None:
    rows = [{"trace_id": trace_id, "batch": "b", "priority": "P1", "language": "en", "input": f"leave days? {trace_id}",
             "actual_output": "12 days", "cluster_id": trace_id, "cluster_label": "leave", "cluster_size": 1,
             "suggested_failure_type": "generation", "signals": [], "judge_scores": _verdicts(*verdicts)}
            for trace_id, verdicts in (("t1", (False, True)), ("t2", (True, True)), ("t3", (True, False)))]
    export_for_workspace(rows, {r["trace_id"]: {} for r in rows}, folder / "queue", "b")


def test_a_curator_grades_the_judge_with_the_keyboard_and_the_agreement_shows(browser, db, tmp_path):
    from dagster import materialize
    from dagster_duckdb import DuckDBResource
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from rag_loop_dagster.assets.curation import curated_labels
    from rag_loop_dagster.assets.evaluation import judge_calibration
    from rag_loop_dagster.assets.resources import RagLoopPaths
    curation, reports = tmp_path / "curation", tmp_path / "reports"
    _queue(curation)
    server = Server(create_app(Workspace(curation, reports_dir=reports)))
    try:
        browser.get(server.url + "/")
        _wait(browser, lambda b: b.switch_to.active_element.get_attribute("name") == "curator")
        _keys(browser, "ana", Keys.ENTER)
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#queue tr.row"))
        _keys(browser, Keys.ENTER)  # the first row
        # per trace: Faithfulness, then Answer Relevancy (each grade moves on), then "later"
        for keys in (("n", "y"), ("y", "y"), ("k", "f", "x", "y", "n")):  # t3: back up, grade, clear, grade again
            _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#judge-verdicts tr.verdict.current"))
            shown = _trace_of(browser.current_url)
            _keys(browser, *keys)
            checked = [e.get_attribute("value") for e in browser.find_elements(By.CSS_SELECTOR, "input.grade:checked")]
            assert len(checked) == 2, (shown, checked)
            _keys(browser, "l")
            _wait(browser, lambda b, shown=shown: f"saved={shown}&" in b.current_url)
        db.close()  # the label job writes the database
        paths = RagLoopPaths(curation_dir=str(curation), reports_dir=str(reports))
        result = materialize([curated_labels, judge_calibration], resources={
            "duckdb": DuckDBResource(database=str(tmp_path / "db.duckdb")), "paths": paths},
            run_config={"ops": {"curated_labels": {"config": {"settle_seconds": 0}}}})
        assert result.success
        metadata = {e.asset_key.path[-1]: e.materialization.metadata
                    for e in result.get_asset_materialization_events()}["judge_calibration"]
        assert metadata["n_faithfulness"].value == 3 and metadata["n_answer_relevancy"].value == 3
        assert "Faithfulness" in metadata["agreement_with_curators"].value
        with duckdb.connect(str(tmp_path / "db.duckdb"), read_only=True) as con:
            grades = con.execute("SELECT trace_id, g.metric, g.grade, g.curator_passed FROM (SELECT trace_id, "
                                 "unnest(judge_grades) AS g FROM current_labels) ORDER BY 1, 2").fetchall()
        assert grades == [("t1", "Answer Relevancy", "agree", True), ("t1", "Faithfulness", "disagree", True),
                          ("t2", "Answer Relevancy", "agree", True), ("t2", "Faithfulness", "agree", True),
                          ("t3", "Answer Relevancy", "disagree", True), ("t3", "Faithfulness", "disagree", False)]
        browser.get(server.url + "/dashboard")
        rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#agreement table tr")]
        assert any(r.startswith("Faithfulness v1 all 3 33%") for r in rows), rows  # t2 agreed only
        assert any(r.startswith("Answer Relevancy v1 all 3 67%") for r in rows), rows
    finally:
        server.close()
