"""End to end as users meet it: `dagster dev` (webserver + daemon) on loopback, the main job
launched through GraphQL, a curator labelling and releasing from the workspace while the loop
runs, and headless Chromium screenshots of the UI. The loop is launched behind a `rag-loop run`
killed with SIGKILL, which the daemon's run monitoring ends so that the loop goes through
(issue 43).

Screenshots are saved under `test-artifacts/` (git-ignored). Chromium and chromium-driver are
Debian's packages, installed by `.ci/run`.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest
import yaml
from dagster import DagsterInstance

from rag_loop.demo.curator import curate
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from rag_loop_dagster.releasing import WebserverRelease, graphql_client
from tests.helpers import PROJECT, demo_config
from tests.helpers.browser import CHROMIUM, DRIVER, MISSING, shared_chromium
from tests.helpers.ramdisk import in_memory
from tests.workspace.conftest import Curator, csrf_of

FINISHED = ("SUCCESS", "FAILURE", "CANCELED")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ARTIFACTS = PROJECT / "test-artifacts"
BIN = Path(sys.executable).parent  # the venv's commands, whatever PATH says


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Dagster:
    """The webserver's GraphQL API: runs launched with dagster-graphql's client (as the
    workspace launches its release), the test's own queries posted as they are."""

    def __init__(self, url: str):
        self.url = url
        self.client = graphql_client(url)

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(f"{self.url}/graphql", method="POST",
                                         data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        assert not body.get("errors"), body["errors"]
        return body["data"]

    def launch(self, job: str, run_config: dict | None = None) -> str:
        return self.client.submit_job_execution(job, run_config=run_config or {})

    def run(self, run_id: str) -> dict:
        return self.graphql("query($id: ID!) { runOrError(runId: $id) { ... on Run { status "
                            "startTime endTime tags { key value } } } }", {"id": run_id})["runOrError"]

    def wait(self, run_id: str, timeout: float = 600) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            status = self.run(run_id)["status"]
            if status in FINISHED:
                return status
            time.sleep(0.25)
        raise TimeoutError(f"run {run_id} still running after {timeout} s")

    def events(self, run_id: str) -> list[dict]:
        return self.graphql("""query($id: ID!) { logsForRun(runId: $id, limit: 5000) {
              ... on EventConnection { events { __typename
                ... on MaterializationEvent { assetKey { path } }
                ... on RunFailureEvent { message }
                ... on AssetCheckEvaluationEvent { evaluation { checkName success } } } } } }""",
                            {"id": run_id})["logsForRun"]["events"]


def _loaded(server: Dagster) -> bool:
    """Whether the webserver is up with its code location loaded (a load error is raised)."""
    try:
        entries = server.graphql("{ workspaceOrError { ... on Workspace { locationEntries { loadStatus "
                                 "locationOrLoadError { __typename ... on PythonError { message } } } } } }")
    except OSError:  # not listening yet
        return False
    locations = entries["workspaceOrError"].get("locationEntries") or []
    errors = [e["locationOrLoadError"]["message"] for e in locations
              if (e["locationOrLoadError"] or {}).get("__typename") == "PythonError"]
    assert not errors, errors
    return bool(locations) and all(e["loadStatus"] == "LOADED" and e["locationOrLoadError"] for e in locations)


@dataclass
class Deployment:
    """`dagster dev` up on a deployment, and the `rag-loop run` that is killed in it."""

    server: Dagster
    root: Path
    victim: subprocess.Popen
    lock: duckdb.DuckDBPyConnection  # DuckDB's one writer, held while the victim waits for it


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory, demo_run):
    """`dagster dev` on a deployment that has run the loop once (the demo run's database and
    queue): the loop launched here is its next run, as in a deployment's daily life, and
    quick enough to leave the machine to the other tests (the first run's work has its own).
    The server starts (its processes load for seconds) while the demo run is copied and a
    `rag-loop run ingest_job` starts, kept in its first asset by DuckDB's write lock, held here
    (it retries meanwhile): the run `session` kills. Its folders are in memory (ramdisk)."""
    with in_memory(tmp_path_factory.mktemp("webserver")) as root:
        home = root / "dagster_home"
        home.mkdir()
        settings = yaml.safe_load((PROJECT / "deploy" / "dagster.yaml").read_text())
        # the one change: the daemon looks for dead runs every second, not every 15 s
        settings["run_monitoring"]["poll_interval_seconds"] = 1
        (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
        # the instance's storage made before any process opens it: dagster dev and the victim
        # would each create it on first use, and two at once race ("alembic_version already exists")
        DagsterInstance.from_config(str(home)).dispose()
        port = _free_port()
        env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_LOOP_HOME": str(root),
               "RAG_LOOP_DB": str(root / "rag.duckdb"),
               "RAG_LOOP_TRACES_DIR": str(PROJECT / "data" / "demo" / "traces"),
               "RAG_LOOP_KB_DIR": str(PROJECT / "data" / "demo" / "kb"),
               "RAG_LOOP_CURATION_DIR": str(root / "curation"), "RAG_LOOP_GOLDENS_DIR": str(root / "goldens"),
               "RAG_LOOP_REPORTS_DIR": str(root / "reports"), "HF_HUB_OFFLINE": "1",
               "DEEPEVAL_TELEMETRY_OPT_OUT": "1", "DEEPEVAL_DISABLE_DOTENV": "1"}
        dagster = BIN / "dagster"
        command = [str(dagster if dagster.exists() else "dagster"), "dev", "-f",
                   "tests/e2e/webserver_definitions.py", "-h", "127.0.0.1", "-p", str(port)]
        log = open(root / "dagster-dev.log", "w")
        process = subprocess.Popen(command, cwd=PROJECT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        victim = lock = None
        try:
            _, database, paths = demo_run
            shutil.copy(database, root / "rag.duckdb")
            shutil.copytree(Path(paths.curation_dir) / "queue", root / "curation" / "queue")
            lock = duckdb.connect(str(root / "rag.duckdb"))
            with (root / "victim.log").open("w") as out:
                victim = subprocess.Popen([str(BIN / "rag-loop"), "run", "ingest_job"], env=env, cwd=root,
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            server, deadline = Dagster(url), time.time() + 180
            while not _loaded(server):  # the webserver answers before its code location has loaded
                if time.time() > deadline or process.poll() is not None:
                    raise RuntimeError((root / "dagster-dev.log").read_text()[-3000:])
                time.sleep(0.1)
            yield Deployment(server, root, victim, lock)
        finally:  # a throwaway instance: nothing to shut down in order (all in the process's group)
            for started in (victim, process):
                if started is not None and started.poll() is None:
                    os.killpg(started.pid, signal.SIGKILL)
                if started is not None:
                    started.wait()
            if lock is not None:
                lock.close()
            log.close()


LOOP = demo_config("loop")  # as the demo runs it, the run before this one included


@dataclass
class Session:
    """What happened: a `rag-loop run` killed while the loop waited behind it, the loop's run,
    and a curator's work and release meanwhile."""

    killed_run_id: str
    killed_pid: int
    held: tuple[str, str]  # the killed run's and the loop's status once the queue held the loop
    run_id: str
    status: str
    labelled: str  # the trace the curator accepted while the loop ran
    during_the_loop: bool
    release_page: str


def _runs(server: Dagster, job: str, statuses: str = "") -> list[str]:
    where = f"pipelineName: \"{job}\"" + (f", statuses: [{statuses}]" if statuses else "")
    found = server.graphql(f"{{ runsOrError(filter: {{{where}}}) {{ ... on Runs {{ results {{ runId }} }} }} }}")
    return [r["runId"] for r in found["runsOrError"]["results"]]


def _wait_for(what: str, probe, timeout: float = 60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if found := probe():
            return found
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not after {timeout} s")


def _launch_behind_a_killed_run(deployment: Deployment) -> tuple[str, tuple[str, str], str]:
    """The loop launched behind the deployment's `rag-loop run ingest_job`, which is then killed
    mid-run: the daemon's run monitoring ends the dead run and the loop, queued behind it,
    starts. Returns the killed run, both runs' statuses while the queue held the loop, and the
    loop's run."""
    server, log = deployment.server, deployment.root / "dagster-dev.log"  # the daemon's too
    (killed,) = _wait_for("the victim's run STARTED", lambda: _runs(server, "ingest_job", "STARTED"))
    held = log.read_text().count("won't launch more")
    run_id = server.launch("rag_loop_job", LOOP)
    # behind the live run: one run at a time, and a live process is not taken for a dead one
    _wait_for("the queue held", lambda: log.read_text().count("won't launch more") > held)
    statuses = (server.run(killed)["status"], server.run(run_id)["status"])
    os.killpg(deployment.victim.pid, signal.SIGKILL)  # mid-run: waiting for DuckDB in its first asset
    deployment.victim.wait()
    deployment.lock.close()
    return killed, statuses, run_id


@pytest.fixture(scope="module")
def session(dagster_dev):
    """The loop launched (behind a run then killed); while it runs, a curator labels in the
    workspace (over the queue the earlier run exported, which this run rewrites) and releases
    from it through the webserver: a second writer launched while the first holds the database,
    queued behind it. (Every job carries the writer tag, the trace sensor's ingest_job and
    label_job included: test_definitions; a second run launched beside the loop would prove the
    same queue again, for one more run worker's start.)"""
    server, root = dagster_dev.server, dagster_dev.root
    curate(next((root / "curation" / "queue").glob("*.jsonl")), root / "curation" / "labels", 1)
    workspace = Workspace(root / "curation", root / "reports", root / "goldens")
    release = WebserverRelease(server.url, wait_seconds=300, poll_seconds=0.5)
    ana = Curator(create_app(workspace, release=release), "ana")
    killed, held, run_id = _launch_behind_a_killed_run(dagster_dev)
    _wait_for("the loop started", lambda: server.run(run_id)["status"] in ("STARTED", *FINISHED))
    unlabelled = workspace.rows({}, "todo", 0, 1)[0][0]
    source = ana.client.get("/sources", params={"q": "leave"}).json()[0]["chunk_id"]
    assert ana.client.get("/").status_code == 200
    assert ana.client.get(f"/trace/{unlabelled['trace_id']}").status_code == 200
    assert ana.label(unlabelled["trace_id"], action="accept", expected_output="Fifteen days.", source=[source],
                     origin="production_failure", failure_type="retrieval").status_code == 303
    page = ana.client.get("/releases").text
    during = server.run(run_id)["status"] == "STARTED"
    made = ana.client.post("/releases", data={"csrf": csrf_of(page), "notes": "from the e2e test"})
    assert made.status_code == 200, made.text[-2000:]
    return Session(killed, dagster_dev.victim.pid, held, run_id, server.wait(run_id), unlabelled["trace_id"], during,
                   made.text)


def test_a_killed_run_is_ended_and_the_run_queued_behind_it_goes_through(dagster_dev, session):
    """A run whose process was killed no longer holds the instance's one run slot: the daemon's
    run monitoring marks it failed, says which process is gone, and the run queued behind it
    goes through (issue 43)."""
    server, root = dagster_dev.server, dagster_dev.root
    assert session.held == ("STARTED", "QUEUED")
    assert session.status == "SUCCESS"
    killed, loop = server.run(session.killed_run_id), server.run(session.run_id)
    assert killed["status"] == "FAILURE" and killed["endTime"] <= loop["startTime"]
    assert {"key": "rag-loop/host", "value": socket.gethostname()} in loop["tags"]  # where its worker runs
    failure = [e for e in server.events(session.killed_run_id) if e["__typename"] == "RunFailureEvent"]
    (message,) = [e["message"] for e in failure]
    why = f"process {session.killed_pid} on host {socket.gethostname()} (started "
    assert why in message and "is gone" in message and "last seen" in message, message
    said = (root / "dagster-dev.log").read_text()
    assert why in said and session.killed_run_id in said  # the daemon's log says which run and why


def test_runs_launched_together_queue_on_the_duckdb_tag(dagster_dev, session):
    """Two writers can be launched together in a deployment (the loop and a curator's release
    here; the trace sensor's job, the drift schedule: any two): the instance settings
    (deploy/dagster.yaml) queue them one at a time on the DuckDB tag."""
    server = dagster_dev.server
    assert session.status == "SUCCESS"
    release = server.graphql('{ runsOrError(filter: {pipelineName: "release_goldens"}) { ... on Runs { '
                             'results { runId } } } }')["runsOrError"]["results"]
    runs = sorted((server.run(r) for r in [session.run_id, *(r["runId"] for r in release)]),
                  key=lambda r: r["startTime"])
    assert len(runs) == 2 and all({"key": "rag-loop/duckdb", "value": "writer"} in r["tags"] for r in runs)
    for before, after in zip(runs, runs[1:]):
        assert before["endTime"] <= after["startTime"]  # one writer at a time, no lock error
    events = server.events(session.run_id)
    materialized = {"/".join(e["assetKey"]["path"]) for e in events if e["__typename"] == "MaterializationEvent"}
    assert {"raw_traces", "trace_lake", "trace_signals", "failure_candidates", "intent_clusters",
            "curation_queue", "judge_calibration", "trace_judgments"} <= materialized
    checks = {e["evaluation"]["checkName"]: e["evaluation"]["success"]
              for e in events if e["__typename"] == "AssetCheckEvaluationEvent"}
    assert checks == {"raw_traces_quarantine_rate": True, "curator_agreement": True,
                      "judge_error_budget": True, "judge_changed_with_app": True}


def test_a_curator_labels_and_releases_from_the_workspace_while_the_loop_runs(dagster_dev, session):
    """The workspace never opens the database, so a run holding it blocks nobody; its release
    goes through the webserver and queues behind the runs before it."""
    server, root = dagster_dev.server, dagster_dev.root
    assert session.during_the_loop  # the curator's work happened while rag_loop_job ran
    assert "release_goldens: SUCCESS" in session.release_page
    assert f'href="{server.url}/runs/' in session.release_page
    release = server.graphql('{ runsOrError(filter: {pipelineName: "release_goldens"}) { ... on Runs { '
                             'results { startTime tags { key value } } } } }')["runsOrError"]["results"]
    assert len(release) == 1 and {"key": "rag-loop/duckdb", "value": "writer"} in release[0]["tags"]
    assert release[0]["startTime"] >= server.run(session.run_id)["endTime"]  # queued
    manifest = json.loads((root / "goldens" / "v0001" / "manifest.json").read_text())
    assert manifest["released_by"] == "ana" and manifest["goldens"] > 10
    goldens = json.loads((root / "goldens" / "v0001" / "goldens.json").read_text())
    mine = [g for g in goldens if g["additional_metadata"]["trace_id"] == session.labelled]
    assert [g["expected_output"] for g in mine] == ["Fifteen days."]
    assert (root / "reports" / "release-v0001.html").exists()


@pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)
def test_the_ui_renders_the_asset_graph_and_a_materialization(dagster_dev, session):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait
    server = dagster_dev.server
    server.graphql("mutation { setNuxSeen }")  # the community pop-up would cover the page
    ARTIFACTS.mkdir(exist_ok=True)
    pages = (("asset-graph", "/asset-groups", ("ingestion", "selection", "intents", "curation",
                                               "goldens", "evaluation", "drift", "online")),
             ("raw-traces", "/assets/raw_traces", ("raw_traces", "Production traces", "trace_signals")))
    browser = shared_chromium()  # one per test process: the workspace browser tests' too
    browser.execute_cdp_cmd("Network.clearBrowserCookies", {})
    browser.set_window_size(1440, 900)
    try:
        for name, path, expected in pages:
            browser.get(f"{server.url}{path}")
            try:  # the UI renders in the browser: wait for the page to show the assets
                WebDriverWait(browser, 60, poll_frequency=0.1).until(
                    lambda b, shown=expected: all(t in b.page_source for t in shown))
            except TimeoutException:
                pass  # the assertion below names what is missing
            missing = [text for text in expected if text not in browser.page_source]
            assert not missing, (path, missing)  # the page shows the assets, not an error
            time.sleep(0.3)  # let the graph settle before the picture
            target = ARTIFACTS / f"{name}.png"
            target.unlink(missing_ok=True)
            browser.save_screenshot(str(target))
            assert target.stat().st_size > 20_000  # a rendered page, not a blank one
    finally:
        browser.get("about:blank")  # the UI polls its server, which ends with this module
