"""The language of traces that do not give one: identified from the query, recorded with how."""

import gzip
import json
import shutil

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_loop.ingest import ingest_directory
from rag_loop.ingest.language import (
    UNDETERMINED,
    LanguageSettings,
    identify,
    known_languages,
    settings_from,
)
from rag_loop.text import fold_accents
from tests.helpers import PROJECT, trace_line

OTLP = PROJECT / "tests" / "fixtures" / "otlp"
EN_VI = LanguageSettings(("en", "vi"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(), st.text(alphabet=st.characters(codec="utf-8")), st.none(),
                      st.from_regex(r"[A-Z]{2,4}-\d{1,4}( [a-z]{1,6}){0,3}\??", fullmatch=True)),
       restricted=st.booleans())
def test_identification_never_raises_and_answers_a_known_code_or_und(text, restricted):
    found = identify(text, EN_VI if restricted else LanguageSettings())
    assert found == UNDETERMINED or found in (("en", "vi") if restricted else known_languages())


@pytest.mark.parametrize("text", ["ERR-PAY-977", "ERR_PAY_977?", "#4411", "v2.3.1", "HTTP 503", "IT-001",
                                  "https://pay.example.com/err/977", "ops@example.com", "???", "ok", ""])
def test_codes_numbers_and_noise_are_undetermined(text):
    assert identify(text) == UNDETERMINED
    assert identify(text, EN_VI) == UNDETERMINED


@pytest.mark.parametrize("text, language", [
    ("Mã lỗi ERR-PAY-977 nghĩa là gì?", "vi"), ("Tôi được nghỉ phép bao nhiêu ngày?", "vi"),
    ("HOW MANY PAID LEAVE DAYS DO FULL-TIME EMPLOYEES GET PER YEAR", "en"),  # shouted, not acronyms
    ("What does error ERR-PAY-977 mean?", "en")])
def test_a_code_inside_a_sentence_leaves_the_sentence_s_language(text, language):
    assert identify(text) == language and identify(text, EN_VI) == language


def _demo_queries() -> list[tuple[str, str]]:
    found = {}
    for path in sorted((PROJECT / "data/demo/traces/native").glob("*.jsonl.gz"))[:4]:
        for line in gzip.open(path, "rt", encoding="utf-8"):
            record = json.loads(line)
            found.setdefault(record["original_query"], record["language"])
    return sorted(found.items())


def test_vietnamese_typed_without_diacritics_is_told_apart_when_the_deployment_names_its_languages():
    queries = _demo_queries()
    vietnamese = [q for q, lang in queries if lang == "vi" and fold_accents(q) != q]  # with diacritics
    without = [fold_accents(q) for q in vietnamese]
    english = [q for q, lang in queries if lang == "en"]
    assert len(vietnamese) > 150 and len(english) > 200
    share = {name: sum(identify(q, EN_VI) == lang for q in texts) / len(texts)
             for name, texts, lang in (("vi", vietnamese, "vi"), ("vi folded", without, "vi"), ("en", english, "en"))}
    assert share["vi"] >= 0.99 and share["en"] >= 0.98 and share["vi folded"] >= 0.75, share  # bench: 1.0, 0.996, 0.85


def test_a_deployment_naming_a_code_the_identifier_does_not_know_is_told_which():
    with pytest.raises(ValueError, match="'xx'"):
        settings_from(["en", " VI ", "xx"])
    assert settings_from(["en", " VI ", "en"]).languages == ("en", "vi")


def _languages(con) -> dict[str, tuple]:
    return {t: (lang, source) for t, lang, source in
            con.execute("SELECT trace_id, language, language_source FROM raw_traces").fetchall()}


def test_a_trace_s_own_language_wins_and_the_rest_are_identified_from_the_query(tmp_path):
    (tmp_path / "t.jsonl").write_text("\n".join([
        trace_line("given", language="vi", original_query="How many leave days do I get?"),
        trace_line("blank", language="  ", original_query="Tôi được nghỉ phép bao nhiêu ngày?"),
        trace_line("none", original_query="How many leave days do I get per year?"),
        trace_line("code", original_query="ERR-PAY-977")]) + "\n")
    con = duckdb.connect()
    report = ingest_directory(con, tmp_path)
    assert _languages(con) == {"given": ("vi", "attribute"), "blank": ("vi", "detected"),
                               "none": ("en", "detected"), "code": (UNDETERMINED, "undetermined")}
    assert report.languages == {"detected": 2, "undetermined": 1}
    assert ingest_directory(con, tmp_path).languages == {}  # nothing left to decide


def test_a_database_from_before_the_column_gets_its_traces_languages_at_the_next_run(tmp_path):
    (tmp_path / "t.jsonl").write_text(trace_line("given", language="en") + "\n"
                                      + trace_line("none", original_query="Mật khẩu phải đổi bao lâu một lần?") + "\n")
    con = duckdb.connect()
    ingest_directory(con, tmp_path)
    con.execute("ALTER TABLE raw_traces DROP COLUMN language_source")
    con.execute("UPDATE raw_traces SET language = NULL WHERE trace_id = 'none'")
    ingest_directory(con, tmp_path)
    assert _languages(con) == {"given": ("en", "attribute"), "none": ("vi", "detected")}


@pytest.fixture(scope="module")
def genai(tmp_path_factory):
    """The plain-openai app's OTLP traffic (no language attribute), ingested twice: every
    language the identifier knows, and the deployment's en and vi."""
    truth = {t["trace_id"]: t["language"] for t in map(json.loads, (OTLP / "truth.jsonl").read_text().splitlines())
             if t["framework"] == "genai" and t["kind"] == "request"}
    folder = tmp_path_factory.mktemp("genai")
    shutil.copytree(OTLP / "traces" / "genai", folder / "genai")
    found = {}
    for name, languages in (("all", LanguageSettings()), ("en,vi", EN_VI)):
        con = duckdb.connect()
        ingest_directory(con, folder, languages=languages)
        found[name] = _languages(con)
    return truth, found


def test_real_instrumented_traffic_gets_its_languages(genai):
    truth, found = genai
    assert found["en,vi"] == {t: (lang, "detected") for t, lang in truth.items()}
    every = found["all"]
    assert {source for _, source in every.values()} == {"detected"}
    assert all(every[t][0] == "vi" for t, lang in truth.items() if lang == "vi")
    assert sum(every[t][0] == lang for t, lang in truth.items()) / len(truth) >= 0.9  # 42 of 44
