"""The workspace in a real browser (Debian's Chromium through chromium-driver and Selenium): a
curator labels with the keyboard only, and hostile production text runs nothing."""

import socket
import threading
import time

import pytest
import uvicorn

from rag_loop.curation.labels import store_label_files
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.helpers import PROJECT, demo_copy
from tests.helpers.browser import CHROMIUM, DRIVER, MISSING
from tests.workspace.test_app import HOSTILE, _hostile_queue

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)]


class Server:
    """The workspace app on a free loopback port, in a thread."""

    def __init__(self, app):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(100):
            if self.server.started:
                break
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _keys(browser, *keys):
    from selenium.webdriver.common.action_chains import ActionChains
    ActionChains(browser).send_keys(*keys).perform()


def _trace_of(url: str) -> str:
    """The trace id of a trace page's URL (after a label: ?saved=… names the one just saved)."""
    return url.rsplit("/trace/", 1)[-1].split("?", 1)[0]


def _replace(browser, text):
    """Select what the focused field holds and type `text` over it."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    ActionChains(browser).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).send_keys(text).perform()


def _wait(browser, condition, seconds=10):
    """Until `condition` holds, looking every 50 ms (WebDriverWait's default, 0.5 s, left the
    core idle for up to half a second a wait)."""
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(browser, seconds, poll_frequency=0.05).until(condition)


def test_a_curator_labels_with_the_keyboard_only(browser, curation, demo_run, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    workspace = Workspace(curation)
    server = Server(create_app(workspace))
    try:
        browser.get(server.url + "/")
        _wait(browser, lambda b: b.switch_to.active_element.get_attribute("name") == "curator")
        _keys(browser, "ana", Keys.ENTER)  # the name field has the focus
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#queue tr.row"))
        _keys(browser, Keys.ENTER)  # open the first row
        _wait(browser, lambda b: b.find_elements(By.ID, "label-form"))
        accepted = _trace_of(browser.current_url)
        _keys(browser, "e", "Fifteen days of paid leave a year.", Keys.TAB)  # to the source search
        for picked, (query, document) in enumerate((("leave policy 2026", "leave-policy@"),
                                                    ("password rotation", "password-policy@")), start=1):
            _replace(browser, query)
            _wait(browser, lambda b, document=document: any(
                e.get_attribute("data-source").startswith(document)
                for e in b.find_elements(By.CSS_SELECTOR, "#source-results .pick-source")[:1]))
            _keys(browser, Keys.ENTER)  # pick the first hit
            _wait(browser, lambda b, picked=picked: len(b.find_elements(By.CSS_SELECTOR,
                                                                          "#chosen-sources input")) == picked)
        chosen = [e.get_attribute("value") for e in browser.find_elements(By.CSS_SELECTOR, "#chosen-sources input")]
        assert len(chosen) == 2 and len(set(chosen)) == 2
        _keys(browser, Keys.ESCAPE, "a")  # leave the search, accept
        _wait(browser, lambda b: _trace_of(b.current_url) != accepted)
        rejected = _trace_of(browser.current_url)
        _keys(browser, "r", "asks two questions at once", Keys.ENTER)
        _wait(browser, lambda b: _trace_of(b.current_url) != rejected)
        later = _trace_of(browser.current_url)
        _keys(browser, "l")
        _wait(browser, lambda b: _trace_of(b.current_url) != later)
        browser.get(server.url + "/?status=later")  # reload: "later" is back
        rows = browser.find_elements(By.CSS_SELECTOR, "#queue tr.row")
        assert len(rows) == 1 and later in rows[0].get_attribute("data-href")
    finally:
        server.close()
    con = demo_copy(demo_run, tmp_path)
    assert store_label_files(con, workspace.labels_dir, settle_seconds=0).stored == 3
    labels = dict(con.execute("SELECT trace_id, decision FROM current_labels WHERE curator = 'ana'").fetchall())
    assert labels == {accepted: "accept", rejected: "reject", later: "later"}
    sources = con.execute("SELECT expected_sources FROM current_labels WHERE trace_id = ?", [accepted]).fetchall()
    assert sources == [(chosen,)]


def test_hostile_text_runs_nothing_and_navigates_nowhere(browser, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    text = " ".join(HOSTILE[:5])
    _hostile_queue(tmp_path, text)
    server = Server(create_app(Workspace(tmp_path)))
    try:
        browser.get(server.url + "/curator")
        browser.find_element(By.NAME, "curator").send_keys("ana\n")
        _wait(browser, lambda b: b.current_url == server.url + "/")
        browser.get(server.url + "/trace/t-hostile")
        time.sleep(0.5)
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018 - no script ran
        assert browser.current_url == server.url + "/trace/t-hostile"
        shown = browser.find_element(By.CSS_SELECTOR, "p.query").text
        assert "<script>alert(1)</script>" in shown and "[U+202E]" in shown  # readable, inert
        assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == []
    finally:
        server.close()


def test_a_report_keeps_its_own_styles_and_runs_no_script(browser, tmp_path):
    from selenium.webdriver.common.by import By
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "release-v0001.html").write_text(  # as rag_loop.reporting writes one: inline style, no file
        "<!doctype html><html><head><title>report</title><style>h1 { color: rgb(1, 2, 3); }</style></head>"
        "<body><h1 id='title'>v0001</h1><script>document.title = 'ran';</script></body></html>")
    server = Server(create_app(Workspace(tmp_path, reports)))
    try:
        browser.get(server.url + "/reports/release-v0001.html")
        assert browser.find_element(By.ID, "title").value_of_css_property("color") == "rgba(1, 2, 3, 1)"
        assert browser.title == "report"  # sandboxed: a script in a report does not run
    finally:
        server.close()


def test_two_curators_label_the_same_cluster_at_once_and_nothing_is_lost(browser, curation, demo_run, tmp_path):
    """Ana and Ben in two tabs of the one Chromium, each signed in on a loopback name of its own
    (cookies are per host: two sessions, as two browsers have; a second Chromium costs seconds)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    workspace = Workspace(curation)
    cluster = workspace.rows({}, "todo", 0, 1)[0][0]["cluster_id"]
    server = Server(create_app(workspace))
    ana_tab = browser.current_window_handle
    browser.switch_to.new_window("tab")
    ben_tab = browser.current_window_handle
    tabs = {ana_tab: ("ana", server.url), ben_tab: ("ben", server.url.replace("127.0.0.1", "localhost"))}
    opened = {}
    try:
        for tab, (name, url) in tabs.items():
            browser.switch_to.window(tab)
            browser.get(url + "/curator")
            browser.find_element(By.NAME, "curator").send_keys(name + "\n")
            _wait(browser, lambda d, url=url: d.current_url == url + "/")
            browser.get(f"{url}/?cluster_id={cluster}")
            _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#queue tr.row a"))  # loaded under load too
            browser.find_element(By.CSS_SELECTOR, "#queue tr.row a").click()  # both open the same row
            _wait(browser, lambda d: d.find_elements(By.ID, "label-form"))
            opened[name] = _trace_of(browser.current_url)
        shared = opened["ana"]
        assert opened["ben"] == shared
        browser.switch_to.window(ana_tab)
        _keys(browser, "l")
        browser.switch_to.window(ben_tab)  # while ana's label may still be on its way
        _keys(browser, "r", "the same question as another row", Keys.ENTER)
        for tab in (ana_tab, ben_tab):
            browser.switch_to.window(tab)
            _wait(browser, lambda d: _trace_of(d.current_url) != shared)
    finally:
        browser.switch_to.window(ben_tab)
        browser.close()
        browser.switch_to.window(ana_tab)
        server.close()
    con = demo_copy(demo_run, tmp_path)
    assert store_label_files(con, workspace.labels_dir, settle_seconds=0).stored == 2
    kept = con.execute("SELECT curator, decision FROM curated_labels WHERE trace_id = ? ORDER BY curator",
                       [shared]).fetchall()
    assert kept == [("ana", "later"), ("ben", "reject")]  # both kept; the newer one is current


def test_the_intents_map_reads_without_hovering(browser, curation, tmp_path):
    """Issue 44: titled panels, the biggest and worst clusters named on the map, a legend (the
    screenshot in test-artifacts/ is the one docs/workspace-intents.png shows)."""
    from selenium.webdriver.common.by import By
    server = Server(create_app(Workspace(curation)))
    try:
        browser.set_window_size(1100, 900)
        browser.get(server.url + "/curator")
        browser.find_element(By.NAME, "curator").send_keys("ana\n")
        _wait(browser, lambda b: b.current_url == server.url + "/")  # signed in before the next page
        browser.get(server.url + "/intents")
        _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "svg.map text.panel-title"))
        titles = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "svg.map text.panel-title")]
        names = [t for t in browser.find_elements(By.CSS_SELECTOR, "svg.map text.cluster-name")]
        assert titles == ["en: " + titles[0].split(": ", 1)[1], "vi: " + titles[1].split(": ", 1)[1]]
        assert all("intent cluster" in t for t in titles)
        assert len(names) >= 6 and all(n.size["width"] > 20 for n in names)  # drawn, not only in a tooltip
        assert "ERR-PAY-977" in " ".join(n.text for n in names)  # the demo's surge is among the worst
        assert "share of traces with a bad signal" in browser.find_element(By.CSS_SELECTOR, "svg.map g.legend").text
        (PROJECT / "test-artifacts").mkdir(exist_ok=True)
        shot = PROJECT / "test-artifacts" / "workspace-intents.png"
        browser.find_element(By.CSS_SELECTOR, "svg.map").screenshot(str(shot))
    finally:
        server.close()
