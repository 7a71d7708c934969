import re
import shutil

import pytest
from starlette.testclient import TestClient

from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace


@pytest.fixture
def curation(demo_run, tmp_path):
    """A copy of the demo loop's curation folder: its queue exports, no labels yet."""
    _, _, paths = demo_run
    folder = tmp_path / "curation"
    shutil.copytree(f"{paths.curation_dir}/queue", folder / "queue")
    return folder


BASE_URL = "http://127.0.0.1:8765"  # a host the workspace answers (Starlette's "testserver" is refused)


def client_of(app, **options) -> TestClient:
    """Starlette's test client, on a host the workspace was started for."""
    return TestClient(app, base_url=BASE_URL, **options)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


class Curator:
    """A browser session of one curator, through Starlette's test client (a server error is a
    500 reply, not an exception, so a test can say what it expected instead)."""

    def __init__(self, app, name: str):
        self.client = client_of(app, raise_server_exceptions=False)
        self.csrf = csrf_of(self.client.get("/curator").text)
        assert self.client.post("/curator", data={"csrf": self.csrf, "curator": name}).status_code == 200

    def label(self, trace_id: str, **form):
        return self.client.post(f"/trace/{trace_id}", data={"csrf": self.csrf, **form}, follow_redirects=False)


@pytest.fixture(scope="session")
def _chromium():
    from tests.helpers.browser import shared_chromium
    return shared_chromium()


@pytest.fixture
def browser(_chromium):
    """The browser tests' headless Chromium, one per test process (tests.helpers.browser's
    shared one: each start costs a CPU-second or more), as a fresh one for each test: no
    cookies (which are per host, whatever the port) and the default window."""
    _chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    _chromium.set_window_size(1400, 1000)
    return _chromium


@pytest.fixture
def workspace(curation):
    return Workspace(curation)


@pytest.fixture
def app(workspace):
    return create_app(workspace)


@pytest.fixture(scope="session")
def figures(tmp_path_factory):
    """The dashboard world's figures written once per session (reports/dashboard.json under the
    folder returned, ~1 CPU-s to compute): the dashboard page tests only read them."""
    from tests.workspace.test_dashboard_page import figures_folder
    return figures_folder(tmp_path_factory.mktemp("figures"))
