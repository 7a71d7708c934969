"""Curation priority from golden coverage (issue 48), on the demo world: within a priority, an
intent the newest release leaves uncovered comes before a covered one, larger uncovered volume
first; every row says why it ranks where it does; without coverage the queue says so."""

from datetime import date, timedelta

from rag_loop.curation.queue import build_curation_queue
from rag_loop.curation.representatives import QueueSettings
from rag_loop.goldens.coverage import GoldenSet, coverage_day
from rag_loop.goldens.release import publish_release
from tests.helpers import demo_copy, fake_embedder, metadata_of

DAYS = [date(2026, 11, 1) + timedelta(days=i) for i in range(14)]


def _rows(con):
    return con.execute("""SELECT q.trace_id, q.priority, q.cluster_id, q.representative_rank, q.rank_reason,
                              coalesce(c.is_singleton, false) AS singleton
                       FROM curation_queue q LEFT JOIN intent_clusters c USING (cluster_id)""").df().to_dict("records")


def _queue(con, tmp_path):
    report = build_curation_queue(con, fake_embedder().router(), QueueSettings(), tmp_path / "queue",
                                  tmp_path / "goldens")
    return report, _rows(con)  # in queue order


def _first_of_clusters(rows, priority):
    return [r for r in rows if r["priority"] == priority and not r["singleton"] and r["representative_rank"] == 0
            and "open incident" not in r["rank_reason"]]


def test_uncovered_high_volume_intents_come_first_and_the_queue_says_why(demo_run, tmp_path):
    con = demo_copy(demo_run, tmp_path)
    # the loop's own queue (the demo run's curation_queue step): it ran no coverage
    assert metadata_of(demo_run[0], "curation_queue")["ordered_by_coverage"].startswith("coverage not computed")
    assert all("coverage not computed" in r["rank_reason"] for r in _rows(con) if not r["singleton"])
    for day in DAYS:  # coverage of the fortnight, no release yet: every intent uncovered
        coverage_day(con, day, GoldenSet(None))
    volume = dict(con.execute("SELECT cluster_id, sum(volume) FROM golden_coverage_intents WHERE slice = 'all' "
                              "GROUP BY 1").fetchall())
    report, rows = _queue(con, tmp_path)
    assert report.coverage == "uncovered volume (no release: every intent uncovered) over 14 days"
    priority = max(("P1", "P2", "P3"), key=lambda p: len(_first_of_clusters(rows, p)))
    firsts = _first_of_clusters(rows, priority)
    assert len(firsts) >= 3
    shown = [round(volume.get(r["cluster_id"], 0.0), 6) for r in firsts]
    assert shown == sorted(shown, reverse=True) and shown[0] > shown[-1]  # largest uncovered first
    assert "its intent is uncovered (no golden release yet)" in firsts[0]["rank_reason"]
    # the release covers the largest intent (a golden of another of its traces, other words)
    top, runner_up = firsts[0]["cluster_id"], firsts[1]["cluster_id"]
    other = con.execute("SELECT trace_id FROM trace_clusters WHERE cluster_id = ? AND trace_id <> ? LIMIT 1",
                        [top, firsts[0]["trace_id"]]).fetchall()[0][0]
    publish_release(tmp_path / "goldens", [{"name": "g-top", "input": "zq unrelated words xk", "expected_output": "x",
                                            "additional_metadata": {"trace_id": other, "cluster_id": top,
                                                                    "origin": "manual", "failure_type": "none",
                                                                    "tags": []}}], "", "", {})
    report, rows = _queue(con, tmp_path)
    assert report.coverage == "uncovered volume by v0001 over 14 days"
    firsts = _first_of_clusters(rows, priority)
    order = [r["cluster_id"] for r in firsts]
    assert order.index(runner_up) < order.index(top) and order[-1] == top  # same priority: covered last
    reasons = {r["cluster_id"]: r["rank_reason"] for r in firsts}
    assert reasons[top] == f"{priority}; the first representative of its intent; its intent is covered by v0001 " \
                           "(after uncovered intents)"
    assert f"its intent is uncovered by v0001: {volume[runner_up]:,.0f} requests" in reasons[runner_up]
