"""Offline Faithfulness on short synthetic QA cases: a faithful answer outranks its unfaithful twin."""

from pathlib import Path

import pytest
from deepeval.test_case import LLMTestCase
from sklearn.metrics import roc_auc_score

from rag_loop.evaluation.calibration import read_rows, token_overlap
from rag_loop.evaluation.judges.evidence import statements
from rag_loop.evaluation.judges.offline import OFFLINE_THRESHOLDS, OfflineAnswerRelevancy, OfflineFaithfulness
from rag_loop.evaluation.judges.support import OVERLAP_SHARE, Context, faithfulness, support, terms, word_overlap

DEV_SETS = [Path(__file__).resolve().parents[3] / "shared" / "data" / f"begin_{name}_dev.jsonl"
            for name in ("cmu_dog", "topicalchat")]

OBEROI = ("The Oberoi family is an Indian family that is famous for its involvement in hotels, "
          "namely through The Oberoi Group. The Oberoi Group is a hotel company with its head office in Delhi.")
ALBUM = "The album was certified 2 platinum and 5 gold in Europe."
RELEASE = "The film was released on June 7th 2010 in the United States."
CAPITALS = "Paris is the capital of France. Berlin is the capital of Germany."
MUSEUM = "The city museum opened in 1998. The museum is not open on Mondays."
LEAVE = "Full-time employees get fifteen days of paid annual leave. Leave requests go through the HR portal."

# (question, context, faithful answer, unfaithful twin)
TWINS = [
    ("Is the Oberoi family involved in hotels?", OBEROI, "Yes.", "No."),
    ("Is the Oberoi family involved in hotels?", OBEROI,
     "The Oberoi family is involved in a hotel company.",
     "The Oberoi family is not involved in any hotel company."),
    ("Where is the head office of The Oberoi Group?", OBEROI, "Delhi", "Mumbai"),
    ("How was the album certified?", ALBUM, "two platinum and five gold", "three platinum and five gold"),
    ("When was the film released?", RELEASE, "June 7, 2010", "July 7, 2010"),
    ("When was the film released?", RELEASE, "It was released on 7 June 2010.",
     "It was released on 7 June 2012."),
    ("What is the capital of France?", CAPITALS, "Paris is the capital of France.",
     "Paris is the capital of Germany."),
    ("What is the capital of Germany?", CAPITALS, "Berlin", "Vienna"),
    ("How many days of annual leave do I get?", LEAVE, "You get 15 days of paid annual leave.",
     "You get 20 days of paid annual leave."),
    ("How many days of annual leave do I get?", LEAVE,
     "Full-time employees get fifteen days of paid annual leave. Requests go through the HR portal.",
     "Full-time employees get fifteen days of paid annual leave. Unused days are paid out in cash every December."),
    ("Is the museum open on Mondays?", MUSEUM, "No, the museum is not open on Mondays.",
     "Yes, the museum is open on Mondays."),
    ("Is the museum open on Mondays?", MUSEUM, "No.", "Yes."),
    ("Does the Oberoi Group have its head office in Delhi?", OBEROI, "Yes, in Delhi.", "No, it does not."),
]


def score(question, context, answer):
    return OfflineFaithfulness().measure(LLMTestCase(input=question, actual_output=answer,
                                                     retrieval_context=[context]))


@pytest.mark.parametrize("question, context, faithful, unfaithful", TWINS,
                         ids=[f"{i}-{t[2][:20]}" for i, t in enumerate(TWINS)])
def test_the_faithful_answer_outranks_its_unfaithful_twin(question, context, faithful, unfaithful):
    assert score(question, context, faithful) > score(question, context, unfaithful)


def test_a_faithful_yes_or_number_in_words_passes_the_threshold():
    threshold = OFFLINE_THRESHOLDS["Faithfulness"]
    assert score(*TWINS[0][:3]) >= threshold  # a bare "Yes." is not 0
    assert score(*TWINS[3][:3]) >= threshold  # "two platinum" = "2 platinum"
    assert score(*TWINS[4][:3]) >= threshold  # "June 7, 2010" = "June 7th 2010"


def test_the_score_is_graded_and_an_empty_answer_scores_zero():
    full = score(*TWINS[9][:3])
    half = score(*TWINS[9][:2], TWINS[9][3])
    assert 0 < half < full and half < OFFLINE_THRESHOLDS["Faithfulness"]
    assert score("q?", LEAVE, "") == 0.0 and score("q?", LEAVE, "   ") == 0.0


def test_metric_defaults_no_argument_constructor_and_reason():
    metric = OfflineFaithfulness()
    assert metric.threshold == OFFLINE_THRESHOLDS["Faithfulness"]
    assert OfflineAnswerRelevancy().threshold == OFFLINE_THRESHOLDS["Answer Relevancy"]
    assert OfflineFaithfulness(threshold=None).threshold is None  # monitoring only
    metric.measure(LLMTestCase(input="q", actual_output="Paris is the capital of Germany. It rains.",
                               retrieval_context=[CAPITALS]))
    assert 0 <= metric.score <= 1 and "claims supported" in metric.reason


def test_numbers_are_normalised():
    def texts(s):
        return [t.text for t in terms(s) if t.number]
    assert texts("1,000 and 1.000 and 1 000 people") == ["1000", "1000", "1000"]
    assert texts("the 7th of June") == texts("seven of June") == ["7"]
    assert texts("twenty-five and two hundred and five") == ["25", "205"]
    assert texts("nghỉ năm ngày") == ["5"] and texts("năm 2020") == ["2020"]
    assert Context(["It opened in Jun 2010."]).vocab == Context(["It opened in June 2010."]).vocab


def test_an_agreement_is_not_a_claim_when_a_statement_carries_the_content():
    question, fact = "When did the museum open?", "The city museum opened in 1998."
    assert score(question, MUSEUM, fact) == 1.0
    for remark in ("That is true.", "I agree.", "Yeah."):  # "true" is a cue, not the stem "tru"
        assert score(question, MUSEUM, f"{remark} {fact}") == score(question, MUSEUM, fact)


def test_a_question_in_the_answer_is_an_unsupported_claim():
    question, fact = "When did the museum open?", "The city museum opened in 1998."
    assert score(question, MUSEUM, f"{fact} Did you know it is open on Mondays?") == pytest.approx(0.5)
    assert score(question, MUSEUM, "Did you know the city museum opened in 1998?") == 0.0


def test_a_word_negated_in_one_clause_but_asserted_in_another_is_not_negated():
    context = "Stane's scientists can not copy Stark's reactor, so Stane attacks Stark at his home."
    assert score("Who does Stane attack?", context, "Stane attacks Stark.") == 1.0
    assert score("Is anything in the box?", "There is nothing in the box.", "There is nothing in the box.") == 1.0


def test_a_closing_question_about_nothing_in_the_context_is_not_a_claim():
    question, fact = "When did the museum open?", "The city museum opened in 1998."
    assert score(question, MUSEUM, f"{fact} Anything else I can help you with?") == 1.0


def test_a_claim_grade_blends_its_bare_word_overlap_with_its_support():
    context = Context([CAPITALS])
    claim = "Paris is the capital of Germany"  # every word is in the context, not in one sentence
    assert word_overlap(claim, context) == 1.0 and support(claim, context) < 1.0
    assert faithfulness([claim], context) == [
        (claim, pytest.approx(OVERLAP_SHARE + (1 - OVERLAP_SHARE) * support(claim, context)))]
    # bare words: no stemming ("capitals"), accents folded, case ignored
    assert word_overlap("capitals of FRANCE", context) == pytest.approx(2 / 3)
    assert word_overlap("Pàris", context) == 1.0
    # third-person pronouns are left out, as in the rules: they refer to what the context is about
    assert word_overlap("It was developed by OpenAI", Context(["GPT-4 was developed by OpenAI."])) == 1.0
    # the rules alone, and overlap alone, are the two ends of the blend
    assert faithfulness([claim], context, overlap_share=0.0)[0][1] == support(claim, context)
    assert faithfulness([claim], context, overlap_share=1.0)[0][1] == 1.0


def test_a_bare_yes_and_a_question_keep_their_rule_grades():
    question = "Is the museum open on Mondays?"
    context = Context([MUSEUM])
    assert faithfulness(["No"], context, question) == [("No", support("No", context, question))]
    assert faithfulness(["Did you know the museum opened in 1998?"], context) == [
        ("Did you know the museum opened in 1998?", 0.0)]


def _auc(rows, scores):
    return roc_auc_score([r.faithful for r in rows], scores)


def _faithfulness(rows, overlap_share):
    scores = []
    for row in rows:
        judged = faithfulness(statements(row.answer), Context(row.contexts), row.question, overlap_share)
        scores.append(sum(g for _, g in judged) / len(judged) if judged else 0.0)
    return scores


@pytest.mark.skipif(not all(p.exists() for p in DEV_SETS), reason="the BEGIN dev sets are in ../shared/data")
@pytest.mark.parametrize("path", DEV_SETS, ids=lambda p: p.stem)
def test_on_human_labels_the_judge_beats_bare_overlap_and_its_rules_alone(path):
    """The issue-45 goal on the two dev sets: ROC-AUC at least bare overlap's + 0.01, and the
    overlap term (its weight chosen on CMU-DoG) does not cost ranking power on either set."""
    rows, _ = read_rows(path)
    judge = _auc(rows, [OfflineFaithfulness().measure(LLMTestCase(
        input=r.question or " ", actual_output=r.answer, retrieval_context=r.contexts)) for r in rows])
    assert judge == pytest.approx(_auc(rows, _faithfulness(rows, OVERLAP_SHARE)))
    assert judge >= _auc(rows, [token_overlap(r.answer, r.contexts) for r in rows]) + 0.01
    assert judge >= _auc(rows, _faithfulness(rows, 0.0))
