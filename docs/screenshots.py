"""Refresh the README's pictures of the Dagster UI (the asset graph, intent_clusters, the
blocked candidate eval's run page) and the workspace (a trace, the dashboard) from the demo's home
(after `make demo`): `.venv/bin/python docs/screenshots.py`. Starts `dagster dev` and
`rag-loop serve` on the demo's settings, screenshots them in Debian's Chromium, stops both."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers.browser import chromium  # noqa: E402

PROJECT = Path(__file__).resolve().parents[1]
DEMO = PROJECT / ".demo"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAG_LOOP_HOME": str(DEMO), "DAGSTER_HOME": str(DEMO / "dagster"),
       "RAG_LOOP_DB": str(DEMO / "rag_loop.duckdb"), "RAG_LOOP_CURATION_DIR": str(DEMO / "curation"),
       "RAG_LOOP_GOLDENS_DIR": str(DEMO / "goldens"), "RAG_LOOP_REPORTS_DIR": str(DEMO / "reports"),
       "RAG_LOOP_TRACES_DIR": str(PROJECT / "data/demo/traces"), "RAG_LOOP_KB_DIR": str(PROJECT / "data/demo/kb"),
       "HF_HUB_OFFLINE": "1", "DEEPEVAL_TELEMETRY_OPT_OUT": "1"}


def _started(command: list[str], url: str) -> subprocess.Popen:
    process = subprocess.Popen(command, cwd=PROJECT, env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(180):
        try:
            urllib.request.urlopen(url, timeout=5)
            return process
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{command[0]} did not answer on {url}")


def _shoot(browser, url: str, shown: str, target: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait
    browser.get(url)
    WebDriverWait(browser, 60).until(lambda b: shown in b.page_source)
    time.sleep(2)  # the UI settles its layout after the data arrives
    browser.save_screenshot(str(PROJECT / "docs" / target))
    print("wrote", target)


def _newest_failed_run(url: str, job: str) -> str | None:
    query = ("{ runsOrError(filter: {pipelineName: " + json.dumps(job) + ", statuses: [FAILURE]}, limit: 1) "
             "{ ... on Runs { results { runId } } } }")
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        runs = json.loads(response.read())["data"]["runsOrError"]["results"]
    return runs[0]["runId"] if runs else None


def main() -> None:
    processes = [_started([str(BIN / "dagster"), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", "3300"],
                          "http://127.0.0.1:3300/server_info"),
                 _started([str(BIN / "rag-loop"), "serve", "--port", "8799"], "http://127.0.0.1:8799/")]
    try:
        with chromium(1440, 900) as browser:
            _shoot(browser, "http://127.0.0.1:3300/asset-groups", "evaluation", "ui-asset-graph.png")
            _shoot(browser, "http://127.0.0.1:3300/assets/intent_clusters", "clusters_vi", "ui-intent-clusters.png")
            blocked = _newest_failed_run("http://127.0.0.1:3300", "regression_eval_job")  # the candidate's eval
            if blocked:
                _shoot(browser, f"http://127.0.0.1:3300/runs/{blocked}", "BLOCKED by its hard gates",
                       "ui-blocked-run.png")
            browser.get("http://127.0.0.1:8799/curator")
            browser.find_element("name", "curator").send_keys("ana\n")
            time.sleep(1)
            first = browser.find_element("css selector", "table a[href^='/trace/']").get_attribute("href")
            _shoot(browser, first, "Expected sources", "workspace-trace.png")
            browser.get("http://127.0.0.1:8799/dashboard")  # the whole page: its four layers and agreement
            browser.set_window_size(1400, browser.execute_script("return document.documentElement.scrollHeight") + 120)
            _shoot(browser, "http://127.0.0.1:8799/dashboard", "Changes per day", "workspace-dashboard.png")
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
