"""Incidents from the workspace (issue 48): the forms run `rag-loop incident open|close` in a
process of their own on the incidents' tiny world; the pages read the summary, the postmortem,
the queue export and the releases, never the database."""

import json
import re

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markupsafe import escape

from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.workspace.app import create_app
from rag_loop.workspace.display import recorded
from rag_loop.workspace.incidents import IncidentCommands, IncidentForm, open_request, postmortem_html
from rag_loop.workspace.security import shown
from rag_loop.workspace.store import Workspace
from tests.incidents.world import release, tiny_world
from tests.workspace.conftest import Curator

HOSTILE_TITLE = '<script>alert(1)</script> "ERR" <img src=x onerror=alert(2)> \u202egnp.exe'


@pytest.fixture
def deployment(tmp_path):
    """The tiny incident world in a database file, its reports and goldens (v0001), a curation folder."""
    database = tmp_path / "rag.duckdb"
    with duckdb.connect(str(database)) as con:
        tiny_world(con, tmp_path / "goldens")
    (tmp_path / "curation" / "queue").mkdir(parents=True)
    return tmp_path, database


def _app(deployment, commands=True):
    folder, database = deployment
    workspace = Workspace(folder / "curation", folder / "reports", folder / "goldens")
    return create_app(workspace, incidents=IncidentCommands(folder / "reports", folder / "goldens", database)
                      if commands else None)


def test_open_from_the_workspace_then_close(deployment):
    folder, database = deployment
    ana = Curator(_app(deployment), "ana")
    opened = ana.client.post("/incidents", data={"csrf": ana.csrf, "from": "2026-11-12", "to": "2026-11-13",
                                                 "slices": "language=vi\n", "title": HOSTILE_TITLE},
                             follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/incidents/INC-0001?opened=1"
    with duckdb.connect(str(database), read_only=True) as con:  # the CLI's record, by the curator
        assert con.execute("SELECT title, opened_by, affected, failing, status FROM incidents").fetchall() == [
            (HOSTILE_TITLE, "ana", 3, 2, "open")]
    # the queue's next export puts its failing traces first: one row stands for t1
    export_for_workspace([{"trace_id": "t1", "batch": "b", "priority": "P0", "language": "vi",
                           "input": "lỗi ERR-977 là gì", "cluster_id": "A", "cluster_label": "err · 977",
                           "cluster_size": 2, "suggested_failure_type": "retrieval", "incidents": ["INC-0001"],
                           "rank_reason": "P0; a failing trace of open incident INC-0001: first"}],
                         {}, folder / "curation" / "queue", "b")
    release(folder / "goldens", "v0002", [("g-a", "t2", "A", ["INC-0001"])], "2026-11-15T00:00:00+00:00")
    page = ana.client.get("/incidents/INC-0001").text
    assert "<script>alert(1)" not in page and "<img src=x" not in page  # text, everywhere it is shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "[U+202E]" in page
    assert "<b>3</b> requests, <b>2</b> failing" in page
    assert '<a href="/trace/t1">' in page  # in the queue
    assert "<code>t2</code>" in page and "g-a" in page  # not queued; its golden in v0002
    assert "<h2>Impact</h2>" in page and "<h2>Why offline tests missed it</h2>" in page  # the postmortem, rendered
    trace = ana.client.get("/trace/t1").text  # the trace says why it is queued, and links its incident
    assert "In the queue here because: P0; a failing trace of open incident INC-0001" in trace
    assert '<a href="/incidents/INC-0001">INC-0001</a>' in trace
    listed = ana.client.get("/incidents").text
    assert 'href="/incidents/INC-0001"' in listed and "&lt;script&gt;" in listed
    for actions, release_, said in ((" ", "", "actions: say what it is"), ("x", "v0009", "no release &#39;v0009&#39;")):
        refused = ana.client.post("/incidents/INC-0001", data={"csrf": ana.csrf, "actions": actions,
                                                               "release": release_})
        assert refused.status_code == 422 and said in refused.text
    closed = ana.client.post("/incidents/INC-0001", data={"csrf": ana.csrf, "actions": "documented <ERR-977>",
                                                          "release": "v0002"}, follow_redirects=False)
    assert closed.status_code == 303, closed.text
    page = ana.client.get("/incidents/INC-0001").text
    assert 'id="incident-status">closed<' in page and "regression goldens in v0002" in page
    assert "documented &lt;ERR-977&gt;" in page  # in the postmortem, as text
    summary = json.loads((folder / "reports" / "incident-INC-0001.json").read_text())
    assert summary["incident"]["release_version"] == "v0002" and summary["failing"] == 2


def test_a_bad_form_comes_back_with_the_clis_message_and_runs_nothing(deployment):
    folder, _ = deployment
    ana = Curator(_app(deployment), "ana")
    for form, said in (({"from": "2026-11-13", "to": "2026-11-12"}, "before it starts"),
                       ({"from": "yesterday", "to": "2026-11-12"}, "is no date"),
                       ({"from": "2026-11-12", "to": ""}, "needs both ends"),
                       ({"from": "2026-11-12", "to": "2026-11-12", "slices": "colour=red"}, "unknown slice key")):
        reply = ana.client.post("/incidents", data={"csrf": ana.csrf, **form})
        assert reply.status_code == 422 and said in reply.text, form
        assert f'value="{form["from"]}"' in reply.text  # what was typed is given back
    closing = ana.client.post("/incidents/INC-0001", data={"csrf": ana.csrf, "actions": "x", "release": ""})
    assert closing.status_code == 404 and "no incident this workspace" in closing.text  # none was opened
    assert not (folder / "reports").exists()


def test_a_forged_post_is_refused_and_records_nothing(deployment):
    folder, database = deployment
    ana = Curator(_app(deployment), "ana")
    forged = ana.client.post("/incidents", data={"csrf": "guess", "from": "2026-11-12", "to": "2026-11-13"})
    assert forged.status_code == 403
    other_site = ana.client.post("/incidents", data={"csrf": ana.csrf, "from": "2026-11-12", "to": "2026-11-13"},
                                 headers={"Origin": "http://evil.example"})
    assert other_site.status_code == 403
    with duckdb.connect(str(database), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'incidents'").fetchall() == [(0,)]


def test_a_held_database_and_no_launcher_are_said(deployment):
    folder, database = deployment
    ana = Curator(_app(deployment), "ana")
    with duckdb.connect(str(database)):  # a run holds the database: the CLI says so, nothing recorded
        held = ana.client.post("/incidents", data={"csrf": ana.csrf, "from": "2026-11-12", "to": "2026-11-13"})
    assert held.status_code == 422 and "cannot open" in held.text and "retry when it ends" in held.text
    bare = Curator(_app(deployment, commands=False), "ana")
    reply = bare.client.post("/incidents", data={"csrf": bare.csrf, "from": "2026-11-12", "to": "2026-11-13"})
    assert reply.status_code == 422 and "rag-loop serve" in reply.text
    assert bare.client.get("/incidents/INC-9999").status_code == 404
    assert bare.client.get("/incidents/..%2Fsecrets").status_code == 404


def test_the_form_is_checked_by_the_clis_parsers():
    request, errors = open_request(IncidentForm("2026-11-12T10:00", "2026-11-12", "tenant=acme\nlanguage=vi", " t "),
                                   "ana")
    assert errors == [] and request.slices == {"tenant": ["acme"], "language": ["vi"]} and request.title == "t"
    assert request.end.isoformat() == "2026-11-13T00:00:00+00:00" and request.opened_by == "ana"
    assert open_request(IncidentForm("2026-11-12", "2026-11-13", "", "a\x07b"), "ana")[1] == [
        "title: a control character (U+0007) at position 2: remove it"]


def test_raw_html_in_a_postmortem_is_text(tmp_path):
    (tmp_path / "incident-INC-0001.md").write_text(
        "# INC-0001\n\n<script>alert(1)</script>\n\n[x](javascript:alert(2)) <img src=x onerror=alert(3)> "
        "![a picture](http://elsewhere.example/x.png)\n")
    html = str(postmortem_html(tmp_path, "INC-0001"))
    assert "<script>" not in html and "<img" not in html and 'href="javascript' not in html
    assert "&lt;script&gt;" in html and postmortem_html(tmp_path, "../INC-0001") is None
    assert "elsewhere.example" in html  # an image is its text: nothing is fetched


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@pytest.fixture
def ana_without_launcher(tmp_path):
    """A curator signed in to a workspace on `tmp_path` that has no way to record incidents: one
    for all of a property test's examples (an app and a sign-in cost ~35 ms of CPU each), which
    write whatever files each needs under `tmp_path` (the same folder for every example)."""
    return Curator(create_app(Workspace(tmp_path / "curation", tmp_path / "reports", tmp_path / "goldens")), "ana")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=TEXT, slices=TEXT, start=st.one_of(TEXT, st.just("2026-11-12")))
def test_any_form_text_comes_back_escaped_or_refused_never_a_crash(ana_without_launcher, title, slices, start):
    """Whatever is typed, the opening form answers 422 with the CLI's reason (no launcher here:
    nothing runs) and shows the text back as text."""
    ana = ana_without_launcher
    reply = ana.client.post("/incidents", data={"csrf": ana.csrf, "from": start, "to": "2026-11-13",
                                                "slices": slices, "title": title})
    assert reply.status_code == 422
    assert f'value="{escape(title)}"' in reply.text and f'value="{escape(start)}"' in reply.text
    assert f'rows="2" dir="auto">{escape(slices)}</textarea>' in reply.text
    assert "<script" not in reply.text.replace('<script src="/static/workspace.js" defer></script>', "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(title=TEXT, value=TEXT, reason=TEXT)
@example(title="\r", value="", reason="")  # a blank title is "not recorded" (found by hypothesis)
def test_any_production_text_in_an_incident_page_is_text(tmp_path, ana_without_launcher, title, value, reason):
    """An incident's summary and postmortem holding any text (as the runbook writes them, or
    edited by hand): the page shows it escaped, and its Markdown renders no raw HTML."""
    reports = tmp_path / "reports"
    reports.mkdir(exist_ok=True)
    (reports / "incident-INC-0001.json").write_text(json.dumps(
        {"incident": {"incident_id": "INC-0001", "title": title, "status": "open"}, "slices": {"tenant": [value]},
         "failing_traces": [{"trace_id": value, "cluster_id": value, "reasons": [reason]}]}))
    (reports / "incident-INC-0001.md").write_text(f"# INC-0001: {title}\n\n{reason}\n", encoding="utf-8")
    page = ana_without_launcher.client.get("/incidents/INC-0001")
    assert page.status_code == 200
    assert str(escape(recorded(title, 200))) in page.text and str(escape(shown(value, 120))) in page.text
    postmortem = page.text.split('<article class="postmortem" id="postmortem">', 1)[1].split("</article>", 1)[0]
    assert not re.search(r"<(?!/?(h[1-6]|p|code|em|strong|ul|ol|li|a|br|hr|pre|blockquote|table|thead|tbody|tr|th|"
                         r"td)\b)", postmortem)  # markdown-it's own tags only: no image, no raw HTML
    assert not re.search(r'href="\s*(javascript|vbscript|data):', postmortem, re.IGNORECASE)
