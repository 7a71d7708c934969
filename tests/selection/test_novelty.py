"""Novel intents per day: a new intent's first day is flagged, old intents and warm-up are not."""

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from rag_loop.demo.intent_catalog import INTENTS, paraphrase
from rag_loop.selection.novelty import NoveltySettings, detect_novelty, new_intent_members
from rag_loop.store.tables import create_tables
from rag_loop.vectors.clustering import ClusterSettings
from tests.helpers import query
from tests.helpers.fakes import hashing_router

START = datetime(2026, 11, 1, 8, tzinfo=UTC)


def _traffic(days: int, new_intent_day: int, per_intent: int = 6, seed: int = 1) -> pd.DataFrame:
    """Ten known intents every day; from `new_intent_day`, a surge of one more."""
    rng = random.Random(seed)
    known, new = [i for i in INTENTS if i.doc_id][:10], INTENTS[-1]
    rows = []
    for day in range(days):
        today = known + ([new, new] if day >= new_intent_day else [])
        for intent in today:
            for k in range(per_intent):
                rows.append({"trace_id": f"d{day}-{intent.name}-{k}-{len(rows)}",
                             "original_query": paraphrase(rng.choice(intent.en), "en", rng),
                             "language": "en", "intent": intent.name,
                             "timestamp": START + timedelta(days=day, minutes=len(rows))})
    return pd.DataFrame(rows)


@pytest.fixture
def traffic_db(con):
    create_tables(con)
    frame = _traffic(days=7, new_intent_day=5)
    con.register("_rows", frame.drop(columns="intent"))
    con.execute("INSERT INTO raw_traces BY NAME SELECT * FROM _rows")
    return con, frame


def test_the_new_intents_first_day_is_novel_and_nothing_else(traffic_db):
    con, frame = traffic_db
    router = hashing_router(fold_accents_for=())
    figures = detect_novelty(con, router, NoveltySettings())
    novel = con.execute("SELECT trace_id, day::VARCHAR AS day FROM trace_novelty WHERE novel").df()
    flagged = frame[frame["trace_id"].isin(novel["trace_id"])]
    surge = frame[frame["intent"] == INTENTS[-1].name]
    first_day = surge[surge["timestamp"].dt.day == 6]
    assert set(flagged["intent"]) == {INTENTS[-1].name}  # no known intent is ever novel
    assert set(novel["day"]) == {"2026-11-06"}  # on its second day the intent is known
    assert len(set(flagged["trace_id"]) & set(first_day["trace_id"])) >= 0.6 * len(first_day)  # noise points stay out
    assert figures.days_without_history == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert figures.days_judged == 4
    judged = con.execute("SELECT count(*), count(DISTINCT day) FROM trace_novelty").fetchall()
    assert judged == [(int((frame["timestamp"].dt.day >= 4).sum()), 4)]  # every query of days 4-7


def test_novelty_is_idempotent_and_never_looks_ahead(traffic_db):
    con, _ = traffic_db
    router = hashing_router(fold_accents_for=())
    detect_novelty(con, router, NoveltySettings())
    first = con.execute("SELECT * FROM trace_novelty ORDER BY trace_id").fetchall()
    detect_novelty(con, router, NoveltySettings())
    assert con.execute("SELECT * FROM trace_novelty ORDER BY trace_id").fetchall() == first
    # later traffic does not change what was novel on an earlier day
    con.execute("DELETE FROM raw_traces WHERE \"timestamp\" >= '2026-11-07'")
    detect_novelty(con, router, NoveltySettings())
    earlier = [row for row in first if str(row[0]) < "2026-11-07"]
    assert con.execute("SELECT * FROM trace_novelty ORDER BY trace_id").fetchall() == earlier


def test_a_rerun_judges_only_the_new_day_and_agrees_with_judging_everything(con):
    create_tables(con)
    frame = _traffic(days=7, new_intent_day=5)
    router = hashing_router(fold_accents_for=())

    def load(days):
        con.register("_rows", frame[frame["timestamp"].dt.day <= days].drop(columns="intent"))
        con.execute("DELETE FROM raw_traces")
        con.execute("INSERT INTO raw_traces BY NAME SELECT * FROM _rows")
        con.unregister("_rows")

    load(6)
    assert detect_novelty(con, router, NoveltySettings()).days_judged_this_run == 3
    load(7)  # the next day arrives
    figures = detect_novelty(con, router, NoveltySettings())
    assert figures.days_judged_this_run == 1 and figures.days_judged == 4
    incremental = con.execute("SELECT * FROM trace_novelty ORDER BY trace_id").fetchall()
    con.execute("DROP TABLE trace_novelty")
    detect_novelty(con, router, NoveltySettings())
    assert con.execute("SELECT * FROM trace_novelty ORDER BY trace_id").fetchall() == incremental
    other = NoveltySettings(new_cluster_share=0.9)  # new settings: every day judged again
    assert detect_novelty(con, router, other).days_judged_this_run == 4
    assert con.execute("SELECT DISTINCT settings FROM trace_novelty").fetchall() == [
        (other.fingerprint(),)]
    con.execute("""UPDATE raw_traces SET ingested_at = now() WHERE trace_id = (SELECT min(trace_id)
                   FROM raw_traces WHERE timezone('UTC', "timestamp")::DATE = '2026-11-06')""")
    assert detect_novelty(con, router, other).days_judged_this_run == 1  # a trace stored again


def test_settings_refuse_meaningless_values():
    with pytest.raises(ValueError):
        NoveltySettings(new_cluster_share=0.3)
    with pytest.raises(ValueError):
        NoveltySettings(rate=2.0)
    with pytest.raises(ValueError):
        NoveltySettings(dense_neighbours=2)  # the unclaimed test itself: every odd pair


def _blob(rng, center, n, spread=0.08):
    points = center + spread * rng.normal(size=(n, len(center)))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def test_a_dense_core_of_the_day_is_novel_whatever_its_cluster():
    """A new intent HDBSCAN does not give a cluster of its own (here: none at all) is found by
    its dense core: queries whose five nearest of the day are all nearer than the window;
    queries of the known intents, as dense in the day as in the window, are not."""
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(11, 48))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    history = np.concatenate([_blob(rng, c, 7 * 20) for c in centers[:10]])
    known, new = np.concatenate([_blob(rng, c, 20) for c in centers[:10]]), _blob(rng, centers[10], 12)
    today = np.concatenate([known, new, new[:3]])  # three asked twice: one point each
    is_new = np.arange(len(today)) >= len(known)
    no_clusters = ClusterSettings(min_cluster_size=1000)  # every point noise: no cluster rule
    novel, sizes = new_intent_members(history, today, NoveltySettings(cluster=no_clusters))
    assert novel[is_new].all() and not novel[~is_new].any()
    assert set(sizes[novel]) == {6}  # noise: its neighbourhood, the query and its five nearest
    off = NoveltySettings(cluster=no_clusters, dense_neighbours=0)
    assert not new_intent_members(history, today, off)[0].any()


def test_demo_surge_is_novel_on_its_first_day_and_the_novelty_stream_selects_it(demo_run):
    """Event 6 (data/demo/EVENTS.md): ERR-PAY-977 appears on 2026-11-12."""
    _, database, _ = demo_run
    by_day = dict(query(database, """
        SELECT n.day::VARCHAR, count(*) FILTER (t.original_query ILIKE '%977%') / count(*)
        FROM trace_novelty n JOIN raw_traces t USING (trace_id) WHERE n.novel GROUP BY 1"""))
    surge = query(database, """SELECT count(*) FROM raw_traces WHERE original_query ILIKE '%977%'
                               AND "timestamp"::DATE = '2026-11-12'""")[0][0]
    flagged = query(database, """SELECT count(*) FROM trace_novelty n JOIN raw_traces t USING
                                 (trace_id) WHERE n.novel AND t.original_query ILIKE '%977%'""")[0][0]
    assert by_day["2026-11-12"] > 0.8 and flagged >= 0.5 * surge
    assert "2026-11-13" not in by_day  # known from its second day on
    selected = query(database, """
        SELECT count(*) FILTER (c.by_novelty), count(*) FILTER (c.priority = 'P2')
        FROM failure_candidates c JOIN raw_traces t USING (trace_id)
        WHERE t.original_query ILIKE '%977%' AND c.day = '2026-11-12'""")[0]
    assert selected[0] >= 0.5 * flagged  # after the budget's thinning
