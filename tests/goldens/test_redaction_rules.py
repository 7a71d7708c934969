"""Redaction rules of issue 23 §2: an IPv4 before a sentence-final '.' or a ':port' is redacted,
and a number is a phone only with phone formatting or phone context (amounts, years, order
numbers, dates, times and ISBNs that libphonenumber calls valid stay untouched)."""

import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rag_loop.goldens.redaction import PLANTED, Redactor, false_positives, planted_recall

KB = Path(__file__).resolve().parents[2] / "data" / "demo" / "kb" / "documents.jsonl"


def test_ipv4_before_a_period_or_a_port_is_redacted_and_the_port_kept():
    assert (Redactor().redact("KB: 192.168.1.10. Host 10.0.0.1:8080")
            == "KB: [REDACTED_IP]. Host [REDACTED_IP]:8080")


def test_amounts_and_years_that_libphonenumber_calls_german_are_not_phones():
    text = "The fee is 1690 EUR. Built in 1648."
    assert Redactor().redact(text) == text


@pytest.mark.parametrize("text", [
    "version 1.2.3.4.5", "v1.2.3.4", "build 1.2.3.4.5.6", "pi is 3.14.15.92.65", "10.0.0.1.5",
    "1.2.3.4a", "999.1.1.1", "01.02.03.04", "at 12:10.0.0.1", "node1.2.3.4"])
def test_dotted_numbers_that_are_not_standalone_addresses_are_not_ips(text):
    assert Redactor(["ip"]).redact(text) == text


@pytest.mark.parametrize("text, expected", [
    ("IP:10.0.0.1, then", "IP:[REDACTED_IP], then"), ("::ffff:10.0.0.1", "::ffff:[REDACTED_IP]"),
    ("(10.0.0.1)", "([REDACTED_IP])"), ("see 10.0.0.0/8.", "see [REDACTED_IP]/8."),
    ("down: 2001:db8::1.", "down: [REDACTED_IP]."), ("fe80::1: gone", "[REDACTED_IP]: gone"),
    ("http://10.0.0.1:8080/x", "http://[REDACTED_IP]:8080/x"), ("try 10.0.0.1...", "try [REDACTED_IP]..."),
    ("at 10.0.0.20:8080.Next chunk", "at [REDACTED_IP]:8080.Next chunk")])
def test_addresses_in_punctuation_are_redacted(text, expected):
    assert Redactor(["ip"]).redact(text) == expected


PHONES = ["Tel: 1690", "call 0912345678", "SĐT: 0912 3456", "điện thoại 1648", "(415) 555-0132",
          "415-555-0132", "9123 4567", "020 7946 0018", "01 23 45 67 89", "98765 43210",
          "030/1234567", "0912.345.678", "+49 30 1234567", "Phone number: 030123456"]
NOT_PHONES = ["1.690.000 EUR", "16 900 000 VND", "from 1648-1690", "at 20:15 16.03.2024",
              "ISBN 0-306-40615-2", "0-306-40615-2", "ISBN-10 0306406152", "order 16901234",
              "order #0301234567", "in 2024 16900 visitors", "3804733.738 kg", "Built in 1648. 1690 visitors",
              "1690.5 EUR", "page 16 900", "hotel 1690", "Intel 1648", "recall 1690 units"]


@pytest.mark.parametrize("text", PHONES)
def test_phone_formatting_or_context_makes_a_phone(text):
    assert "[REDACTED_PHONE]" in Redactor(["phone"]).redact(text)


@pytest.mark.parametrize("text", NOT_PHONES)
def test_numbers_without_phone_formatting_or_context_are_not_phones(text):
    assert Redactor().redact(text) == text


LEADS = ["The fee is", "Built in", "It costs", "about", "order", "Room", "in", "since", "up to",
         "Năm", "Phí là", "khoảng", ""]
BEFORE = ["", "$", "€", "EUR ", "US$", "£", "#", "(", "~"]
AFTER = ["", " EUR", " VND", " đồng", " km", " kg", "%", " people", " AD", " years", " m²", ")"]
plain_number = st.one_of(
    st.integers(1, 7).flatmap(lambda d: st.integers(0 if d == 1 else 10 ** (d - 1), 10 ** d - 1)).map(str),
    st.text(alphabet="0123456789", min_size=1, max_size=7))  # with leading zeros: order numbers
clause = st.tuples(st.sampled_from(LEADS), st.sampled_from(BEFORE), plain_number,
                   st.sampled_from(AFTER), st.sampled_from([".", ","]))


@settings(max_examples=300, deadline=None)
@given(st.lists(clause, min_size=1, max_size=5))
@example([("The fee is", "", "1690", " EUR", "."), ("Built in", "", "1648", "", ".")])
@example([("", "", "16950", "", "."), ("", "", "1648", "", ",")])
def test_plain_numbers_in_prose_are_never_changed(clauses):
    text = " ".join(f"{lead} {before}{number}{after}{end}".lstrip() for lead, before, number, after, end in clauses)
    assert Redactor().redact(text) == text


IP_LEADS = ["KB: ", "Host ", "server at ", "IP:", "máy chủ ", "(", "from ", ""]
ip_suffix = st.one_of(st.sampled_from([".", ",", ""]), st.integers(0, 65535).map(lambda port: f":{port}"))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(IP_LEADS), st.ip_addresses(v=4), ip_suffix, st.sampled_from(["", " then it failed."]))
@example("KB: ", "192.168.1.10", ".", " Host")
@example("Host ", "10.0.0.1", ":8080", "")
def test_ipv4_before_punctuation_a_port_or_the_end_is_always_redacted(lead, address, suffix, tail):
    tail = tail if suffix else ""  # an address without a suffix ends the text
    text = f"{lead}{address}{suffix}{tail}"
    assert Redactor().redact(text) == f"{lead}[REDACTED_IP]{suffix}{tail}"


def kb_texts() -> list[str]:
    with KB.open(encoding="utf-8") as lines:
        return [chunk["text"] for line in lines if line.strip() for chunk in json.loads(line)["chunks"]]


def test_the_demo_knowledge_base_has_no_phone_or_ip_false_positive():
    texts = kb_texts()
    counts = false_positives(Redactor(), texts)
    print(f"demo KB: {len(texts)} chunks, likely false positives {counts}")
    assert len(texts) > 100
    assert counts["phone"] == 0 and counts["ip"] == 0


def test_planted_recall_stays_complete_with_the_new_examples():
    assert {"192.168.1.10.", "10.0.0.1:8080"} <= set(PLANTED["ip"])
    assert planted_recall(Redactor()) == dict.fromkeys(Redactor().kinds, 1.0)
