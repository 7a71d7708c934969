"""Incidents on a tiny DuckDB world: the record, the facts section by section, the postmortem,
closing with the release of its goldens, the lineage to eval runs."""

from datetime import UTC, datetime

import duckdb
import pytest

from rag_loop.incidents.record import (
    IncidentError,
    IncidentRequest,
    parse_instant,
    parse_slices,
    window_traces,
)
from rag_loop.incidents.runbook import close_incident, open_incident, show_incident
from rag_loop.store.incidents import open_incident_ids, trace_incidents
from tests.incidents.world import release, tiny_world

OPENED = datetime(2026, 11, 14, 8, tzinfo=UTC)


@pytest.fixture
def world(tmp_path):
    con = duckdb.connect()
    yield tiny_world(con, tmp_path / "goldens"), tmp_path
    con.close()


def request(**fields) -> IncidentRequest:
    return IncidentRequest(parse_instant("2026-11-12"), parse_instant("2026-11-13", end=True), **fields)


def test_a_window_of_bare_dates_takes_both_days_and_a_date_time_end_is_excluded():
    assert parse_instant("2026-11-13", end=True) == datetime(2026, 11, 14, tzinfo=UTC)
    assert parse_instant("2026-11-13T10:00") == datetime(2026, 11, 13, 10, tzinfo=UTC)
    assert parse_instant("2026-11-13T12:00+02:00") == datetime(2026, 11, 13, 10, tzinfo=UTC)
    assert parse_slices(["language=vi", "language=en", "intent=A"]) == {"language": ["vi", "en"], "intent": ["A"]}
    for bad in (["colour=red"], ["language"], ["=vi"]):
        with pytest.raises(IncidentError):
            parse_slices(bad)
    with pytest.raises(IncidentError, match="before it starts"):
        IncidentRequest(parse_instant("2026-11-13"), parse_instant("2026-11-12"))


def test_the_window_traces_say_which_failed_and_why(world):
    con, _ = world
    traces = window_traces(con, parse_instant("2026-11-12"),
                           parse_instant("2026-11-13", end=True)).set_index("trace_id")
    assert list(traces.index) == ["t1", "t2", "t3", "t4", "t5", "t6"]  # t0 is the day before
    assert traces.loc["t1", "reasons"] == ["low_rerank_score"]
    assert traces.loc["t2", "reasons"] == ["judged:Faithfulness"]
    assert traces.loc["t3", "reasons"] == ["labelled:retrieval"]
    assert traces.loc["t4", "reasons"] == ["thumbs_down"]  # once, though signal and feedback both say it
    assert not traces.loc["t5", "failing"] and not traces.loc["t6", "candidate"]
    vi = window_traces(con, parse_instant("2026-11-12"), parse_instant("2026-11-14"), {"language": ["vi"]})
    assert list(vi["trace_id"]) == ["t1", "t2", "t6"]
    text = window_traces(con, parse_instant("2026-11-12"), parse_instant("2026-11-14"), query_contains="err-977")
    assert list(text["trace_id"]) == ["t1", "t2", "t3"]
    intent = window_traces(con, parse_instant("2026-11-12"), parse_instant("2026-11-14"), {"intent": ["A"]})
    assert list(intent["trace_id"]) == ["t1", "t2"]


def test_opening_records_the_incident_and_fills_the_postmortem_from_the_data(world):
    con, tmp = world
    report = open_incident(con, request(title="Payments <b>down</b>", opened_by="ann"), tmp / "reports",
                           tmp / "goldens", now=OPENED)
    assert report.incident["incident_id"] == "INC-0001" and report.incident["affected"] == 6
    assert report.incident["failing"] == 4 and report.postmortem.read_text() == report.text
    stored = con.execute("SELECT trace_id, failing FROM incident_traces ORDER BY trace_id").fetchall()
    assert stored == [("t1", True), ("t2", True), ("t3", True), ("t4", True)]  # t5, t6 only counted
    text = report.text
    for section in ("## Impact", "## Detection", "## Timeline", "## Root cause", "## Why offline tests missed it",
                    "## Corrective actions", "## Regression goldens"):
        assert section in text
    assert "Payments &lt;b&gt;down&lt;/b&gt;" in text and "<b>" not in text
    assert "**6** requests in the window, **4** failing" in text
    assert "| vi | 3 | 2 |" in text and "| en | 3 | 2 |" in text  # by language
    assert "prompt\\_version first served | p2" in text  # the version change in the window
    assert "document version published | pay 2026 | indexed 2026-11-11 15:30, 6.5 h later" in text
    assert "labelled by curators (1 traces): retrieval 1" in text
    assert "failing metrics: Faithfulness 1" in text
    assert "user reports: 1 thumbs-down (missing\\_info 1)" in text
    # no dashboard.json, no drift table: said, not invented
    assert "drift and SLO checks: not recorded" in text and "golden_coverage check: not recorded" in text
    # v0001 (created before the window) gated; it held C, not A or B
    assert "`v0001` (the newest release created before the window" in text
    assert "| `A` | err · 977 | 2 | **no** |" in text and "2 of 2 failing intents had no golden in `v0001`" in text
    assert "1 failing requests have no intent" not in text  # t6 is not failing
    assert set(open_incident_ids(con)) == {"t1", "t2", "t3", "t4"}


def test_an_empty_window_gives_an_honest_postmortem(world):
    con, tmp = world
    empty = IncidentRequest(parse_instant("2027-01-01"), parse_instant("2027-01-02"), {"tenant": ["nobody"]})
    report = open_incident(con, empty, tmp / "reports", tmp / "goldens", now=OPENED)
    assert report.incident["affected"] == 0 and "No request in the window matches" in report.text
    assert "affected intents: not recorded" in report.text and open_incident_ids(con) == {}


def test_closing_records_actions_and_the_newest_release_with_its_goldens_and_the_runs_that_tested_them(world):
    con, tmp = world
    opened = open_incident(con, request(), tmp / "reports", tmp / "goldens", now=OPENED)
    incident_id = opened.incident["incident_id"]
    assert trace_incidents(con) == {t: [incident_id] for t in ("t1", "t2", "t3", "t4")}
    with pytest.raises(IncidentError, match="holds no golden"):
        close_incident(con, incident_id, "fixed", tmp / "reports", tmp / "goldens", release="v0001")
    release(tmp / "goldens", "v0002", [("g-c", "t0", "C"), ("g-a", "t1", "A", [incident_id])],
            "2026-11-15T00:00:00+00:00")
    release(tmp / "goldens", "v0003", [("g-c", "t0", "C"), ("g-a", "t1", "A", [incident_id]),
                                       ("g-b", "t3", "B")], "2026-11-16T00:00:00+00:00")
    con.execute("CREATE TABLE eval_runs (run_id VARCHAR, started_at TIMESTAMPTZ, release_version VARCHAR, "
                "blocked BOOLEAN)")
    con.execute("CREATE TABLE eval_results (run_id VARCHAR, golden VARCHAR, metric VARCHAR, passed BOOLEAN, "
                "errored BOOLEAN)")
    con.execute("INSERT INTO eval_runs VALUES ('r1', '2026-11-17 00:00+00', 'v0003', false)")
    con.execute("INSERT INTO eval_results VALUES ('r1', 'g-a', 'Faithfulness', true, false), "
                "('r1', 'g-b', 'Faithfulness', false, false), ('r1', 'g-c', 'Faithfulness', true, false)")
    with pytest.raises(IncidentError, match="say what"):
        close_incident(con, incident_id, "  ", tmp / "reports", tmp / "goldens")
    closed = close_incident(con, incident_id, "added doc ERR-977\nraised rerank floor", tmp / "reports",
                            tmp / "goldens", now=OPENED)
    assert closed.incident["status"] == "closed" and closed.incident["release_version"] == "v0003"
    assert "added doc ERR-977" in closed.text and "raised rerank floor" in closed.text
    assert "Release holding the regression goldens: `v0003`" in closed.text
    assert "| `r1` | 2026-11-17 00:00 | v0003 | 2 | 1 | 1 | 0 |" in closed.text  # g-a, g-b: not g-c
    assert open_incident_ids(con) == {}  # closed: no longer first in the queue
    shown = show_incident(con, incident_id, tmp / "reports", tmp / "goldens")
    assert shown.facts.lineage["releases"] == ["v0002", "v0003"]
    assert set(shown.facts.lineage["goldens"]["golden"]) == {"g-a", "g-b"}


def test_the_dashboards_export_gives_the_fired_and_the_silent_checks(world):
    """dashboard.json as the `dashboard` asset writes it (dashboard_figures + write_dashboard)."""
    from rag_loop.online.quality import OnlineQualitySettings
    from rag_loop.reporting.dashboard_figures import dashboard_figures, write_dashboard
    con, tmp = world
    con.execute("CREATE TABLE retrieval_scores (day DATE)")
    con.execute("CREATE TABLE freshness_daily (day DATE)")
    con.execute("INSERT INTO retrieval_scores VALUES ('2026-11-12'); INSERT INTO freshness_daily VALUES ('2026-11-13')")
    alerts = [{"day": "2026-11-12", "asset": "retrieval_scores", "check": "rerank_p50", "severity": "WARN",
               "note": "0.2 < 0.3 *"},
              {"day": "2026-11-20", "asset": "query_mix", "check": "js", "severity": "WARN", "note": "outside"}]
    write_dashboard(dashboard_figures(con, OnlineQualitySettings(), alerts, drift_checked=True), tmp / "reports")
    text = open_incident(con, request(), tmp / "reports", tmp / "goldens", now=OPENED).text
    assert "| 2026-11-12 | retrieval\\_scores | rerank\\_p50 | WARN | 0.2 &lt; 0.3 \\* |" in text
    assert "outside" not in text  # another day
    assert "computed on the window's days but silent: freshness_daily" in text
    assert "online quality SLO: not recorded for these days" in text  # no SLO target configured
