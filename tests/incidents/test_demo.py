"""The incident flow on the released demo (issue 48's evidence): an incident on the planted
ERR-PAY-977 surge (data/demo/EVENTS.md event 6, 2026-11-12 .. 13) lists its affected traces and
says whether coverage had their intents; its failing traces top the rebuilt curation queue (P0,
origin incident); labelled, the next release records the goldens as the incident's; closing
names that release."""

import json
from datetime import date
from pathlib import Path

import duckdb

from rag_loop.curation.labels import store_label_files
from rag_loop.curation.queue import build_curation_queue
from rag_loop.curation.queue_files import read_queue
from rag_loop.curation.representatives import QueueSettings
from rag_loop.demo.curator import label_row
from rag_loop.goldens.coverage import coverage_day, release_goldens
from rag_loop.goldens.lineage import refresh_release_tables
from rag_loop.goldens.redaction import Redactor
from rag_loop.goldens.release import build_goldens, publish_release
from rag_loop.incidents.record import IncidentRequest, parse_instant
from rag_loop.incidents.runbook import close_incident, open_incident
from tests.helpers import fake_embedder


def test_an_incident_on_the_err_pay_977_surge_lists_its_traces_and_the_intents_coverage_missed(demo_releases):
    root, paths = demo_releases
    goldens, reports = Path(paths.goldens_dir), Path(paths.reports_dir)
    with duckdb.connect(str(root / "rag.duckdb")) as con:
        for day in (date(2026, 11, 12), date(2026, 11, 13)):  # what drift_job stores once v0001 is out
            coverage_day(con, day, release_goldens(goldens, "v0001"))
        request = IncidentRequest(parse_instant("2026-11-12"), parse_instant("2026-11-13", end=True),
                                  title="ERR-PAY-977: payments error nobody documented", query_contains="977",
                                  opened_by="on-call")
        report = open_incident(con, request, reports, goldens)
        expected = con.execute("""SELECT count(*) FROM raw_traces WHERE original_query ILIKE '%977%'
                                  AND "timestamp" >= '2026-11-12' AND "timestamp" < '2026-11-14'""").fetchall()[0][0]
        stored = con.execute("SELECT count(*), count(*) FILTER (failing) FROM incident_traces").fetchall()[0]
        text = report.text
        # impact: every ERR-PAY-977 request of the two days, listed with why each failed
        assert expected > 100 and report.incident["affected"] == expected
        assert stored[0] == stored[1] == report.incident["failing"] > 0  # failing traces stored, the rest counted
        assert f"**{expected}** requests in the window, **{stored[1]}** failing" in text
        first = con.execute("SELECT trace_id FROM incident_traces WHERE failing ORDER BY \"timestamp\", trace_id "
                            "LIMIT 1").fetchall()[0][0]
        assert f"`{first}`" in text and "| payment |" in text
        # why offline tests missed it: no release before the window; today's newest lacks surge intents
        offline = report.facts.offline
        assert offline["gating"] is None and "no offline test could have caught it" in text
        assert offline["newest"] == "v0002" and any(r["v0002"] is False for r in offline["intents"])
        assert "**no**" in text and "missing\\_info" in text  # the users said it: missing_info
        assert "golden_coverage check (floor 25%, recomputed from the stored days): 2026-11-12 " in text
        # named as the gating release, v0001 misses failing intents of the surge
        named = open_incident(con, IncidentRequest(request.start, request.end, query_contains="977",
                                                   gating_release="v0001"), reports, goldens)
        missed = [r for r in named.facts.offline["intents"] if r["v0001"] is False]
        assert missed and f"{len(missed)} of {len(named.facts.offline['intents'])} failing intents had no " \
            "golden in `v0001`" in named.text


def test_the_incidents_traces_top_the_queue_and_become_the_next_releases_goldens(demo_releases):
    root, paths = demo_releases
    goldens, reports = Path(paths.goldens_dir), Path(paths.reports_dir)
    with duckdb.connect(str(root / "rag.duckdb")) as con:
        open_incident(con, IncidentRequest(parse_instant("2026-11-12"), parse_instant("2026-11-13", end=True),
                                           query_contains="977"), reports, goldens)
        # the queue, rebuilt: the incident's failing traces first, P0, origin incident
        queue = build_curation_queue(con, fake_embedder().router(), QueueSettings(), Path(paths.curation_dir) / "queue",
                                     goldens)
        assert queue.incident_rows > 0 and queue.by_priority.get("P0", 0) >= queue.incident_rows
        rows = read_queue(Path(queue.files[0]))
        top = rows[:queue.incident_rows]
        assert all(r["priority"] == "P0" and r["suggested_origin"] == "incident" and r["incidents"] == ["INC-0001"]
                   for r in top)
        assert not any(r.get("incidents") for r in rows[queue.incident_rows:])

        # labelled and released: the goldens record the incident, the manifest and lineage too
        labels = Path(paths.curation_dir) / "labels"
        chosen = top[:3]
        (labels / "oncall-incident.jsonl").write_text("".join(
            json.dumps(label_row(r, {r["trace_id"]: "pay_err_977"}, "2026-11-14T09:00:00+00:00"),
                       ensure_ascii=False) + "\n" for r in chosen))
        store_label_files(con, labels, settle_seconds=0)
        built = build_goldens(con, Redactor())
        released = publish_release(goldens, built, "ERR-PAY-977 regression goldens", "on-call", {})
        assert released.version == "v0003"
        names = sorted(g["name"] for g in built if g["additional_metadata"].get("incidents") == ["INC-0001"])
        assert len(names) >= len(chosen)
        assert released.manifest["incidents"] == {"INC-0001": names}
        assert released.manifest["counts"]["origin"]["incident"] >= len(chosen)
        assert f"From incidents: INC-0001 ({len(names)} goldens)." in (goldens / "v0003" / "CHANGES.md").read_text()
        refresh_release_tables(con, goldens)
        lineage = con.execute("SELECT list(golden ORDER BY golden) FROM golden_lineage WHERE version = 'v0003' "
                              "AND list_contains(incidents, 'INC-0001')").fetchall()[0][0]
        assert lineage == names

        closed = close_incident(con, "INC-0001", "documented ERR-PAY-977 in the payments KB; fallback links "
                                "to support", reports, goldens)
        assert closed.incident["release_version"] == "v0003"
        assert "Release holding the regression goldens: `v0003`" in closed.text
        assert all(f"`{n}`" in closed.text for n in names)
