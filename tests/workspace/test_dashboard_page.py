"""The workspace's /dashboard page from a dashboard.json: four layers of inline SVG, production
text escaped, links to the rows behind each chart, and "no data yet" where a layer has none."""

import html
import re

import duckdb
import pytest

from rag_loop.reporting.dashboard_figures import DASHBOARD_FILE, dashboard_figures, write_dashboard
from rag_loop.store.tables import create_tables
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.dashboard.test_figures import ALERT, SETTINGS
from tests.dashboard.world import HOSTILE, build
from tests.workspace.conftest import client_of


def figures_folder(tmp_path, alerts=(ALERT,)):
    con = duckdb.connect()
    build(con)
    write_dashboard(dashboard_figures(con, SETTINGS, alerts, drift_checked=True), tmp_path / "reports")
    return tmp_path


class Release:  # what `rag-loop serve --dagster-url` gives the app
    url = "http://127.0.0.1:3000"


def _page(tmp_path, release=None) -> str:
    reply = client_of(create_app(Workspace(tmp_path / "curation", tmp_path / "reports"), release=release)).get(
        "/dashboard")
    assert reply.status_code == 200
    return reply.text


def test_four_layers_drawn_inline_and_linked(figures):
    text = _page(figures, Release())
    for layer in ("product", "quality", "performance", "change"):
        assert f'<section class="layer" id="{layer}">' in text
    assert text.count("<svg") >= 7 and "empty-layer" not in text
    assert not re.search(r'(src|href)="(https?:)?//(?!127\.0\.0\.1:3000)', text)  # nothing from elsewhere
    assert "<script>" not in text.split("</header>", 1)[1]  # a page without script (base.html's own aside)
    for link in ('href="/?signal=thumbs_down"', 'href="/releases"', 'href="/evals/eval-b"',
                 'href="/intents?sort=judged_pass_rate"', 'href="#rows-pass-rates"',
                 'href="http://127.0.0.1:3000/assets/online_quality?view=checks"',
                 'href="http://127.0.0.1:3000/assets/query_mix?view=checks"'):
        assert link in html.unescape(text) or link in text, link
    assert '<a href="/dashboard">dashboard</a>' in text  # the nav


def test_production_text_is_escaped_everywhere(figures):
    text = _page(figures)
    assert '<script>alert("x")' not in text and HOSTILE not in text and "\u202e" not in text
    assert '<img src="http://192.0.2.1' not in text  # would be fetched from elsewhere
    assert "&lt;script&gt;alert(" in text and "[U+202E]" in text  # shown, as text, bidi made visible
    assert "127.0.0.1:3000" not in text  # no Dagster link without a webserver


def test_empty_layers_say_so(tmp_path):
    con = duckdb.connect()
    create_tables(con)
    write_dashboard(dashboard_figures(con, SETTINGS), tmp_path / "reports")
    text = _page(tmp_path)
    assert text.count('class="missing empty-layer"') == 4 and "<svg" not in text
    assert "No traffic yet" in text and "No judged quality yet" in text and "no drift check has run" in text


@pytest.mark.parametrize("content", [None, "{not json", '{"format": 99}'])
def test_no_or_unreadable_figures(tmp_path, content):
    if content is not None:
        (tmp_path / "reports").mkdir()
        (tmp_path / "reports" / DASHBOARD_FILE).write_text(content)
    text = _page(tmp_path)
    assert 'id="no-dashboard"' in text and "materialize the dashboard asset" in text
