"""Opening, closing and showing an incident: the record, its facts and its postmortem file
(`<reports>/incident-INC-NNNN.md`, rewritten whole, atomically, on every change), with a summary
beside it (`incident-INC-NNNN.json`: the record, the impact figures, the failing traces) that the
curators' workspace reads: it never opens the database."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

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


def summary_path(reports_dir: Path, incident_id: str) -> Path:
    return Path(reports_dir) / f"incident-{incident_id}.json"


MAX_SUMMARY_TRACES = 2_000  # failing traces listed in the summary; `failing` counts them all


def summary(incident: dict, facts: Facts, postmortem: Path) -> dict[str, Any]:
    """What the workspace shows of an incident without the database: the record (instants as
    ISO 8601), the impact figures and its failing traces (at most MAX_SUMMARY_TRACES) with their
    intent and why they failed."""
    failing = facts.traces[facts.traces["failing"]] if len(facts.traces) else facts.traces
    return {"incident": {k: _plain(v) for k, v in incident.items()},
            "window": facts.request.window_text(), "slices": facts.request.slices,
            "requests": int(facts.impact.get("requests") or 0), "failing": int(len(failing)),
            "failing_traces": [{"trace_id": str(t.trace_id), "cluster_id": _plain(t.cluster_id),
                                "candidate": bool(t.candidate), "reasons": [str(r) for r in t.reasons]}
                               for t in failing.head(MAX_SUMMARY_TRACES).itertuples()],
            "postmortem": postmortem.name}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | pd.Timestamp):
        return pd.Timestamp(value).isoformat()
    return None if value is None or (not isinstance(value, list | dict | str) and pd.isna(value)) else value


def _write(con: duckdb.DuckDBPyConnection, incident_id: str, reports_dir: Path, goldens_dir: Path) -> IncidentReport:
    incident = incident_row(con, incident_id)
    facts = gather(con, request_of(incident), reports_dir, goldens_dir, incident_id)
    text = render(incident, facts)
    path = postmortem_path(reports_dir, incident_id)
    Path(reports_dir).mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
    con.execute("UPDATE incidents SET postmortem = ? WHERE incident_id = ?", [str(path), incident_id])
    stored = incident_row(con, incident_id)
    write_atomically(summary_path(reports_dir, incident_id),
                     json.dumps(summary(stored, facts, path), ensure_ascii=False, default=str, indent=1))
    return IncidentReport(stored, facts, path, text)


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
