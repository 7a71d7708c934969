"""The dashboard in a real browser (Debian's Chromium through chromium-driver and Selenium):
its SVG charts render, and no request leaves the host. Saves its screenshot under
test-artifacts/ (the docs' picture of the demo's dashboard comes from docs/screenshots.py)."""

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.helpers.browser import CHROMIUM, DRIVER, MISSING
from tests.workspace.test_browser import Server
from tests.workspace.test_dashboard_page import Release

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)]
PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = PROJECT / "test-artifacts"


def test_dashboard_charts_render_and_nothing_leaves_the_host(browser, figures):
    from selenium.webdriver.common.by import By
    folder = figures  # the session's dashboard.json (tests/workspace/conftest.py)
    server = Server(create_app(Workspace(folder / "curation", folder / "reports"), release=Release()))
    try:
        browser.get(server.url + "/dashboard")
        charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert len(charts) >= 7
        for chart in charts:  # laid out, and drawn: marks inside, not an empty box
            box = browser.execute_script("const r = arguments[0].getBoundingClientRect(); "
                                         "return [r.width, r.height];", chart)
            assert box[0] > 300 and box[1] > 40, box
            assert chart.find_elements(By.CSS_SELECTOR, "circle, rect, polyline, polygon")
        shapes = browser.execute_script(
            "return document.querySelectorAll('svg.chart circle, svg.chart polyline').length")
        assert shapes > 20
        # every resource the page loaded came from the workspace itself
        loaded = browser.execute_script(
            "return performance.getEntries().map(e => e.name).filter(n => n.startsWith('http'))")
        assert loaded and {urlsplit(u).netloc for u in loaded} == {urlsplit(server.url).netloc}, loaded
        fetched = browser.execute_script(
            "return [...document.querySelectorAll('[src], link[href], image, use')]"
            ".map(e => e.src || e.href?.baseVal || e.href || e.getAttribute('href'))")
        assert all(urlsplit(u).netloc in ("", urlsplit(server.url).netloc) for u in fetched), fetched
        assert not browser.execute_script("return document.querySelector('img, script:not([src])')")
        title = browser.find_element(By.CSS_SELECTOR, "#change svg.chart title").get_attribute("textContent")
        assert title == "Changes per day"
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.set_window_size(1400, height + 120)
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "workspace-dashboard.png"))
    finally:
        server.close()
