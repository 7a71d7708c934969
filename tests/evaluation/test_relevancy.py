"""Offline Answer / Contextual Relevancy: a text about another identifier than the one asked
about is not relevant, however alike it reads."""

from deepeval.test_case import LLMTestCase

from rag_loop.evaluation.judges.evidence import Evidence
from rag_loop.evaluation.judges.offline import OfflineAnswerRelevancy, OfflineContextualRelevancy, codes
from tests.helpers.fakes import HashingEmbedder

EVIDENCE = Evidence(HashingEmbedder())


def test_codes_are_identifiers_not_numbers_or_addresses():
    assert codes("What is ERR-PAY-977? It costs 15 USD, mail help@x.example") == {"err-pay-977"}
    assert codes("lỗi err-pay-977 là gì") == {"err-pay-977"}


def test_an_answer_about_another_code_is_irrelevant_and_one_about_the_asked_code_is_not():
    asked = "What does ERR-PAY-977 mean?"
    other = OfflineAnswerRelevancy(EVIDENCE).measure(LLMTestCase(
        input=asked, actual_output="ERR-PAY-942 means the issuing bank declined the payment."))
    same = OfflineAnswerRelevancy(EVIDENCE).measure(LLMTestCase(
        input=asked, actual_output="ERR-PAY-977 means the payment provider timed out."))
    plain = OfflineAnswerRelevancy(EVIDENCE).measure(LLMTestCase(
        input=asked, actual_output="That err pay 977 mean the provider timed out."))
    assert other == 0.0 and same == 1.0 and plain > 0.0  # naming no code is not naming another


def test_context_about_other_codes_is_irrelevant_to_the_question():
    case = LLMTestCase(input="ERR-PAY-977 là lỗi gì?", actual_output="x", retrieval_context=[
        "ERR-PAY-942 nghĩa là ngân hàng từ chối giao dịch. ERR-PAY-101 nghĩa là tài khoản không đủ tiền."])
    assert OfflineContextualRelevancy(EVIDENCE).measure(case) == 0.0
