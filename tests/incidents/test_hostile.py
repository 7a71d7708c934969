"""Hostile incident requests (hypothesis): any window, slice and title gives an error in the
user's words or a postmortem that says what it found, never a crash; production text and titles
never format or inject markup."""

import re
from datetime import UTC, datetime, timedelta

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.incidents.postmortem import md
from rag_loop.incidents.record import IncidentError, IncidentRequest, parse_slices
from rag_loop.incidents.runbook import open_incident
from tests.incidents.world import tiny_world

BASE = datetime(2026, 11, 10, tzinfo=UTC)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    con = duckdb.connect()
    yield tiny_world(con, tmp / "goldens"), tmp
    con.close()


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.integers(-48, 24 * 8), hours=st.integers(-30, 24 * 5),
       slices=st.lists(st.tuples(st.sampled_from(["language", "tenant", "intent", "colour", ""]), texts), max_size=3),
       title=st.one_of(st.none(), texts, st.sampled_from(["<script>alert(1)</script>", "# x\n| y |",
                                                          "[a](javascript:x)", "`code` **bold** _i_"])))
def test_any_request_is_an_error_or_an_honest_postmortem(world, start, hours, slices, title):
    con, tmp = world
    try:
        request = IncidentRequest(BASE + timedelta(hours=start), BASE + timedelta(hours=start + hours),
                                  parse_slices([f"{k}={v}" for k, v in slices]), title)
        report = open_incident(con, request, tmp / "reports", tmp / "goldens")
    except IncidentError as error:
        assert str(error)
        return
    text = report.text
    assert text.startswith(f"# {report.incident['incident_id']}: ")
    assert "<script" not in text and not re.search(r"(?<!\\)\]\(javascript", text)  # no live tag, no link
    heading = text.splitlines()[0]
    assert heading.startswith("# INC-") and "\n" not in heading
    if report.incident["affected"] == 0:
        assert "No request in the window matches" in text


@given(texts)
def test_escaped_text_is_one_inert_line(value):
    out = md(value, 500)
    assert "\n" not in out and "<" not in out and ">" not in out
    unescaped = out.replace("\\\\", "")
    for char in "*_`[]|":
        assert all(unescaped[i - 1] == "\\" for i, c in enumerate(unescaped) if c == char and i > 0) and \
            not unescaped.startswith(char)
