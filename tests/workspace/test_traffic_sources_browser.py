"""In a real browser, on a deployment without a knowledge base: a curator cites a retrieved
id-only chunk with "use as source" and a chunk found by the search (shown as seen in production
traces), and the label stage stores both; with nothing to cite, the search says why."""

import duckdb
import pytest

from rag_loop.curation.exports import export_knowledge
from rag_loop.curation.labels import store_label_files
from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.store.tables import create_tables
from rag_loop.store.traces import retrieval_contexts, trace_details
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.curation.test_traffic_sources import VPN_NEW, _traffic
from tests.helpers.browser import CHROMIUM, DRIVER, MISSING
from tests.workspace.test_browser import Server, _keys, _replace, _wait

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)]


def _queue(con, curation) -> None:
    """A queue of the traffic's id-only trace, as the queue stage exports it."""
    trace_id = "ids-only"
    row = {"trace_id": trace_id, "batch": "b", "priority": "P1", "language": "en", "input": "How many leave days?",
           "actual_output": "15 days.", "cluster_id": "en-0001", "cluster_label": "leave days", "cluster_size": 1,
           "retrieval_context": retrieval_contexts(con, [trace_id])[trace_id], "signals": [],
           "suggested_failure_type": "none", "suggestion_reason": "-", "suggested_origin": "production_sample"}
    export_for_workspace([row], trace_details(con, [trace_id]), curation / "queue", "b")
    export_knowledge(con, curation / "queue")


def test_a_curator_cites_traffic_sources_and_the_label_stage_stores_them(browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    con = _traffic(tmp_path)
    curation = tmp_path / "curation"
    _queue(con, curation)
    workspace = Workspace(curation)
    server = Server(create_app(workspace))
    try:
        browser.get(server.url + "/curator")
        browser.find_element(By.NAME, "curator").send_keys("ana\n")
        _wait(browser, lambda b: b.current_url == server.url + "/")
        browser.get(server.url + "/trace/ids-only")
        browser.find_element(By.CSS_SELECTOR, ".use-source").click()
        browser.find_element(By.ID, "expected_output").send_keys("Fifteen days a year.")
        browser.find_element(By.ID, "source-search").click()
        _replace(browser, "vpn client")
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#source-results .pick-source"))
        hit = browser.find_element(By.CSS_SELECTOR, "#source-results li")
        assert "seen in production traces" in hit.text
        _keys(browser, Keys.ENTER)  # pick the first hit
        _wait(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, "#chosen-sources input")) == 2)
        chosen = [e.get_attribute("value") for e in browser.find_elements(By.CSS_SELECTOR, "#chosen-sources input")]
        assert chosen == ["IT-001", VPN_NEW["chunk_id"]]
        _keys(browser, Keys.ESCAPE, "a")
        _wait(browser, lambda b: "saved=ids-only" in b.current_url)
        empty = duckdb.connect()
        create_tables(empty)
        export_knowledge(empty, curation / "queue")
        browser.get(server.url + "/trace/ids-only")
        browser.find_element(By.ID, "source-search").click()
        _replace(browser, "vpn")
        _wait(browser, lambda b: "no knowledge base and no retrieved chunks yet" in
              b.find_element(By.ID, "source-results").text)
    finally:
        server.close()
    report = store_label_files(con, workspace.labels_dir, settle_seconds=0)
    assert (report.stored, report.rejected) == (1, 0)
    stored = con.execute("SELECT expected_sources FROM current_labels WHERE trace_id = 'ids-only'").fetchall()
    assert stored == [(["IT-001", VPN_NEW["chunk_id"]],)]
