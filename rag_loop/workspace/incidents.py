"""Incidents as the workspace shows and opens them (issue 48). Opening and closing run
`rag-loop incident open|close` — the CLI, so the same library code (`rag_loop.incidents.runbook`)
— in a process of its own: the workspace never opens the database (its lock ends with that
process; a Dagster run holding it is said plainly, and nothing is recorded). What a page shows it
reads from the files the runbook writes into the reports folder: the summary
(`incident-INC-NNNN.json`) and the postmortem (`incident-INC-NNNN.md`, rendered by markdown-it
with raw HTML off, so production text stays text); its traces from the queue export and its
goldens from the releases.

A request is checked with the CLI's own parsers before any process starts (`open_request`), so
a mistyped date or slice comes back on the form with the CLI's message.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markupsafe import Markup

from rag_loop.incidents.facts import incident_goldens
from rag_loop.incidents.record import (
    MAX_ACTIONS_CHARS,
    IncidentError,
    IncidentRequest,
    checked_text,
    parse_instant,
    parse_slices,
)
from rag_loop.store.releases import release_versions
from rag_loop.workspace.security import visible_controls

INCIDENT_ID = re.compile(r"INC-\d{4,12}")
COMMAND_TIMEOUT_SECONDS = 600
# the CLI, run as `rag-loop` runs it (rag_loop_dagster.jobs_cli adds only job commands to it)
CLI = ("-c", "from rag_loop.cli import main; main()")
# raw HTML off (shown as text), tables on, images off (a picture's Markdown stays text: the page
# fetches nothing, and its policy would block another site's image anyway)
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").disable("image")


@dataclass(frozen=True)
class IncidentForm:
    """What the opening form sent: the window, slices (one `key=value` a line), a title."""

    start: str = ""
    end: str = ""
    slices: str = ""
    title: str = ""

    def slice_items(self) -> list[str]:
        return [line.strip() for line in self.slices.splitlines() if line.strip()]


def open_request(form: IncidentForm, curator: str) -> tuple[IncidentRequest | None, list[str]]:
    """The request the CLI would make of `form`, or why it cannot (its own messages)."""
    try:
        if not form.start.strip() or not form.end.strip():
            raise IncidentError("the window needs both ends: from and to (YYYY-MM-DD or an ISO date-time, UTC)")
        return IncidentRequest(parse_instant(form.start), parse_instant(form.end, end=True),
                               parse_slices(form.slice_items()), checked_text("title", form.title, 200),
                               opened_by=curator), []
    except IncidentError as error:
        return None, [str(error)]


def close_errors(actions: str, release: str, goldens_dir: Path | None) -> list[str]:
    """What is wrong with a closing form before the CLI is run: no actions, an unknown release."""
    errors = []
    try:
        checked_text("actions", actions, MAX_ACTIONS_CHARS, required=True)
    except IncidentError as error:
        errors.append(str(error))
    if release and release not in (release_versions(goldens_dir) if goldens_dir else []):
        errors.append(f"no release {release[:20]!r}: pick one of the list")
    return errors


@dataclass
class Ran:
    """What a `rag-loop incident` process said: whether it succeeded, its output, the incident."""

    ok: bool
    output: str
    incident_id: str | None = None


@dataclass
class IncidentCommands:
    """`rag-loop incident open|close` in a process of its own, on this deployment's database
    (`db`; default: the CLI's, RAG_LOOP_DB or the home's) and the workspace's reports and
    goldens folders."""

    reports_dir: Path
    goldens_dir: Path
    db: Path | None = None
    env: Mapping[str, str] | None = None
    timeout: float = COMMAND_TIMEOUT_SECONDS
    python: str = field(default=sys.executable)

    def open(self, request: IncidentRequest, form: IncidentForm) -> Ran:
        """Open the incident `form` asks for (`request`: what `open_request` made of it)."""
        args = ["open", f"--from={form.start.strip()}", f"--to={form.end.strip()}",
                *(f"--slice={item}" for item in form.slice_items()),
                *([f"--title={request.title}"] if request.title else []), f"--by={request.opened_by}"]
        return self._run(args)

    def close(self, incident_id: str, actions: str, release: str | None) -> Ran:
        return self._run(["close", incident_id, f"--actions={actions.strip()}",
                          *([f"--release={release}"] if release else [])], incident_id)

    def _run(self, args: Sequence[str], incident_id: str | None = None) -> Ran:
        command = [self.python, *CLI, "incident", *args, f"--reports-dir={self.reports_dir}",
                   f"--goldens-dir={self.goldens_dir}", *([f"--db={self.db}"] if self.db else [])]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout,
                                  env=dict(self.env if self.env is not None else os.environ))
        except subprocess.TimeoutExpired:
            return Ran(False, f"rag-loop incident did not finish in {self.timeout:.0f} s", incident_id)
        output = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                           if line.strip() and not line.startswith(("Usage:", "Try '"))).strip()
        if done.returncode == 0 and incident_id is None:
            found = INCIDENT_ID.match(done.stdout.strip())
            incident_id = found.group() if found else None
        return Ran(done.returncode == 0, output[-4000:] or f"exit status {done.returncode}", incident_id)


def incident_list(reports_dir: Path | None) -> list[dict[str, Any]]:
    """Every incident whose summary the reports folder holds, newest first; an unreadable
    summary is listed with its problem."""
    found = []
    for path in sorted(reports_dir.glob("incident-INC-*.json"), reverse=True) if reports_dir else []:
        incident_id = path.stem.removeprefix("incident-")
        if INCIDENT_ID.fullmatch(incident_id):
            found.append(read_summary(reports_dir, incident_id) or {"incident_id": incident_id})
    return found


def read_summary(reports_dir: Path | None, incident_id: str) -> dict[str, Any] | None:
    """The incident's summary (its record's fields at the top level), None when there is none,
    `problem` when it cannot be read."""
    if reports_dir is None or not INCIDENT_ID.fullmatch(incident_id):
        return None
    path = reports_dir / f"incident-{incident_id}.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {**data.get("incident", {}), **{k: v for k, v in data.items() if k != "incident"},
                "incident_id": incident_id}
    except (OSError, ValueError, AttributeError) as error:
        return {"incident_id": incident_id, "problem": f"{path.name} cannot be read: {error}"}


def postmortem_html(reports_dir: Path | None, incident_id: str) -> Markup | None:
    """The postmortem rendered to HTML: raw HTML in it is shown as text (markdown-it, html off;
    the runbook escapes production text as well), links only to what markdown-it deems safe,
    bidirectional controls made visible."""
    path = reports_dir / f"incident-{incident_id}.md" if reports_dir and INCIDENT_ID.fullmatch(incident_id) else None
    if path is None or not path.is_file():
        return None
    return Markup(visible_controls(_MARKDOWN.render(path.read_text(encoding="utf-8", errors="replace"))))


def goldens_of(goldens_dir: Path | None, incident_id: str, trace_ids: set[str]) -> list[dict[str, Any]]:
    """The incident's goldens per release (as `rag-loop incident show` finds them); a release
    that cannot be read is skipped by `incident_goldens`' reader raising: said as a row."""
    if goldens_dir is None or not release_versions(goldens_dir):
        return []
    try:
        return incident_goldens(goldens_dir, incident_id, trace_ids).to_dict("records")
    except (OSError, ValueError) as error:
        return [{"version": None, "problem": str(error)}]
