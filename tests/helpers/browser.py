"""Debian's Chromium driven by Selenium through Debian's chromium-driver (.ci/run installs both)."""

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
