"""The intents map reads without hovering (issue 44): a titled panel per language, the biggest
and the worst clusters named by their typical query, a legend for colour and size; production
text on it is escaped."""

import re

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_loop.workspace.app import create_app
from rag_loop.workspace.intent_map import NAME_CHARS, NAMED_BIGGEST, NAMED_WORST, _box, _overlap, intent_map
from rag_loop.workspace.store import Workspace
from tests.workspace.conftest import Curator


def _cluster(i: int, language: str = "en", volume: float = 10.0, failure: float = 0.1, query: str | None = None,
             x: float | None = None) -> dict:
    return {"cluster_id": f"{language}-{i:04d}", "language": language, "label": f"k{i} · k · k",
            "medoid_query": query or f"typical question number {i}", "x": float(i) if x is None else x,
            "y": float(i), "volume": volume, "failure_rate": failure, "is_singleton": False, "size": 3,
            "judged_pass_rate": None, "judged": 0, "trend": None, "is_new": False}


def test_each_panel_is_titled_and_names_its_biggest_and_its_worst_clusters():
    clusters = [_cluster(i, volume=100.0 - i, failure=0.05) for i in range(20)]
    clusters += [_cluster(20, volume=60.0, failure=0.9, query="ERR-PAY-977 when I pay by card")]
    clusters += [_cluster(i, "vi", volume=5.0, failure=0.0) for i in range(3)]
    chart = intent_map(clusters)
    assert [p.title for p in chart.panels] == ["en: 21 intent clusters", "vi: 3 intent clusters"]
    named = {p.cluster_id: p.name for p in chart.points if p.name}
    assert {f"en-{i:04d}" for i in range(NAMED_BIGGEST)} <= set(named)  # the biggest
    assert named["en-0020"] == "ERR-PAY-977 when I pay by card"  # the worst
    assert len([c for c in named if c.startswith("en")]) <= NAMED_BIGGEST + NAMED_WORST
    assert all(len(name) <= NAME_CHARS for name in named.values())
    boxes = [(p.name_x, p.cy) for p in chart.points if p.name]
    assert len(set(boxes)) == len(boxes)  # no two names on one spot
    assert len(chart.size_examples) == 3 and chart.size_examples[-1][1] == 100.0


def test_a_tiny_cluster_that_always_fails_is_not_named_over_the_real_worst():
    clusters = [_cluster(i, volume=100.0) for i in range(10)]
    clusters += [_cluster(20, volume=0.1, failure=1.0, query="one odd trace"),
                 _cluster(21, volume=80.0, failure=0.6, query="the real trouble")]
    named = {p.name for p in intent_map(clusters).points if p.name}
    assert "the real trouble" in named and "one odd trace" not in named


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
                          st.one_of(st.none(), st.floats(-1e9, 1e9)), st.sampled_from(["en", "vi", "und"])),
                max_size=12))
def test_any_positions_and_volumes_give_points_inside_the_map(values):
    clusters = [_cluster(i, language, volume=abs(volume or 0.0), x=x if x is not None else float("nan"))
                for i, (x, volume, language) in enumerate(values)]
    chart = intent_map(clusters)
    for point in chart.points:
        assert 0 <= point.cx <= chart.width and 0 <= point.cy <= chart.height and point.r > 0
    boxes = [_box(p.name_x, p.cy, p.name_anchor, p.name) for p in chart.points if p.name]
    assert not any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])  # names never cover names


def test_the_page_shows_names_titles_and_legend_and_escapes_production_text(tmp_path):
    hostile = '<script>alert(1)</script>"\u202e'
    queue = tmp_path / "queue"
    queue.mkdir()
    pd.DataFrame([_cluster(0, volume=50.0, failure=0.8, query=hostile), _cluster(1), _cluster(2, "vi")]).to_parquet(
        queue / "intents.parquet")
    page = Curator(create_app(Workspace(tmp_path)), "ana").client.get("/intents").text
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "\u202e" not in page  # bidi controls made visible, not applied
    assert re.search(r'class="panel-title"[^>]*>en: 2 intent clusters<', page)
    assert re.search(r'class="panel-title"[^>]*>vi: 1 intent cluster<', page)
    assert page.count('class="cluster-name"') == 3 and "share of traces with a bad signal" in page
