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


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


class Curator:
    """A browser session of one curator, through Starlette's test client."""

    def __init__(self, app, name: str):
        self.client = TestClient(app)
        self.csrf = csrf_of(self.client.get("/curator").text)
        assert self.client.post("/curator", data={"csrf": self.csrf, "curator": name}).status_code == 200

    def label(self, trace_id: str, **form):
        return self.client.post(f"/trace/{trace_id}", data={"csrf": self.csrf, **form}, follow_redirects=False)


@pytest.fixture
def workspace(curation):
    return Workspace(curation)


@pytest.fixture
def app(workspace):
    return create_app(workspace)
