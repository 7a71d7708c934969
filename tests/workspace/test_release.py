"""A release made from the workspace: it runs the release_goldens job in its own process, and
the golden the curator accepted is in it and loads in DeepEval; a workspace given no way to
release says so."""

import os
import shutil
import socket

import pytest

from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from rag_loop_dagster.releasing import WebserverRelease, release_in_own_process
from tests.helpers import PROJECT
from tests.workspace.conftest import Curator, client_of, csrf_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_release_from_the_workspace_holds_the_accepted_golden_and_loads_in_deepeval(curation, demo_run,
                                                                                       tmp_path):
    _, database, _ = demo_run
    shutil.copy(database, tmp_path / "rag.duckdb")
    goldens = tmp_path / "goldens"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("RAG_LOOP_")},
           "RAG_LOOP_DB": str(tmp_path / "rag.duckdb"), "RAG_LOOP_CURATION_DIR": str(curation),
           "RAG_LOOP_GOLDENS_DIR": str(goldens), "RAG_LOOP_REPORTS_DIR": str(tmp_path / "reports"),
           "RAG_LOOP_HOME": str(tmp_path), "DAGSTER_HOME": str(tmp_path / "dagster"),
           "PYTHONPATH": str(PROJECT), "DAGSTER_DISABLE_TELEMETRY": "1"}
    workspace = Workspace(curation, tmp_path / "reports", goldens)
    app = create_app(workspace, release=lambda notes, by: release_in_own_process(notes, by, env))
    ana = Curator(app, "ana")
    row = workspace.rows({}, "todo", 0, 1)[0][0]
    source = ana.client.get("/sources", params={"q": "leave policy"}).json()[0]["chunk_id"]
    assert ana.label(row["trace_id"], action="accept", expected_output="Fifteen days.", source=[source],
                     origin="production_failure", failure_type="retrieval").status_code == 303
    page = ana.client.get("/releases").text
    assert "<b>1</b> accepted traces the newest release does not have yet" in page
    made = ana.client.post("/releases", data={"csrf": csrf_of(page), "notes": "from the workspace"})
    assert made.status_code == 200, made.text[-2000:]
    assert "release_goldens: SUCCESS" in made.text and "v0001" in made.text
    from deepeval.dataset import EvaluationDataset
    dataset = EvaluationDataset()
    dataset.add_goldens_from_json_file(str(goldens / "v0001" / "goldens.json"))
    mine = [g for g in dataset.goldens if g.additional_metadata["trace_id"] == row["trace_id"]]
    assert len(mine) == 1 and mine[0].expected_output == "Fifteen days."
    assert mine[0].additional_metadata["expected_sources"] == [source]
    assert mine[0].additional_metadata["curator"] == "ana"
    refused = client_of(app).post("/releases", data={"notes": "forged"})  # no token, no cookie
    assert refused.status_code == 403
    trace_page = ana.client.get(f"/trace/{row['trace_id']}").text
    assert "In release <a href=\"/releases\">v0001</a> as golden" in trace_page  # label → golden
    assert ana.label(row["trace_id"], action="accept", expected_output="Fifteen days a year.", source=[source],
                     origin="production_failure", failure_type="retrieval").status_code == 303
    before_after = ana.client.get("/releases").text  # the next release's diff, before it is made
    assert "<b>1</b> of its goldens with a new expected output" in before_after
    assert "Fifteen days.</td>" in before_after and "Fifteen days a year.</td>" in before_after


def test_a_release_through_a_webserver_that_is_down_says_so():
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    launched = WebserverRelease(url)("notes", "ana")
    assert not launched.ok and url in launched.output and launched.link is None


def test_a_workspace_given_no_way_to_release_says_so_and_releases_nothing(tmp_path):
    ana = Curator(create_app(Workspace(tmp_path / "curation", goldens_dir=tmp_path / "goldens")), "ana")
    page = ana.client.get("/releases").text
    refused = ana.client.post("/releases", data={"csrf": csrf_of(page), "notes": "June"})
    assert refused.status_code == 422 and "started without a way to release" in refused.text
    assert not (tmp_path / "goldens").exists()


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:3000", "127.0.0.1:3000", "http://"])
def test_a_webserver_address_that_is_no_http_url_is_refused_with_its_reason(url):
    launched = WebserverRelease(url)("notes", "ana")
    assert not launched.ok and "not an http(s) address" in launched.output
