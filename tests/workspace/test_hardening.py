"""The workspace with nothing left hanging (issue 43): where it listens and for which hosts, whose
name a cookie may give, what one request may weigh, a tampered release, hostile text in every
field, and the small ways a page could fail or lose what a curator typed."""

import html
import ipaddress
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urljoin

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.goldens.release import golden_id, publish_release
from rag_loop.workspace.app import create_app
from rag_loop.workspace.releases import Launched
from rag_loop.workspace.security import MAX_BODY_BYTES, REPORT_POLICY, is_loopback, local_path, served_hosts
from rag_loop.workspace.store import Workspace
from rag_loop_dagster.jobs_cli import main
from tests.workspace.conftest import BASE_URL, Curator, client_of, csrf_of

FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ACCEPT = {"action": "accept", "expected_output": "Fifteen days.", "origin": "production_failure",
          "failure_type": "retrieval"}


def _queue(folder: Path, trace_ids=("t1", "t2"), batch: str = "b", **fields) -> Path:
    """A curation folder whose queue export `batch` holds `trace_ids` (and `fields` on each row)."""
    rows = [{"trace_id": t, "batch": batch, "priority": "P1", "language": "en", "input": f"question {t}",
             "actual_output": "12 days.", "cluster_id": "en-0001", "cluster_label": "leave", "cluster_size": 2,
             "signals": ["thumbs_down"], "suggested_failure_type": "retrieval",
             "suggested_origin": "production_failure", **fields} for t in trace_ids]
    export_for_workspace(rows, {}, folder / "queue", batch)
    return folder


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


# 2. where it listens

@pytest.fixture
def started(monkeypatch):
    """uvicorn.run replaced: what `rag-loop serve` would have started."""
    import uvicorn
    calls = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: calls.append({"app": app, **options}))
    return calls


@pytest.mark.parametrize("host", ["", " ", "0.0.0.0", "::", "[::]", "192.0.2.7", "2001:db8::7"])
def test_serve_listens_beyond_loopback_only_with_a_token(tmp_path, started, host):
    result = CliRunner().invoke(main, ["serve", "--host", host, "--curation-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--token" in result.output and not started


@pytest.mark.parametrize("host, first", [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]"), ("localhost", "localhost"),
                                         ("127.0.0.2", "127.0.0.2")])
def test_serve_on_a_loopback_address_needs_no_token(tmp_path, started, host, first):
    result = CliRunner().invoke(main, ["serve", "--host", host, "--curation-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert started[0]["host"] == host and f"http://{first}:8765/" in result.output


def test_serve_on_every_interface_needs_the_names_curators_use(tmp_path, started):
    everywhere = ["serve", "--host", "0.0.0.0", "--token", "s3cret", "--curation-dir", str(tmp_path)]
    refused = CliRunner().invoke(main, everywhere)
    assert refused.exit_code == 2 and "--allowed-host" in refused.output and not started
    named = CliRunner().invoke(main, [*everywhere, "--allowed-host", "curation.example.org"])
    assert named.exit_code == 0 and "http://curation.example.org:8765/?token=s3cret" in named.output
    client = client_of(started[0]["app"])
    assert client.get("/curator", headers={"host": "curation.example.org:8765"}).status_code == 401  # the token
    assert client.get("/curator", headers={"host": "rebind.example:8765"}).status_code == 400


@given(st.ip_addresses())
def test_an_address_is_loopback_exactly_when_the_standard_library_says_so(address):
    assert is_loopback(str(address)) == address.is_loopback
    if isinstance(address, ipaddress.IPv6Address):
        assert is_loopback(f"[{address}]") == address.is_loopback


def test_the_hosts_a_server_answers():
    assert served_hosts("127.0.0.1") == ["127.0.0.1", "localhost", "[::1]"]
    assert served_hosts("::1") == ["[::1]", "localhost", "127.0.0.1"]
    assert served_hosts("192.0.2.7", ["Curation.Example.org"]) == ["curation.example.org", "192.0.2.7"]
    with pytest.raises(ValueError, match="--allowed-host"):
        served_hosts("::")


# 5. the Host header

@pytest.fixture
def ana_on_a_queue(tmp_path):
    """A curator signed in to a workspace on a two-row queue: one for all of a property test's
    examples (an app and a sign-in cost ~35 ms of CPU each)."""
    folder = _queue(tmp_path / "curation")
    return Curator(create_app(Workspace(folder)), "ana"), folder


@FAST
@given(host=st.from_regex(r"[a-z][a-z0-9-]{0,15}(\.[a-z]{2,6}){0,2}", fullmatch=True))
def test_a_request_naming_another_host_is_refused_and_writes_nothing(ana_on_a_queue, host):
    assume(host != "localhost")
    ana, folder = ana_on_a_queue
    rebound = {"host": f"{host}:8765", "origin": f"http://{host}:8765"}  # DNS rebinding: both name the attacker
    assert ana.client.get("/", headers=rebound).status_code == 400
    assert ana.label("t1", action="later", **{}).status_code == 303  # the same post, to this server
    before = _files(folder)
    reply = ana.client.post("/trace/t2", data={"csrf": ana.csrf, "action": "later"}, headers=rebound)
    assert reply.status_code == 400 and _files(folder) == before


@pytest.mark.parametrize("host", ["127.0.0.1:8765", "localhost:8765", "[::1]:8765", "LOCALHOST", "127.0.0.1"])
def test_the_loopback_names_are_answered(tmp_path, host):
    client = client_of(create_app(Workspace(_queue(tmp_path))))
    assert client.get("/curator", headers={"host": host}).status_code == 200


# 4. the curator cookie

@pytest.mark.parametrize("cookie", ["../../evil", "sub/dir", "../labels2/x", ".hidden", "..", "a" * 65, "ana/"])
def test_a_forged_curator_cookie_names_no_one_and_writes_nowhere(tmp_path, cookie):
    folder = _queue(tmp_path / "curation")
    app = create_app(Workspace(folder))
    assert Curator(app, "ana").label("t1", **ACCEPT).status_code == 303
    before = _files(tmp_path)
    forged = client_of(app, raise_server_exceptions=False)
    csrf = csrf_of(forged.get("/curator").text)
    forged.cookies.set("rl_curator", cookie)
    for action in ("undo", "later"):
        reply = forged.post("/trace/t1", data={"csrf": csrf, "action": action}, follow_redirects=False)
        assert (reply.status_code, reply.headers.get("location")) == (303, "/curator")
    made = forged.post("/releases", data={"csrf": csrf, "notes": "n"}, follow_redirects=False)
    assert (made.status_code, made.headers.get("location")) == (303, "/curator")  # released_by: no one
    assert _files(tmp_path) == before


def test_the_store_refuses_a_curator_or_batch_that_is_no_file_name(tmp_path):
    folder = _queue(tmp_path / "curation")
    workspace = Workspace(folder)
    for curator in ("../x", "sub/dir", ".hidden", ""):
        with pytest.raises(ValueError, match="curator"):
            workspace.undo(curator, "t1")
        assert workspace.save_label(curator, "t1", {"decision": "later"}).errors
    labels = folder / "labels"
    labels.mkdir()
    hostile = [{"trace_id": "t1", "decision": "later", "batch": "../../evil", "labeled_at": f"2026-11-0{day}T10:00"}
               for day in (1, 2)]
    (labels / "ben-b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hostile))
    assert workspace.undo("ana", "t1") == "later"
    assert sorted(_files(tmp_path)) == ["curation/labels/ana-queue.jsonl", "curation/labels/ben-b.jsonl",
                                        "curation/queue/b.parquet"]


# 6. a tampered release

def _released(goldens: Path) -> None:
    publish_release(goldens, [{"name": golden_id("t1"), "input": "question t1", "expected_output": "Fifteen days.",
                               "additional_metadata": {"trace_id": "t1", "origin": "production_failure",
                                                       "failure_type": "retrieval", "tags": ["en"]}}],
                    "first", "ana", {})


def test_a_tampered_release_is_shown_on_the_releases_page_and_labelling_goes_on(tmp_path):
    folder, goldens = _queue(tmp_path / "curation"), tmp_path / "goldens"
    _released(goldens)
    app = create_app(Workspace(folder, goldens_dir=goldens))
    ana = Curator(app, "ana")
    assert "In release <a href=\"/releases\">v0001</a>" in ana.client.get("/trace/t1").text
    (goldens / "v0001" / "goldens.json").write_text("[]\n")  # edited after the release
    page = ana.client.get("/releases")
    assert page.status_code == 200 and "This release cannot be used" in page.text
    assert "does not match its manifest" in page.text and "what the next one would change is unknown" in page.text
    trace = ana.client.get("/trace/t1")
    assert trace.status_code == 200 and "The newest release, v0001, cannot be read" in trace.text
    assert ana.label("t1", **ACCEPT).status_code == 303 and ana.label("t2", action="later").status_code == 303
    (goldens / "v0002").mkdir()
    (goldens / "v0002" / "manifest.json").write_text("{")  # a manifest that is no JSON
    again = ana.client.get("/releases")
    assert again.status_code == 200 and again.text.count("This release cannot be used") == 2


# 7. sizes

def test_a_form_over_the_size_limit_is_refused_with_why_and_nothing_is_written(tmp_path):
    folder = _queue(tmp_path)
    ana = Curator(create_app(Workspace(folder)), "ana")
    huge = {**ACCEPT, "expected_output": "x" * (MAX_BODY_BYTES + 1)}
    reply = ana.label("t1", **huge)
    assert reply.status_code == 413 and "larger than 512 KiB" in reply.text and "Nothing was saved" in reply.text

    def streamed():  # no Content-Length: counted as it arrives
        yield f"csrf={ana.csrf}&action=later&expected_output=".encode()
        for _ in range(MAX_BODY_BYTES // 10_000 + 1):
            yield b"x" * 10_000
    reply = ana.client.post("/trace/t1", content=streamed(),
                            headers={"content-type": "application/x-www-form-urlencoded"})
    assert reply.status_code == 413 and not (folder / "labels").exists()


@pytest.mark.parametrize("field, size, error", [("expected_output", 20_001, "at most 20,000 (a page shows"),
                                                ("reject_reason", 2_001, "at most 2,000 (a reason")])
def test_a_field_over_its_limit_is_refused_with_why_and_the_text_comes_back(tmp_path, field, size, error):
    folder = _queue(tmp_path)
    ana = Curator(create_app(Workspace(folder)), "ana")
    form = {**ACCEPT, field: "é" * size} if field == "expected_output" else \
        {"action": "reject", "reject_reason": "é" * size}
    reply = ana.label("t1", **form)
    assert reply.status_code == 422 and error in reply.text and "é" * size in reply.text
    assert f"{size:,} characters" in reply.text and not (folder / "labels").exists()
    checked = ana.client.post("/check/t1", data={"csrf": ana.csrf, **form}).json()
    assert any(error in e for e in checked["errors"]) or field == "reject_reason"


def test_a_save_reads_again_only_the_label_file_it_wrote(tmp_path):
    folder = _queue(tmp_path, trace_ids=("t1", "x1", "x2"))
    labels = folder / "labels"
    labels.mkdir()
    for trace in ("x1", "x2"):
        (labels / f"ben-{trace}.jsonl").write_text(json.dumps({"trace_id": trace, "decision": "later",
                                                                "curator": "ben"}) + "\n")
    workspace = Workspace(folder)
    ana = Curator(create_app(workspace), "ana")
    assert {t: d.curator for t, d in workspace.decisions().items()} == {"x1": "ben", "x2": "ben"}
    for trace in ("x1", "x2"):  # the same size and time: unchanged to anyone who reads by stat
        path = labels / f"ben-{trace}.jsonl"
        stat = path.stat()
        path.write_text(path.read_text().replace("ben", "BEN"))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ana.label("t1", action="later").status_code == 303
    assert {t: d.curator for t, d in workspace.decisions().items()} == {"x1": "ben", "x2": "ben", "t1": "ana"}


# the smaller ones

def test_release_notes_with_a_nul_are_refused_with_why(tmp_path):
    def release(notes, by):  # as release_in_own_process passes them: arguments of a process
        subprocess.run([sys.executable, "-c", "pass", notes, by], check=True)
        return Launched(True, "release_goldens: SUCCESS")
    app = create_app(Workspace(_queue(tmp_path / "curation"), goldens_dir=tmp_path / "goldens"), release=release)
    ana = Curator(app, "ana")
    reply = ana.client.post("/releases", data={"csrf": ana.csrf, "notes": "June\x00refresh"})
    assert reply.status_code == 422 and "notes: a control character (U+0000) at position 5" in reply.text


def test_a_release_run_that_made_nothing_does_not_say_it_released(tmp_path):
    goldens = tmp_path / "goldens"
    _released(goldens)
    made = []

    def release(notes, by):
        if made:  # the second run finds nothing new, like release_goldens on unchanged labels
            return Launched(True, "release_goldens: SUCCESS (run 2)")
        made.append(notes)
        (goldens / "v0002").mkdir()
        (goldens / "v0001" / "manifest.json").rename(goldens / "v0002" / "manifest.json")
        return Launched(True, "release_goldens: SUCCESS (run 1)")
    ana = Curator(create_app(Workspace(_queue(tmp_path / "curation"), goldens_dir=goldens), release=release), "ana")
    first = ana.client.post("/releases", data={"csrf": ana.csrf, "notes": "new goldens"}).text
    assert re.search(r'<pre class="ok" id="release-outcome">release_goldens: SUCCESS \(run 1\)\nreleased v0002', first)
    second = ana.client.post("/releases", data={"csrf": ana.csrf, "notes": "again"}).text
    assert '<pre class="nothing"' in second
    assert "nothing was released: the accepted labels give the goldens of v0002 again" in second


HIDDEN = "\u202e"


def test_every_trace_field_is_shown_with_its_bidi_controls_visible(tmp_path):
    text = f"x{HIDDEN}gnp.exe"
    row = {"trace_id": "t1", "batch": "b", "priority": text, "language": text, "input": text, "actual_output": text,
           "cluster_id": text, "cluster_label": text, "cluster_size": text, "signals": [text],
           "suggested_failure_type": text, "suggestion_reason": text, "suggested_origin": text,
           "retrieval_context": [], "judge_scores": {text: {"score": text, "passed": False, "reason": text}}}
    details = {"t1": {"timestamp": text, "language": text, "rag_version": text, "prompt_version": text,
                      "index_version": text, "status": text, "rewritten_query": text,
                      "retrieved": [{"chunk_id": text, "doc_id": text, "doc_version": text, "rank": text,
                                     "score": text, "rerank_score": text, "selected": True, "text": text}],
                      "phrasings": [{"query": text, "count": text}], "feedback": [{"comment": text}]}}
    export_for_workspace([row], details, tmp_path / "queue", "b")
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "ben-b.jsonl").write_text(json.dumps(
        {"trace_id": "t1", "decision": "reject", "reject_reason": text, "curator": "ben"}) + "\n")
    ana = Curator(create_app(Workspace(tmp_path)), "ana")
    error = ana.label("t1", action="accept", expected_output="x", source=[f"doc{HIDDEN}"], origin="manual",
                      failure_type="none")
    for page in (ana.client.get("/").text, ana.client.get("/trace/t1").text, error.text):
        visible = re.sub(r'="[^"]*"', "", page)  # attribute values keep ids as they are
        visible = re.sub(r"<textarea[^>]*>[^<]*</textarea>", "", visible)  # what the curator typed, to edit
        assert HIDDEN not in visible and "[U+202E]" in visible


def test_reports_keep_their_policy_and_nothing_outside_the_folder_is_served(tmp_path):
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "release-v0001.html").write_text("<style>h1 { color: red }</style><h1>report</h1>")
    (tmp_path / "secret.html").write_text("not a report")
    (reports / "link.html").symlink_to(tmp_path / "secret.html")
    client = client_of(create_app(Workspace(_queue(tmp_path / "curation"), reports)))
    served = client.get("/reports/release-v0001.html")
    assert served.headers["content-security-policy"] == REPORT_POLICY
    assert "style-src 'unsafe-inline'" in REPORT_POLICY and "sandbox" in REPORT_POLICY and "script" not in REPORT_POLICY
    assert client.get("/curator").headers["content-security-policy"].startswith("default-src 'none'; script-src")
    assert client.get("/reports/link.html").status_code == 404
    assert client.get("/reports/" + "a" * 5_000 + ".html").status_code == 404


@pytest.mark.parametrize("number", ["abc", "1e20", "-1", "9" * 30, "١", "", "2.5"])
def test_any_page_number_shows_a_page(tmp_path, number):
    ana = Curator(create_app(Workspace(_queue(tmp_path))), "ana")
    assert ana.client.get("/", params={"page": number}).status_code == 200


@FAST
@given(path=st.from_regex(r"/{2,4}[a-z.]{1,20}/?", fullmatch=True))  # (a browser reads a backslash there as "/")
def test_the_token_link_never_leaves_the_site(tmp_path_factory, path):
    client = client_of(create_app(Workspace(tmp_path_factory.mktemp("c")), token="T"))
    reply = client.get(f"{BASE_URL}{path}", params={"token": "T"}, follow_redirects=False)
    location = reply.headers["location"]
    assert reply.status_code == 303 and location.startswith("/") and not location.startswith(("//", "/\\"))
    assert urljoin(BASE_URL, location).startswith(BASE_URL + "/")


@given(st.text(alphabet="/\\.:@ab", max_size=12))
def test_a_local_path_stays_on_this_server(path):
    assert urljoin(BASE_URL, local_path(path).replace("\\", "/")).startswith(BASE_URL + "/")


DOT_SEGMENTS = [".", "..", "a/../b", "x/./y", "d/../../e", "c/..", "sp ace?#f", "..."]


@FAST  # every named shape in one queue each run (the example), then random mixes of them and more
@example(ids=DOT_SEGMENTS)
@given(st.lists(st.one_of(st.sampled_from(DOT_SEGMENTS), st.text(alphabet="./ab?#", min_size=1, max_size=6)),
                min_size=1, max_size=6, unique=True))
def test_a_trace_id_with_dot_segments_opens_from_the_queue(ana_on_a_queue, ids):
    """Ids a browser would resolve away as a path (`.`, `..`, `a/../b`; "%2e" is a dot to
    it too) open from the queue's links, and the trace page's label form posts to the same
    trace. (A "%" is decoded twice by the test client, so none is generated.)"""
    ana, folder = ana_on_a_queue
    _queue(folder, trace_ids=ids)  # the same batch, replaced: the pages read it again
    links = re.findall(r'<a href="(/trace[^"]+)" class="text"', ana.client.get("/").text)
    assert len(links) == len(ids)
    opened = set()
    for link in links:
        page = ana.client.get(urljoin(BASE_URL, html.unescape(link)))  # as a browser resolves it
        assert page.status_code == 200
        opened.add(html.unescape(re.search(r"<code>(.*?)</code>", page.text, re.S).group(1)))
        action = html.unescape(re.search(r'<form method="post" action="([^"]+)" class="label"', page.text).group(1))
        again = ana.client.get(urljoin(BASE_URL, action))
        assert again.status_code == 200 and again.text == page.text
    assert opened == set(ids)


def test_a_label_typed_while_the_queue_is_replaced_comes_back_with_its_text(tmp_path):
    folder = _queue(tmp_path, trace_ids=("t1",), batch="b1")
    ana = Curator(create_app(Workspace(folder)), "ana")
    assert ana.client.get("/trace/t1").status_code == 200
    (folder / "queue" / "b1.parquet").unlink()  # the next queue run: a new batch without t1
    _queue(folder, trace_ids=("t9",), batch="b2")
    typed = {**ACCEPT, "expected_output": "Fifteen days a year,\nsee the handbook.", "tags": "leave, en"}
    reply = ana.label("t1", **typed)
    assert reply.status_code == 409 and "<b>not saved</b>" in reply.text
    assert "Fifteen days a year,\nsee the handbook.</textarea>" in reply.text and "leave, en" in reply.text
    assert not (folder / "labels").exists()


LINE = {"trace_id": "t1", "batch": "b", "decision": "later", "curator": "ben"}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["save", "append", "cut", "rewrite", "truncate", "timeless"]),
                          st.sampled_from(["t1", "t2"]), st.sampled_from(["later", "reject"])), max_size=8))
def test_reading_on_from_where_it_stopped_shows_what_reading_every_file_shows(tmp_path_factory, steps):
    """Whatever happens to a label file between two pages (a save, another writer's line, a cut
    line, an edit in place, a shorter file, a row timed by its file), the workspace that reads
    on shows what a fresh one shows."""
    folder = _queue(tmp_path_factory.mktemp("curation"))
    path = folder / "labels" / "ana-b.jsonl"
    workspace = Workspace(folder)
    for number, (step, trace_id, decision) in enumerate(steps):
        row = {**LINE, "trace_id": trace_id, "decision": decision, "reject_reason": "duplicate",
               "labeled_at": f"2026-11-05T10:{number:02d}:00+00:00"}
        if step == "save":
            assert not workspace.save_label("ana", trace_id, {"decision": "later"}).errors
        elif step in ("append", "cut", "timeless"):
            line = json.dumps({k: v for k, v in row.items() if step != "timeless" or k != "labeled_at"}) + "\n"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as handle:
                handle.write(line[:len(line) // 2] if step == "cut" else line)
        elif path.exists():
            text = path.read_text()
            path.write_text(text.replace('"later"', '"reject"') + json.dumps(row) + "\n" if step == "rewrite"
                            else text[:len(text) // 3])
        assert workspace.decisions() == Workspace(folder).decisions()
