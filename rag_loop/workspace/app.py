"""The curator workspace: a small Starlette app over the files of one deployment's curation
folder (`rag-loop serve`, `make curate`). Server-rendered Jinja2 pages, one vendored script for
keyboard shortcuts and the source search; nothing is fetched from elsewhere."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rag_loop.curation.label_rules import OWN_VERDICT_METRICS
from rag_loop.evaluation.trust import JudgeTrust, trust_in_rows
from rag_loop.goldens.release import release_request_errors
from rag_loop.schema import FailureType, Origin
from rag_loop.store.releases import release_versions
from rag_loop.workspace.dashboard import layers as dashboard_layers
from rag_loop.workspace.display import PRIORITY_HELP, PRIORITY_LEGEND, language_code, recorded
from rag_loop.workspace.incidents import (
    INCIDENT_ID,
    IncidentCommands,
    IncidentForm,
    close_errors,
    goldens_of,
    incident_list,
    open_request,
    postmortem_html,
    read_summary,
)
from rag_loop.workspace.intent_map import intent_map
from rag_loop.workspace.releases import Launched, newest_release, outcome, pending, releases
from rag_loop.workspace.security import (
    CSRF_COOKIE,
    CURATOR_COOKIE,
    HEADERS,
    LOOPBACK_HOSTS,
    REPORT_POLICY,
    TOKEN_COOKIE,
    BodyLimit,
    local_path,
    new_token,
    origin_allowed,
    path_part,
    same,
    shown,
    trace_url,
)
from rag_loop.workspace.store import FILTERS, INTENT_SORTS, STATUSES, Workspace, valid_curator

HERE = Path(__file__).resolve().parent
FAILURE_TYPE_HELP = {
    "retrieval": "The right document was not retrieved (or nothing was).",
    "reranking": "The right chunk was retrieved but ranked out of the context.",
    "context": "The context had the answer but was cut, mixed or misleading.",
    "generation": "The context was right; the answer got it wrong or made things up.",
    "data_freshness": "The documents were outdated: a newer version says otherwise.",
    "query_rewrite": "A follow-up question was not rewritten into a full question.",
    "policy": "The answer broke a rule (safety, privacy, tone), whatever the facts.",
    "none": "Nothing failed: a good answer worth keeping as a regression test.",
}
ORIGIN_HELP = {
    "production_failure": "A real user's request that went wrong.",
    "production_sample": "A real request from the random sample, kept as a quality reference.",
    "incident": "A request from an incident report or postmortem.",
    "synthetic": "A question written or generated to cover a gap.",
    "manual": "Added by hand for another reason.",
}


MAX_PAGE = 1_000_000  # a queue page number past this is no page anyone reached by "next"
REPORT_NAME = re.compile(r"[\w-][\w.-]{0,199}\.html")  # what reports are called: a name, not a path
MAX_FORM_FIELDS = 500
NO_RELEASE = "This workspace was started without a way to release: start it with `rag-loop serve`."
NO_INCIDENTS = ("This workspace was started without a way to record incidents: start it with `rag-loop serve`, "
                "or run `rag-loop incident open` / `close`.")


def create_app(workspace: Workspace, token: str | None = None,
               release: Callable[[str, str], Launched] | None = None,
               hosts: Sequence[str] = LOOPBACK_HOSTS, incidents: IncidentCommands | None = None) -> Starlette:
    """The app; with `token`, every request must carry it (required off loopback). `release`
    makes a golden release (`rag-loop serve` gives one from rag_loop_dagster.releasing; without
    it the page says so and releases nothing). `hosts`: the
    Host header values it answers (`served_hosts`; default: the loopback names), any other is
    refused (400), so a rebound DNS name of another site never reaches it. `incidents` opens and
    closes incidents (`rag-loop incident` in its own process); without it the incident pages
    show what the reports folder holds and say how to record one."""
    templates = Environment(loader=FileSystemLoader(HERE / "templates"),
                            autoescape=select_autoescape(default=True, default_for_string=True))
    templates.filters["shown"] = shown
    templates.filters["path_part"] = path_part
    templates.filters["trace_url"] = trace_url
    templates.filters["recorded"] = recorded
    templates.filters["language_code"] = language_code
    templates.globals.update(priority_help=PRIORITY_HELP, priority_legend=PRIORITY_LEGEND)

    def page(request: Request, template: str, code: int = 200, **values) -> HTMLResponse:
        html = templates.get_template(template).render(csrf=request.state.csrf, curator=request.state.curator,
                                                   **values)
        return HTMLResponse(html, status_code=code)

    async def queue(request: Request) -> Response:
        if not request.state.curator:
            return RedirectResponse("/curator", status_code=303)
        filters = {k: request.query_params.get(k, "") for k in (*FILTERS, "signal")}
        status = request.query_params.get("status", "")
        page_number = page_of(request.query_params.get("page", ""))
        rows, matching = workspace.rows(filters, status if status in STATUSES else "", page_number)
        query = {k: v for k, v in {**filters, "status": status}.items() if v}
        return page(request, "queue.html", rows=rows, matching=matching, filters=filters, status=status,
                    choices=workspace.choices(), statuses=STATUSES, progress=workspace.progress(),
                    page_number=page_number, query=urlencode(query), queue_file=workspace.queue_file(),
                    decisions=workspace.decisions())

    async def trace(request: Request) -> Response:
        if not request.state.curator:
            return RedirectResponse("/curator", status_code=303)
        trace_id = _trace_id(request)
        row = workspace.row(trace_id)
        form = await _form(request) if request.method == "POST" else {}
        if row is None:  # not in the newest export: a label typed before it was replaced is shown again
            answer = _answer(form) if form.get("action", [""])[0] not in ("", "undo") else {}
            return page(request, "missing.html", 409 if answer else 404, trace_id=trace_id, answer=answer,
                        queue_file=workspace.queue_file())
        if request.method == "POST":
            if form.get("action", [""])[0] == "undo":
                workspace.undo(request.state.curator, trace_id)
                return RedirectResponse(trace_url(trace_id), status_code=303)
            answer = _answer(form)
            try:
                checked = workspace.save_label(request.state.curator, trace_id, answer)
            except OSError as error:  # a full disk: say so, and give the text back
                return page(request, "trace.html", 503, row=row, answer=answer, **_help(workspace, row, answer),
                            errors=[f"the label could not be written ({error.strerror or error}): nothing "
                                    "was saved; try again once the disk has room"])
            if checked.errors:
                return page(request, "trace.html", 422, row=row, errors=checked.errors, answer=answer,
                            **_help(workspace, row, answer))
            following = _next_url(workspace, trace_id)
            saved = urlencode({"saved": trace_id, "as": answer["decision"]})
            return RedirectResponse(f"{following}{'&' if '?' in following else '?'}{saved}", status_code=303)
        saved = request.query_params.get("saved")
        return page(request, "trace.html", row=row, errors=[], answer={}, saved=saved,
                    saved_as=request.query_params.get("as", ""), **_help(workspace, row, {}))

    async def check(request: Request) -> Response:
        trace_id = _trace_id(request)
        form = {"action": ["accept"], **(await _form(request))}  # what an accept would say
        checked, _ = workspace.check(request.state.curator, trace_id, _answer(form))
        return JSONResponse({"errors": checked.errors, "warnings": checked.warnings})

    async def sources(request: Request) -> Response:
        hits = workspace.search_sources(request.query_params.get("q", ""))
        note = None if hits else workspace.sources_note()  # why nothing can be found, not just no match
        return JSONResponse([{k: v for k, v in hit.items() if k != "text"} | {"text": shown(hit["text"], 300)}
                             for hit in hits], headers={"X-Sources-Note": note} if note else None)

    async def curator(request: Request) -> Response:
        if request.method == "POST":
            name = (await _form(request)).get("curator", [""])[0].strip()
            if not valid_curator(name):
                return page(request, "curator.html", 422, name=name,
                            error="letters, digits and . @ + - only, at most 64, not starting with a dot "
                                  "(the name is part of your label file's name)")
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(CURATOR_COOKIE, name, httponly=True, samesite="strict")
            return response
        return page(request, "curator.html", error=None, name=request.state.curator or "")

    async def intents(request: Request) -> Response:
        sort = request.query_params.get("sort", "volume")
        clusters = workspace.intents(sort)
        return page(request, "intents.html", clusters=[_clean(c) for c in clusters], sort=sort, sorts=INTENT_SORTS,
                    map=intent_map(clusters))

    async def releases_page(request: Request) -> Response:
        if not request.state.curator:
            return RedirectResponse("/curator", status_code=303)
        launched = None
        goldens = workspace.goldens_dir
        if request.method == "POST":
            notes = (await _form(request)).get("notes", [""])[0].strip()
            if errors := release_request_errors(notes, request.state.curator):
                launched = Launched(False, "\n".join(errors))
            elif release is None:
                launched = Launched(False, NO_RELEASE)
            else:
                before = release_versions(goldens) if goldens else []
                launched = await run_in_threadpool(release, notes, request.state.curator)
                launched = outcome(launched, before, release_versions(goldens) if goldens else [])
        newest = newest_release(goldens)
        return page(request, "releases.html", 200 if launched is None or launched.ok else 422,
                    releases=releases(goldens) if goldens else [], launched=launched, newest=newest,
                    pending=pending(goldens, workspace.decisions()) if goldens and not newest.problem
                    else {"new": [], "changed": [], "withdrawn": []})

    async def incidents_page(request: Request) -> Response:
        if not request.state.curator:
            return RedirectResponse("/curator", status_code=303)
        form, errors, ran = IncidentForm(), [], None
        if request.method == "POST":
            sent = {k: v[0] for k, v in (await _form(request)).items() if v}
            form = IncidentForm(sent.get("from", ""), sent.get("to", ""), sent.get("slices", ""), sent.get("title", ""))
            wanted, errors = open_request(form, request.state.curator)
            if wanted is not None and incidents is None:
                errors = [NO_INCIDENTS]
            elif wanted is not None:
                ran = await run_in_threadpool(incidents.open, wanted, form)
                if ran.ok and ran.incident_id:
                    return RedirectResponse(f"/incidents/{ran.incident_id}?opened=1", status_code=303)
        return page(request, "incidents.html", 422 if errors or (ran and not ran.ok) else 200,
                    incidents=incident_list(workspace.reports_dir), form=form, errors=errors, ran=ran,
                    can_record=incidents is not None, no_incidents=NO_INCIDENTS)

    async def incident_page(request: Request) -> Response:
        if not request.state.curator:
            return RedirectResponse("/curator", status_code=303)
        incident_id = request.path_params["incident_id"]
        if not INCIDENT_ID.fullmatch(incident_id):
            return page(request, "missing.html", 404, trace_id=incident_id, what="incident")
        errors, ran, actions, chosen = [], None, "", ""
        if read_summary(workspace.reports_dir, incident_id) is None:  # none here to show or close
            return page(request, "missing.html", 404, trace_id=incident_id, what="incident")
        if request.method == "POST":
            sent = {k: v[0] for k, v in (await _form(request)).items() if v}
            actions, chosen = sent.get("actions", ""), sent.get("release", "").strip()
            errors = close_errors(actions, chosen, workspace.goldens_dir) or \
                ([NO_INCIDENTS] if incidents is None else [])
            if not errors:
                ran = await run_in_threadpool(incidents.close, incident_id, actions, chosen or None)
                if ran.ok:
                    return RedirectResponse(f"/incidents/{incident_id}?closed=1", status_code=303)
        found = read_summary(workspace.reports_dir, incident_id) or {"incident_id": incident_id}
        failing = found.get("failing_traces") if isinstance(found.get("failing_traces"), list) else []
        trace_ids = {str(t.get("trace_id")) for t in failing if isinstance(t, dict)}
        queued = workspace.incident_rows(incident_id)
        in_queue = {r["trace_id"] for r in queued}
        return page(request, "incident.html", 422 if errors or (ran and not ran.ok) else 200,
                    incident=found, postmortem=postmortem_html(workspace.reports_dir, incident_id),
                    queued=queued,
                    others=[t for t in failing if isinstance(t, dict) and t.get("trace_id") not in in_queue],
                    goldens=goldens_of(workspace.goldens_dir, incident_id, trace_ids),
                    releases=release_versions(workspace.goldens_dir) if workspace.goldens_dir else [],
                    errors=errors, ran=ran, actions=actions, chosen=chosen, can_record=incidents is not None,
                    no_incidents=NO_INCIDENTS, opened=bool(request.query_params.get("opened")),
                    closed=bool(request.query_params.get("closed")))

    async def evals(request: Request) -> Response:
        return page(request, "evals.html", runs=workspace.eval_runs())

    async def compare(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        runs = {r["run_id"]: r for r in workspace.eval_runs()}
        if run_id not in runs:
            return page(request, "missing.html", 404, trace_id=run_id)
        baseline = request.query_params.get("baseline") or runs[run_id].get("baseline_run_id") or ""
        rows = workspace.compare(run_id, baseline if baseline in runs else None)
        return page(request, "compare.html", run=runs[run_id], baseline=runs.get(baseline), rows=rows,
                    runs=list(runs), flips=sum(bool(r["flipped"]) for r in rows))

    async def dashboard(request: Request) -> Response:
        figures, problem = workspace.dashboard()
        agreement, agreement_problem = workspace.judge_agreement()
        return page(request, "dashboard.html", figures=figures, problem=problem, agreement=agreement,
                    agreement_problem=agreement_problem,
                    layers=dashboard_layers(figures, getattr(release, "url", None)) if figures else [])

    async def report(request: Request) -> Response:
        name = request.path_params["name"]
        path = report_path(workspace.reports_dir, name)
        if path is None:
            return page(request, "missing.html", 404, trace_id=name, what="report")
        return FileResponse(path, media_type="text/html", headers={"Content-Security-Policy": REPORT_POLICY})

    routes = [Route("/", queue), Route("/check/{trace_id:path}", check, methods=["POST"]),
              Route("/check", check, methods=["POST"]), Route("/trace", trace, methods=["GET", "POST"]),
              Route("/trace/{trace_id:path}", trace, methods=["GET", "POST"]),
              Route("/sources", sources), Route("/curator", curator, methods=["GET", "POST"]),
              Route("/reports/{name}", report), Route("/intents", intents), Route("/evals", evals),
              Route("/dashboard", dashboard),
              Route("/releases", releases_page, methods=["GET", "POST"]),
              Route("/incidents", incidents_page, methods=["GET", "POST"]),
              Route("/incidents/{incident_id}", incident_page, methods=["GET", "POST"]),
              Route("/evals/{run_id}", compare),
              Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static")]
    return Starlette(routes=routes, middleware=[
        Middleware(TrustedHostMiddleware, allowed_hosts=list(hosts), www_redirect=False),
        Middleware(BodyLimit), Middleware(Guard, token=token)])


def page_of(value: str) -> int:
    """A queue page number from the URL: digits, at most MAX_PAGE; anything else is the first page."""
    return min(int(value), MAX_PAGE) if value.isascii() and value.isdigit() else 0


def report_path(folder: Path | None, name: str) -> Path | None:
    """The report file `name` names: a plain `.html` name in `folder`, a file there and not a link
    out of it (the resolved path must stay in the folder); None for anything else."""
    if folder is None or not REPORT_NAME.fullmatch(name):
        return None
    try:
        path = (folder / name).resolve()
        return path if path.parent == folder.resolve() and path.is_file() else None
    except OSError:
        return None


class Guard(BaseHTTPMiddleware):
    """Token, CSRF and the curator's identity on every request; security headers on every reply."""

    def __init__(self, app, token: str | None = None):
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next) -> Response:
        if self.token and not same(request.cookies.get(TOKEN_COOKIE), self.token):
            if same(request.query_params.get("token"), self.token):
                response = RedirectResponse(local_path(request.url.path), status_code=303)
                response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
                return _secured(response)
            return _secured(HTMLResponse("<h1>401</h1><p>This workspace needs its token: open the link "
                                         "with <code>?token=…</code>.</p>", status_code=401))
        csrf = request.cookies.get(CSRF_COOKIE) or new_token()
        request.state.csrf = csrf
        curator = request.cookies.get(CURATOR_COOKIE, "")
        request.state.curator = curator if valid_curator(curator) else ""  # a forged cookie names no one
        if request.method == "POST":
            try:
                form = await _form(request)
            except ValueError:
                return _secured(HTMLResponse(f"<h1>413</h1><p>The form has more than {MAX_FORM_FIELDS} fields, "
                                             "the most a workspace form has: nothing was saved.</p>",
                                             status_code=413))
            if not (same(form.get("csrf", [""])[0], request.cookies.get(CSRF_COOKIE))
                    and origin_allowed(request.headers.get("origin"), request.headers.get("host"))):
                return _secured(HTMLResponse("<h1>403</h1><p>The form did not come from this workspace "
                                             "(reload the page and try again).</p>", status_code=403))
        response = await call_next(request)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict")
        return _secured(response)


def _secured(response: Response) -> Response:
    """The security headers, but where a route set its own (a report's policy)."""
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


async def _form(request: Request) -> dict[str, list[str]]:
    """The urlencoded form (read once; the body is cached by Starlette). A ValueError when it
    has more than MAX_FORM_FIELDS fields."""
    body = await request.body()
    return parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)


def _answer(form: dict[str, list[str]]) -> dict:
    one = {k: v[0] for k, v in form.items() if v}
    decision = one.get("action", "")
    answer = {"decision": decision}
    if decision == "accept":
        answer.update(expected_output=one.get("expected_output", "").strip(),
                      expected_sources=[s for s in form.get("source", []) if s.strip()],
                      tags=[t.strip() for t in one.get("tags", "").split(",") if t.strip()],
                      origin=one.get("origin", ""), failure_type=one.get("failure_type", ""))
    if decision == "reject":
        answer["reject_reason"] = one.get("reject_reason", "").strip()
    grades = _grades(form)
    if grades:
        answer["judge_grades"] = grades
    return answer


def _grades(form: dict[str, list[str]]) -> list[dict[str, str]]:
    """The judge grades of a form: `grade:<metric>` (agree / disagree) and `own:<metric>` (pass /
    fail), one entry per metric with either; the values are checked by the label rules."""
    metrics: dict[str, dict[str, str]] = {}
    for key, values in form.items():
        kind, _, metric = key.partition(":")
        if kind in ("grade", "own") and metric and values and values[0].strip():
            metrics.setdefault(metric, {"metric": metric})["grade" if kind == "grade" else "curator_passed"] = \
                values[0].strip()
    return list(metrics.values())


def _help(workspace: Workspace, row: dict, answer: dict) -> dict:
    trace_id = row["trace_id"]
    newest = newest_release(workspace.goldens_dir)
    decision = workspace.decisions().get(trace_id)
    return {"own_verdict_metrics": OWN_VERDICT_METRICS, "trust": _trust(workspace, row),
            "graded": _graded(answer.get("judge_grades", []) if answer
                              else decision.judge_grades if decision else ()),
            "release": newest.version, "golden": newest.goldens.get(trace_id), "release_problem": newest.problem,
            "failure_types": [(f.value, FAILURE_TYPE_HELP.get(f.value, "")) for f in FailureType],
            "origins": [(o.value, ORIGIN_HELP.get(o.value, "")) for o in Origin],
            "decision": decision}


def _trust(workspace: Workspace, row: dict) -> dict[str, JudgeTrust]:
    """Per metric the judge scored on the trace, how well that judge version agrees with
    curators (the exported agreement, the default trust floor): said beside each verdict, and
    beside a P1 priority the judge's Faithfulness verdict raised."""
    verdicts = row.get("judge_scores") if isinstance(row.get("judge_scores"), dict) else {}
    rows = workspace.judge_agreement()[0] if verdicts else []
    return {metric: trust_in_rows(rows, metric, str(verdict.get("judge_version") or ""))
            for metric, verdict in verdicts.items() if isinstance(verdict, dict)}


def _graded(grades) -> dict[str, dict[str, str]]:
    """Per metric, the grade and own verdict a form shows: what the curator just sent (a form
    given back with its errors), else the current label's (a relabel keeps them unless changed)."""
    words = {True: "pass", False: "fail", "pass": "pass", "fail": "fail"}
    return {str(g.get("metric")): {"grade": str(g.get("grade") or ""),
                                   "own": words.get(g.get("curator_passed"), "")}  # type: ignore[arg-type]
            for g in grades if isinstance(g, dict)}


def _next_url(workspace: Workspace, done: str) -> str:
    rows, _ = workspace.rows({}, "todo", 0, 2)
    following = [r["trace_id"] for r in rows if r["trace_id"] != done]
    return trace_url(following[0]) if following else "/"


def _trace_id(request: Request) -> str:
    """The trace a /trace or /check request names: in its path, or as `id` (`trace_url`)."""
    return request.path_params.get("trace_id", request.query_params.get("id", ""))


def _clean(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
