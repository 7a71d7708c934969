"""Debian's Chromium driven by Selenium through Debian's chromium-driver (.ci/run installs both)."""

import atexit
import shutil
from contextlib import contextmanager

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
MISSING = "Debian's chromium and chromium-driver are installed by .ci/run"


@contextmanager
def chromium(width: int = 1400, height: int = 1000):
    """A headless Chromium session, closed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--disable-background-networking", "--disable-component-update", "--disable-sync",
                     "--no-first-run", f"--window-size={width},{height}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


_SHARED: list = []


def shared_chromium():
    """This test process's one headless Chromium, started on first use and quit when the process
    exits: the workspace's browser tests and the webserver's UI test share it (a start and quit
    cost ~0.7 CPU-s). Whoever uses it sets the window size and the cookies it needs."""
    if not _SHARED:
        session = chromium()
        _SHARED.append(session.__enter__())
        atexit.register(session.__exit__, None, None, None)
    return _SHARED[0]
