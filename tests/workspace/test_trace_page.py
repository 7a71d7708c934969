"""What a curator reads on a trace page (issue 44): a value the trace does not record shows as
"not recorded" or nothing, never Python's None, a NaN or the codes `und` / `unknown`; the review
priority says what it means."""

import html
import re

import pytest

from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.schema import Priority
from rag_loop.workspace.app import create_app
from rag_loop.workspace.display import PRIORITY_HELP
from rag_loop.workspace.store import Workspace
from tests.workspace.conftest import Curator

RAW = re.compile(r"\b(None|null|nan|NaN|und|unknown)\b")  # "none" is a failure type


def _queue(folder, language, priority="P2", **row_values):
    row = {"trace_id": "t-bare", "batch": "b", "priority": priority, "language": language, "input": "xin chao",
           "actual_output": None, "cluster_id": None, "cluster_label": None, "cluster_size": None,
           "retrieval_context": None, "signals": None, "suggested_failure_type": None, "suggestion_reason": None,
           "suggested_origin": None, "judge_scores": {"Faithfulness": {"score": None, "passed": None, "reason": None}},
           **row_values}
    missing = dict.fromkeys(("rewritten_query", "status", "error", "timestamp", "language", "rag_version",
                             "prompt_version", "index_version", "feedback"))
    chunk = dict.fromkeys(("chunk_id", "doc_version", "rank", "score", "rerank_score", "selected",
                           "newest_version", "source", "text"))
    export_for_workspace([row], {"t-bare": {**missing, "language": language,
                                            "retrieved": [{**chunk, "doc_id": "leave"}]}}, folder / "queue", "b")


def _read(page: str) -> str:
    """What a person sees: the text between tags, and the values and titles of the elements."""
    body = page[page.index("<main"):]
    shown = re.findall(r'(?:value|title|placeholder)="([^"]*)"', body)
    text = re.sub(r"<[^>]+>", " ", body)
    return " ".join(html.unescape(" ".join([text, *shown])).split())


@pytest.mark.parametrize("language", [None, "und", ""])
def test_what_a_trace_does_not_record_is_said_in_words(tmp_path, language):
    _queue(tmp_path, language)
    ana = Curator(create_app(Workspace(tmp_path)), "ana")
    page = ana.client.get("/trace/t-bare").text
    seen = _read(page)
    assert not RAW.findall(seen), RAW.findall(seen)
    assert "language not recorded" in seen and "time not recorded" in seen and "versions not recorded" in seen
    assert "cluster not recorded" in seen and "No failure type suggested" in seen
    assert 'id="tags" name="tags" value=""' in page  # never a tag "None" or "und" offered to save
    assert 'data-source="None"' not in page and "use as source" not in seen  # nothing to cite


def test_recorded_values_are_shown_as_before(tmp_path):
    _queue(tmp_path, "vi", priority="P0", cluster_label="leave days", cluster_size=4,
           suggested_failure_type="retrieval", suggestion_reason="top chunk off-topic")
    page = Curator(create_app(Workspace(tmp_path)), "ana").client.get("/trace/t-bare").text
    seen = _read(page)
    assert "leave days" in seen and "4 queries" in seen and "Suggested: retrieval — top chunk off-topic" in seen
    assert 'value="vi"' in page and " vi " in seen and "language not recorded" not in seen


@pytest.mark.parametrize("priority", [p.value for p in Priority])
def test_the_priority_says_what_it_means_and_the_others_are_in_its_title(tmp_path, priority):
    _queue(tmp_path, "en", priority=priority)
    page = Curator(create_app(Workspace(tmp_path)), "ana").client.get("/trace/t-bare").text
    (title, label) = re.search(r'<span class="priority" title="([^"]*)">([^<]*)</span>', page).groups()
    assert html.unescape(label) == f"{priority} · {PRIORITY_HELP[priority]}"
    assert all(f"{p.value} {PRIORITY_HELP[p.value]}" in html.unescape(title) for p in Priority)


@pytest.mark.parametrize("priority", [p.value for p in Priority])
def test_the_queue_says_what_its_priorities_mean(tmp_path, priority):
    _queue(tmp_path, "vi", priority=priority)
    queue = Curator(create_app(Workspace(tmp_path)), "ana").client.get("/").text
    assert html.escape(PRIORITY_HELP[priority], quote=True) in queue  # the row's title
    assert "Review priority, P0 first" in queue  # the column's legend
