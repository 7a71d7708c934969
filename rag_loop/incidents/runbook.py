"""Opening, closing and showing an incident: the record, its facts and its postmortem file
(`<reports>/incident-INC-NNNN.md`, rewritten whole, atomically, on every change)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from rag_loop.incidents.facts import Facts, gather, lineage
from rag_loop.incidents.postmortem import render
from rag_loop.incidents.record import (
    MAX_ACTIONS_CHARS,
    IncidentError,
    IncidentRequest,
    checked_text,
    ensure_tables,
    incident_row,
    request_of,
    store_incident,
    window_traces,
)
from rag_loop.store.files import write_atomically
from rag_loop.store.releases import release_versions


@dataclass
class IncidentReport:
    incident: dict
    facts: Facts
    postmortem: Path
    text: str


def postmortem_path(reports_dir: Path, incident_id: str) -> Path:
    return Path(reports_dir) / f"incident-{incident_id}.md"


def _write(con: duckdb.DuckDBPyConnection, incident_id: str, reports_dir: Path, goldens_dir: Path) -> IncidentReport:
    incident = incident_row(con, incident_id)
    facts = gather(con, request_of(incident), reports_dir, goldens_dir, incident_id)
    text = render(incident, facts)
    path = postmortem_path(reports_dir, incident_id)
    Path(reports_dir).mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
    con.execute("UPDATE incidents SET postmortem = ? WHERE incident_id = ?", [str(path), incident_id])
    return IncidentReport(incident_row(con, incident_id), facts, path, text)


def open_incident(con: duckdb.DuckDBPyConnection, request: IncidentRequest, reports_dir: Path,
                  goldens_dir: Path, now: datetime | None = None) -> IncidentReport:
    """Record the incident and its window's traces, and write its postmortem."""
    traces = window_traces(con, request.start, request.end, request.slices, request.query_contains)
    if request.gating_release and request.gating_release not in release_versions(Path(goldens_dir)):
        raise IncidentError(f"no release {request.gating_release} in {goldens_dir}")
    incident_id = store_incident(con, request, traces, request.gating_release, now or datetime.now(UTC))
    return _write(con, incident_id, Path(reports_dir), Path(goldens_dir))


def close_incident(con: duckdb.DuckDBPyConnection, incident_id: str, actions: str, reports_dir: Path,
                   goldens_dir: Path, release: str | None = None, now: datetime | None = None) -> IncidentReport:
    """Record the corrective actions and the release holding the incident's regression goldens
    (default: the newest release holding any; none yet: recorded as none), and rewrite the
    postmortem. Closing again replaces both."""
    ensure_tables(con)
    incident_row(con, incident_id)
    text = checked_text("actions", actions, MAX_ACTIONS_CHARS, required=True)
    versions = release_versions(Path(goldens_dir))
    found = lineage(con, Path(goldens_dir), incident_id)
    if release is not None:
        if release not in versions:
            raise IncidentError(f"no release {release[:20]!r} in {goldens_dir}")
        if release not in found["releases"]:
            raise IncidentError(f"{release} holds no golden from {incident_id}'s traces"
                                + (f" (these do: {', '.join(found['releases'])})" if found["releases"] else ""))
    chosen = release or found["newest_with_goldens"]
    con.execute("UPDATE incidents SET status = 'closed', closed_at = ?, actions = ?, release_version = ? "
                "WHERE incident_id = ?", [now or datetime.now(UTC), text, chosen, incident_id])
    return _write(con, incident_id, Path(reports_dir), Path(goldens_dir))


def show_incident(con: duckdb.DuckDBPyConnection, incident_id: str, reports_dir: Path,
                  goldens_dir: Path) -> IncidentReport:
    """The incident with its facts recomputed (goldens and eval runs since), postmortem rewritten."""
    return _write(con, incident_id, Path(reports_dir), Path(goldens_dir))
