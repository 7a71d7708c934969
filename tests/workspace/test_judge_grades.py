"""Grading the judge on the trace page (issue 45): each verdict the judge gave shows with its reason
and takes agree / disagree (and, for Faithfulness and Answer Relevancy, the curator's own pass /
fail); what the judge said is taken from the export, never from the form; the dashboard shows the
agreement the label job computed."""

import json
import re

import pytest

from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace
from tests.workspace.conftest import Curator

HOSTILE_METRIC = 'Tone"><script>alert(1)</script> [GEval]'
VERDICTS = {"Faithfulness": {"score": 0.2, "passed": False, "reason": "<img src=x onerror=alert(1)>",
                             "judge_version": "v1"},
            "Answer Relevancy": {"score": 0.9, "passed": True, "reason": "on topic", "judge_version": "v1"},
            HOSTILE_METRIC: {"score": 0.5, "passed": None, "reason": "", "judge_version": "v1"}}


def graded_queue(folder, trace_id="t1", verdicts=VERDICTS):
    row = {"trace_id": trace_id, "batch": "b", "priority": "P1", "language": "en", "input": "how many leave days?",
           "actual_output": "12 days", "cluster_id": "c", "cluster_label": "leave", "cluster_size": 1,
           "suggested_failure_type": "generation", "signals": [], "judge_scores": verdicts}
    export_for_workspace([row], {trace_id: {}}, folder / "queue", "b")


@pytest.fixture
def ana(tmp_path):
    graded_queue(tmp_path)
    return Curator(create_app(Workspace(tmp_path)), "ana")


def _labels(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "labels" / "ana-b.jsonl").read_text().splitlines()]


def test_each_verdict_shows_with_its_reason_and_the_choices_it_takes(ana):
    page = ana.client.get("/trace/t1").text
    table = page[page.index('id="judge-verdicts"'):]
    table = table[:table.index("</table>")]
    assert table.count('class="verdict"') == 3 and "&lt;img src=x onerror=alert(1)&gt;" in table
    assert "<script>alert" not in page and "&lt;script&gt;" in table  # a metric's name is text too
    for metric in ("Faithfulness", "Answer Relevancy"):
        assert all(f'name="{kind}:{metric}" value="{value}"' in table
                   for kind, value in (("grade", "agree"), ("grade", "disagree"), ("own", "pass"), ("own", "fail")))
    assert "no verdict (monitoring)" in table and table.count('form="label-form"') == 8  # none to grade on it


def test_a_grade_is_saved_with_what_the_export_says_the_judge_said(ana, tmp_path):
    reply = ana.label("t1", action="later", **{"grade:Faithfulness": "disagree", "own:Answer Relevancy": "pass",
                                               "judge_passed": "true", "judge_version": "forged"})
    assert reply.status_code == 303
    (label,) = _labels(tmp_path)
    assert label["decision"] == "later" and label["judge_grades"] == [
        {"metric": "Faithfulness", "grade": "disagree", "judge_version": "v1", "judge_passed": False,
         "judge_score": 0.2},
        {"metric": "Answer Relevancy", "curator_passed": True, "judge_version": "v1", "judge_passed": True,
         "judge_score": 0.9}]
    page = ana.client.get("/trace/t1").text  # the current label's grades are checked: a relabel keeps them
    checked = re.findall(r'name="((?:grade|own):[^"]+)" value="(\w+)" checked', page)
    assert checked == [("grade:Faithfulness", "disagree"), ("own:Answer Relevancy", "pass")]


@pytest.mark.parametrize("form, error", [
    ({"grade:Nope": "agree"}, "the judge gave no verdict on &#39;Nope&#39;"),
    ({f"grade:{HOSTILE_METRIC}": "agree"}, "no pass / fail verdict"),
    ({"grade:Faithfulness": "agree", "own:Faithfulness": "pass"}, "contradicts"),
    ({"grade:Faithfulness": "sure"}, "is not one of agree, disagree"),
])
def test_a_grade_that_cannot_be_is_refused_and_nothing_is_written(ana, tmp_path, form, error):
    reply = ana.label("t1", action="later", **form)
    assert reply.status_code == 422 and error in reply.text
    assert not (tmp_path / "labels").exists()


def test_a_grade_needs_the_csrf_token(ana, tmp_path):
    reply = ana.client.post("/trace/t1", data={"csrf": "forged", "action": "later", "grade:Faithfulness": "agree"})
    assert reply.status_code == 403 and not (tmp_path / "labels").exists()


def _dashboard(folder, text: str) -> str:
    (folder / "reports").mkdir(exist_ok=True)
    (folder / "reports" / "judge-agreement.json").write_text(text)
    return Curator(create_app(Workspace(folder, reports_dir=folder / "reports")), "ana").client.get("/dashboard").text


def test_the_dashboard_shows_the_agreement_and_survives_a_bad_file(tmp_path):
    graded_queue(tmp_path)
    row = {"metric": "Faithfulness", "judge_version": "v1", "language": "all", "n": 40, "agreements": 30,
           "agreement": 0.75, "kappa": 0.5, "ci_low": 0.23, "ci_high": 0.76, "judge_pass_rate": 0.5,
           "curator_pass_rate": 0.5}
    page = _dashboard(tmp_path, json.dumps({"format": 1, "rows": [row]}))
    section = page[page.index('id="agreement"'):]
    assert "Faithfulness" in section and "0.50" in section and "0.23 to 0.76" in section and "75%" in section
    hostile = {**row, "metric": "<script>alert(1)</script>", "kappa": "high", "ci_low": None, "agreement": True}
    page = _dashboard(tmp_path, json.dumps({"format": 1, "rows": [hostile, 7]}))
    assert "<script>alert" not in page and "undefined" in page and "n too small" in page
    for text in ("{", "[]", json.dumps({"rows": "x"})):
        page = _dashboard(tmp_path, text)
        assert 'id="no-agreement"' in page


def test_each_verdict_and_a_judge_raised_priority_say_how_far_the_judge_is_trusted(tmp_path):
    graded_queue(tmp_path)
    rows = [{"metric": "Faithfulness", "judge_version": "v1", "language": "all", "n": 40, "kappa": 0.2,
             "ci_low": 0.05, "ci_high": 0.35},
            {"metric": "Answer Relevancy", "judge_version": "v1", "language": "all", "n": 45, "kappa": 0.7,
             "ci_low": 0.44, "ci_high": 0.9}]
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "judge-agreement.json").write_text(json.dumps({"format": 1, "rows": rows}))
    ana = Curator(create_app(Workspace(tmp_path, reports_dir=tmp_path / "reports")), "ana")
    page = ana.client.get("/trace/t1").text
    trust = re.findall(r'<span class="meta trust( untrusted)?">([^<]+)</span>', page)
    assert trust == [(" untrusted", "judge not trusted: kappa 0.20 [0.05, 0.35], n=40, under the 0.6 floor"),
                     ("", "judge agrees with curators: kappa 0.70 [0.44, 0.90], n=45"),
                     ("", "judge agreement not measured (curators grade only the online judge&#39;s verdicts)")]
    assert "raised by the judge's Faithfulness verdict: judge not trusted: kappa 0.20" in page  # P1, unfaithful
