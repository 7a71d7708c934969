"""The incident tables as the other stages read them (rag_loop.incidents writes them): which
traces belong to which incidents. Here, beside the other shared readers, so that curation and
releases need not import the incidents package."""

from __future__ import annotations

import duckdb

from rag_loop.store.tables import has_table


def open_incident_ids(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Open incidents' failing traces that selection chose ({trace_id: [incident ids]}): what
    the curation queue puts first."""
    if not (has_table(con, "incidents") and has_table(con, "incident_traces")):
        return {}
    rows = con.execute("""SELECT it.trace_id, list(DISTINCT it.incident_id ORDER BY it.incident_id)
                          FROM incident_traces it JOIN incidents i USING (incident_id)
                          WHERE i.status = 'open' AND it.failing GROUP BY 1""").fetchall()
    return {t: list(ids) for t, ids in rows}


def trace_incidents(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Every incident trace that failed ({trace_id: [incident ids]}), open or closed: a golden
    built from one came from that incident."""
    if not has_table(con, "incident_traces"):
        return {}
    rows = con.execute("""SELECT trace_id, list(DISTINCT incident_id ORDER BY incident_id)
                          FROM incident_traces WHERE failing GROUP BY 1""").fetchall()
    return {t: list(ids) for t, ids in rows}
