"""In a real browser (Debian's Chromium): a curator opens an incident from the workspace's form
with a hostile title and slice, lands on its page, and nothing in it runs: the title, the slice
and the rendered postmortem are text; then closes it from the same page. (The CLI runs in this
process here, through the command line IncidentCommands builds: test_incidents runs it in a
process of its own, as the workspace does.)"""

import subprocess
import time
from types import SimpleNamespace

import duckdb
import pytest

from rag_loop import cli
from rag_loop.workspace import incidents as incidents_module
from rag_loop.workspace.app import create_app
from rag_loop.workspace.incidents import CLI, IncidentCommands
from rag_loop.workspace.store import Workspace
from tests.helpers.browser import CHROMIUM, DRIVER, MISSING
from tests.incidents.world import tiny_world
from tests.workspace.test_browser import Server, _wait

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)]

TITLE = "<script>alert(1)</script> ERR-977 <img src=x onerror=\"alert(2)\">"
SLICE = "tenant=<svg onload=alert(3)>"


def _cli_in_this_process(command, **_):
    """subprocess.run of `python -c <rag-loop> incident …`: the same arguments through click's
    runner (a process costs ~1 CPU-s of imports per form)."""
    from click.testing import CliRunner
    assert command[1:1 + len(CLI)] == list(CLI)
    ran = CliRunner().invoke(cli.main, command[1 + len(CLI):])
    return subprocess.CompletedProcess(command, ran.exit_code, ran.stdout, ran.stderr)


def test_a_curator_opens_and_closes_an_incident_and_hostile_text_stays_text(browser, tmp_path, monkeypatch):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    database = tmp_path / "rag.duckdb"
    with duckdb.connect(str(database)) as con:
        tiny_world(con, tmp_path / "goldens")
    reports, goldens = tmp_path / "reports", tmp_path / "goldens"
    monkeypatch.setattr(incidents_module, "subprocess",  # the module's own name: no other caller's
                        SimpleNamespace(run=_cli_in_this_process, TimeoutExpired=subprocess.TimeoutExpired))
    server = Server(create_app(Workspace(tmp_path / "curation", reports, goldens),
                               incidents=IncidentCommands(reports, goldens, database)))
    try:
        browser.delete_all_cookies()
        browser.get(server.url + "/curator")
        browser.find_element(By.NAME, "curator").send_keys("ana\n")
        _wait(browser, lambda b: b.current_url == server.url + "/")
        browser.get(server.url + "/incidents")
        for name, text in (("from", "2026-11-12"), ("to", "2026-11-13"), ("slices", SLICE), ("title", TITLE)):
            browser.find_element(By.NAME, name).send_keys(text)
        browser.find_element(By.ID, "open").click()
        _wait(browser, lambda b: "/incidents/INC-0001" in b.current_url, 60)  # the CLI ran
        time.sleep(0.3)
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - no script ran
        assert browser.find_element(By.ID, "incident-title").text == f"INC-0001: {TITLE}"
        assert "tenant = <svg onload=alert(3)>" in browser.find_element(By.CSS_SELECTOR, "p.meta").text
        postmortem = browser.find_element(By.ID, "postmortem")
        assert postmortem.find_element(By.TAG_NAME, "h1").text == f"INC-0001: {TITLE}"  # rendered, as text
        assert [h.text for h in postmortem.find_elements(By.TAG_NAME, "h2")][:2] == ["Impact", "Detection"]
        assert browser.find_elements(By.CSS_SELECTOR, "main script, main img, main svg, main iframe") == []
        browser.find_element(By.ID, "actions").send_keys("<b>documented</b> ERR-977")
        browser.find_element(By.ID, "close").click()
        _wait(browser, lambda b: "closed=1" in b.current_url, 60)
        assert browser.find_element(By.ID, "incident-status").text == "closed"
        assert "<b>documented</b> ERR-977" in browser.find_element(By.ID, "postmortem").text
        assert browser.find_elements(By.CSS_SELECTOR, "#postmortem b") == []
        browser.get(server.url + "/incidents")
        assert TITLE in browser.find_element(By.ID, "incidents").text
    finally:
        server.close()
