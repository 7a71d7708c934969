"""The curator workspace over the demo loop's queue export: labels written as label files that
`curated_labels` stores whole, hostile text rendered inert, forged posts refused."""

import re
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markupsafe import escape

from rag_loop.curation.labels import store_label_files
from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.workspace.app import create_app
from rag_loop.workspace.security import shown
from rag_loop.workspace.store import Workspace
from tests.helpers import demo_copy
from tests.workspace.conftest import Curator, client_of


def _first(workspace, **filters):
    rows, _ = workspace.rows(filters, "todo", 0, 5)
    return rows[0]


def test_an_accepted_label_with_two_searched_sources_is_stored_by_curated_labels(app, workspace, demo_run,
                                                                                 tmp_path):
    ana = Curator(app, "ana")
    row = _first(workspace)
    hits = ana.client.get("/sources", params={"q": "leave policy"}).json()
    sources = [hits[0]["chunk_id"], hits[1]["chunk_id"]]
    reply = ana.label(row["trace_id"], action="accept", expected_output="Fifteen days a year.",
                      source=sources, tags="leave, en", origin="production_failure", failure_type="retrieval")
    assert reply.status_code == 303 and reply.headers["location"].startswith("/trace/")
    files = list((workspace.labels_dir).glob("*.jsonl"))
    assert [f.name for f in files] == [f"ana-{row['batch']}.jsonl"]
    con = demo_copy(demo_run, tmp_path)
    report = store_label_files(con, workspace.labels_dir, settle_seconds=0)
    assert (report.stored, report.rejected) == (1, 0)
    stored = con.execute("SELECT trace_id, decision, expected_sources, curator FROM current_labels "
                         "WHERE source_file LIKE 'ana-%'").fetchall()
    assert stored == [(row["trace_id"], "accept", sources, "ana")]


def test_an_invalid_label_is_refused_with_the_rules_of_curated_labels_and_nothing_is_written(app, workspace):
    ana = Curator(app, "ana")
    row = _first(workspace)
    reply = ana.label(row["trace_id"], action="accept", expected_output="", source=["nope@1"],
                      origin="production_failure", failure_type="retrieval")
    assert reply.status_code == 422
    assert "expected_output: required to accept" in reply.text and "unknown document" in reply.text
    assert not workspace.labels_dir.exists() or not list(workspace.labels_dir.iterdir())
    assert ana.label(row["trace_id"], action="reject").status_code == 422  # a reject says why


def test_later_comes_back_last_and_reject_keeps_its_reason(app, workspace):
    ana = Curator(app, "ana")
    first, second = workspace.rows({}, "todo", 0, 2)[0]
    assert ana.label(first["trace_id"], action="later").status_code == 303
    assert ana.label(second["trace_id"], action="reject", reject_reason="a duplicate").status_code == 303
    ordered, _ = workspace.rows({}, "", 0, 10_000)
    assert ordered[-1]["trace_id"] == first["trace_id"] and ordered[-1]["status"] == "later"
    decided = workspace.decisions()
    assert decided[second["trace_id"]].reject_reason == "a duplicate"
    page = ana.client.get("/", params={"status": "later"}).text
    assert page.count('<tr class="row') == 1
    assert ana.client.get("/").text.count("ana") >= 1  # progress per curator


def test_the_queue_says_why_a_row_ranks_where_it_does(app, workspace):
    rows, _ = workspace.rows({}, "", 0, 5)
    assert all(r["rank_reason"].startswith(r["priority"] + "; ") for r in rows)
    page = Curator(app, "ana").client.get("/").text  # the demo loop computed no coverage: it says so
    assert page.count('<div class="meta why">') == min(len(workspace.rows({}, "", 0, 10_000)[0]), 50)
    assert "coverage not computed (no golden_coverage rows: run coverage_job)" in page


def test_filters_narrow_the_queue(app, workspace):
    ana = Curator(app, "ana")
    everything, total = workspace.rows({}, "", 0, 10_000)
    p0, matching = workspace.rows({"priority": "P0"}, "", 0, 10_000)
    assert 0 < matching < total and all(r["priority"] == "P0" for r in p0)
    vi, _ = workspace.rows({"language": "vi", "signal": "thumbs_down"}, "", 0, 10_000)
    assert vi and all(r["language"] == "vi" and "thumbs_down" in r["signals"] for r in vi)
    assert ana.client.get("/", params={"priority": "P0"}).text.count('<tr class="row') == min(matching, 50)


def test_forged_posts_are_refused(app, workspace):
    ana = Curator(app, "ana")
    row = _first(workspace)
    assert ana.label(row["trace_id"], action="later", csrf="forged").status_code == 403
    stranger = client_of(app)  # another site's page posting into the curator's browser
    reply = stranger.post(f"/trace/{row['trace_id']}", data={"action": "later"},
                          cookies={"rl_curator": "ana"})
    assert reply.status_code == 403
    cross = ana.client.post(f"/trace/{row['trace_id']}", data={"csrf": ana.csrf, "action": "later"},
                            headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert not workspace.labels_dir.exists()


def test_off_loopback_every_request_needs_the_token(workspace):
    client = client_of(create_app(workspace, token="s3cret"))
    assert client.get("/").status_code == 401 and client.get("/static/workspace.js").status_code == 401
    assert client.get("/", params={"token": "wrong"}).status_code == 401
    assert client.get("/", params={"token": "s3cret"}).status_code == 200  # the cookie, then the page


def test_pages_carry_a_policy_that_runs_no_foreign_or_inline_script(app):
    reply = client_of(app).get("/curator")
    policy = reply.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "default-src 'none'" in policy
    assert reply.headers["x-frame-options"] == "DENY"


HOSTILE = ["<script>alert(1)</script>", '<img src=x onerror="alert(2)">', "javascript:alert(3)",
           "\u202egnp.exe", "</textarea><script>alert(4)</script>", "x" * 1_000_000]


def _hostile_queue(folder: Path, text: str) -> None:
    row = {"trace_id": "t-hostile", "batch": "b", "priority": "P1", "language": "en", "input": text,
           "actual_output": text, "cluster_id": "en-0001", "cluster_label": text[:100], "cluster_size": 2,
           "retrieval_context": [{"chunk_id": "c#1", "text": text}], "signals": ["thumbs_down"],
           "suggested_failure_type": "generation", "suggestion_reason": text, "suggested_origin": "production_failure",
           "judge_scores": {"Faithfulness": {"score": 0.1, "passed": False, "reason": text}}}
    details = {"t-hostile": {"rewritten_query": text, "status": "ok", "retrieved": [
        {"chunk_id": text[:200], "doc_id": "d", "doc_version": "1", "rank": 1, "selected": True, "text": text}],
        "feedback": [{"rating": "negative", "category": "incorrect", "comment": text}]}}
    export_for_workspace([row], details, folder / "queue", "b")


@pytest.mark.parametrize("text", HOSTILE, ids=["script", "img", "javascript", "rtl", "textarea", "1MB"])
def test_hostile_trace_text_renders_escaped_and_readable(tmp_path, text):
    _hostile_queue(tmp_path, text)
    ana = Curator(create_app(Workspace(tmp_path)), "ana")
    page = ana.client.get("/trace/t-hostile").text
    assert "<script>alert" not in page and "onerror=\"alert" not in page and 'href="javascript' not in page
    assert str(escape(shown(text))) in page  # the text is there, as text
    if "\u202e" in text:  # not in what is displayed (an attribute value keeps the id as it is)
        assert "\u202e" not in re.sub(r'="[^"]*"', "", page) and "[U+202E]" in page
    if len(text) > 20_000:
        assert len(page) < 400_000 and "more characters" in page
    queue = ana.client.get("/").text
    assert "<script>alert" not in queue and str(escape(shown(text, 160))) in queue


@pytest.fixture
def ana_on_tmp_path(tmp_path):
    """A curator signed in to a workspace on `tmp_path`: one for all of a property test's
    examples (an app and a sign-in cost ~35 ms of CPU each), each exporting its own queue there."""
    return Curator(create_app(Workspace(tmp_path)), "ana")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=300))
def test_any_production_text_is_shown_as_text(tmp_path, ana_on_tmp_path, text):
    _hostile_queue(tmp_path, text)  # the same batch, replaced: the page reads it again
    page = ana_on_tmp_path.client.get("/trace/t-hostile").text
    assert str(escape(shown(text))) in page


def test_two_curators_labelling_at_once_lose_nothing(app, workspace):
    ana, ben = Curator(app, "ana"), Curator(app, "ben")
    rows, _ = workspace.rows({}, "todo", 0, 20)
    failures = []

    def work(curator, mine):
        for row in mine:
            if curator.label(row["trace_id"], action="later").status_code != 303:
                failures.append(row["trace_id"])
    threads = [threading.Thread(target=work, args=(ana, rows)), threading.Thread(target=work, args=(ben, rows))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = {f.name: f.read_text().count("\n") for f in workspace.labels_dir.iterdir()}
    assert not failures and lines == {f"ana-{rows[0]['batch']}.jsonl": 20, f"ben-{rows[0]['batch']}.jsonl": 20}


def test_the_workspace_works_while_a_run_holds_the_database(app, workspace, demo_run, tmp_path):
    writer = demo_copy(demo_run, tmp_path)  # a Dagster run writing: DuckDB's one writer
    writer.execute("BEGIN")
    writer.execute("DELETE FROM curation_queue")
    ana = Curator(app, "ana")
    row = _first(workspace)
    assert ana.client.get("/").status_code == 200 and ana.client.get(f"/trace/{row['trace_id']}").status_code == 200
    assert ana.label(row["trace_id"], action="later").status_code == 303
    assert workspace.decisions()[row["trace_id"]].decision == "later"  # written while the run held it
    writer.execute("ROLLBACK")


def test_reports_are_served_and_nothing_else(tmp_path, workspace):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "eval-1.html").write_text("<h1>report</h1>")
    (tmp_path / "secret.html").write_text("no")
    client = client_of(create_app(Workspace(workspace.queue_dir.parent, reports)))
    assert client.get("/reports/eval-1.html").text == "<h1>report</h1>"
    assert client.get("/reports/..%2Fsecret.html").status_code == 404
    assert client.get("/reports/secret.txt").status_code == 404


def test_the_intents_page_maps_the_clusters_and_drills_down_to_the_queue(app, workspace):
    ana = Curator(app, "ana")
    clusters = workspace.intents("failure_rate")
    rates = [c["failure_rate"] for c in clusters if c["failure_rate"] == c["failure_rate"]]
    assert clusters and rates == sorted(rates, reverse=True)
    page = ana.client.get("/intents", params={"sort": "failure_rate"}).text
    circles = re.findall(r'<a href="/\?cluster_id=[^"]*"><circle', page)  # (the legend's are not links)
    assert len(circles) == sum(1 for c in clusters if c["x"] == c["x"])
    biggest = workspace.intents("volume")[0]  # named on the map by its typical query, no hover needed
    assert 'class="cluster-name"' in page and str(escape(biggest["medoid_query"][:20])) in page
    surge = next(c for c in workspace.intents("volume") if "ERR-PAY-977" in (c["medoid_query"] or ""))
    assert surge["judged"] > 0  # the judge's verdicts reach the intents
    rows, _ = workspace.rows({"cluster_id": surge["cluster_id"]}, "", 0, 100)
    assert rows and all(r["cluster_id"] == surge["cluster_id"] for r in rows)
    assert f'href="/?cluster_id={surge["cluster_id"]}"' in page


def test_undo_puts_back_the_label_before_and_both_stay_in_the_files(app, workspace):
    ana = Curator(app, "ana")
    first, second = workspace.rows({}, "todo", 0, 2)[0]
    accept = {"action": "accept", "expected_output": "Fifteen days.", "origin": "production_failure",
              "failure_type": "retrieval"}
    assert ana.label(first["trace_id"], **accept).status_code == 303
    assert ana.label(first["trace_id"], action="undo").status_code == 303
    assert workspace.decisions()[first["trace_id"]].decision == "later"  # nothing before it: back in the queue
    assert ana.label(second["trace_id"], action="reject", reject_reason="duplicate").status_code == 303
    assert ana.label(second["trace_id"], **accept).status_code == 303
    assert ana.label(second["trace_id"], action="undo").status_code == 303
    assert workspace.decisions()[second["trace_id"]].decision == "reject"
    lines = sum(f.read_text().count("\n") for f in workspace.labels_dir.iterdir())
    assert lines == 5  # nothing is erased: a label file is only appended to


def test_a_label_is_checked_as_it_is_typed_and_nothing_is_written(app, workspace):
    ana = Curator(app, "ana")
    row = _first(workspace)
    verdict = ana.client.post(f"/check/{row['trace_id']}", data={"csrf": ana.csrf, "expected_output": "",
                                                                  "source": ["nope@1"]}).json()
    assert any("required to accept" in e for e in verdict["errors"])
    assert any("unknown document" in e for e in verdict["errors"])
    good = ana.client.post(f"/check/{row['trace_id']}", data={
        "csrf": ana.csrf, "expected_output": "Fifteen days.", "origin": "Production_Failure",
        "failure_type": "retrieval"}).json()
    assert good["errors"] == [] and not workspace.labels_dir.exists()
    assert ana.client.post(f"/check/{row['trace_id']}", data={"csrf": "forged"}).status_code == 403
