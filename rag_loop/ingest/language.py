"""The language of a query, when the trace does not say: identified from what the user typed.

Real instrumentations (OpenInference, OTel GenAI) send no language attribute, so without this
every OTLP trace would be `und`: no language slices, Vietnamese embedded by the English model.
The identifier is py3langid (langid.py's model, 142 languages, shipped inside the package,
offline; chosen over lingua by `bench/language_id.py`: more accurate on short queries and on
Vietnamese typed without diacritics, a twentieth of the size, ~60 µs a query).

What cannot be told is `und`, never a guess: a query with too few letters once codes and
numbers are set aside (`ERR-PAY-977`, `#4411`, `v2.3.1`), or whose most likely language is less
likely than `min_confidence`. A deployment that knows its languages says so (`languages`):
the identifier then chooses among those only, which is what makes short queries and
Vietnamese without diacritics come out right (see the bench).
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import duckdb
import pyarrow as pa

UNDETERMINED = "und"
# tokens that are not words of a language: anything with a digit (codes, ids, amounts), mail
# addresses, URLs; acronyms and codes in capitals (VPN, ERR_PAY, SKU) are told by `isupper`
_NOT_WORDS = re.compile(r"\d|@|://")
_LETTERS = re.compile(r"[^\W\d_]", re.UNICODE)


class LanguageSource(StrEnum):
    """How a trace's language was obtained (raw_traces.language_source)."""

    ATTRIBUTE = "attribute"  # the trace said (native `language`, OTLP `rag.language`)
    DETECTED = "detected"  # identified from the query
    UNDETERMINED = "undetermined"  # neither: the language is `und`


@dataclass(frozen=True)
class LanguageSettings:
    """What the identifier may answer.

    `languages`: the ISO 639 codes the deployment's traffic is in (empty: every language the
    model knows); `min_confidence`: below this probability of the best language, `und`;
    `min_letters`: fewer letters than this, once codes and numbers are set aside, `und`.
    """

    languages: tuple[str, ...] = ()
    min_confidence: float = 0.1
    min_letters: int = 3

    def __post_init__(self) -> None:
        unknown = set(self.languages) - set(known_languages()) if self.languages else set()
        if unknown:
            raise ValueError(f"unknown language codes {sorted(unknown)}: the identifier knows "
                             f"{', '.join(known_languages())}")


EVERY_LANGUAGE = LanguageSettings()


_MODEL: list[Future] = []  # the model as loaded, once per process
_MODEL_LOCK = threading.Lock()


def _model(background: bool = False) -> Future:
    """The identifier's model, loaded once (a few seconds: an xz-compressed file, whose
    decompression releases the GIL); `background` loads it in a thread of its own."""
    with _MODEL_LOCK:
        if _MODEL:
            return _MODEL[0]
        _MODEL.append(Future())
    future = _MODEL[0]

    def load() -> None:
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            future.set_result(LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True))
        except BaseException as error:  # noqa: BLE001 - raised where the model is used
            future.set_exception(error)

    if background:
        threading.Thread(target=load, name="language-model", daemon=True).start()
    else:
        load()
    return future


def preload() -> None:
    """Start loading the model in the background, for a run that will identify languages
    (OTLP traces seldom say theirs) while it still reads its files."""
    _model(background=True)


@cache
def _identifier(languages: tuple[str, ...]):
    identifier = _model().result()
    if languages:  # a copy restricted to these (set_languages replaces arrays, shares none it changes)
        identifier = copy.copy(identifier)
        identifier.set_languages(list(languages))
    return identifier


@cache
def known_languages() -> tuple[str, ...]:
    """Every code the identifier can answer (`zxx`, "no linguistic content", is answered `und`)."""
    return tuple(code for code in _identifier(()).labels if code != "zxx")


def words_of(text: str) -> str:
    """The text without what no language identifier can read: codes, numbers, ids, URLs,
    acronyms (a text of three or more words all in capitals is read in lower case: somebody
    shouting)."""
    if text.isupper() and sum(token.isalpha() for token in text.split()) >= 3:
        text = text.lower()
    return " ".join(token for token in text.split()
                    if not _NOT_WORDS.search(token) and not (token.isupper() and len(_LETTERS.findall(token)) > 1))


def identify(text: str | None, settings: LanguageSettings = EVERY_LANGUAGE) -> str:
    """The ISO 639 code of the language `text` is in, or `und`."""
    if not isinstance(text, str):
        return UNDETERMINED
    words = words_of(text)
    if len(_LETTERS.findall(words)) < settings.min_letters:
        return UNDETERMINED
    code, confidence = _identifier(settings.languages).classify(words)
    if confidence < settings.min_confidence or code == "zxx":
        return UNDETERMINED
    return code


def identify_all(texts: Iterable[str | None], settings: LanguageSettings = EVERY_LANGUAGE) -> list[str]:
    """`identify` of each text; a text repeated is identified once."""
    texts = list(texts)
    found = {text: identify(text, settings) for text in dict.fromkeys(texts)}
    return [found[text] for text in texts]


def settings_from(languages: Sequence[str] = ()) -> LanguageSettings:
    """LanguageSettings from a configuration's list (codes lower-cased, repeats dropped)."""
    return LanguageSettings(tuple(dict.fromkeys(code.strip().lower() for code in languages if code.strip())))


def label_languages(con: duckdb.DuckDBPyConnection, settings: LanguageSettings = EVERY_LANGUAGE) -> dict[str, int]:
    """Decide the language of every stored trace not decided yet (`language_source` NULL): the
    trace's own language when it has one (a database from before the column), else the one
    `identify` finds in its query, each distinct query identified once. Returns the traces
    labelled, by source. Rows a run stores are decided in the same run, so this reads only them
    (and, once, a database from before)."""
    if not con.execute("SELECT 1 FROM raw_traces WHERE language_source IS NULL LIMIT 1").fetchall():
        return {}  # every trace decided: one query instead of an update and a scan
    con.execute("""UPDATE raw_traces SET language_source = 'attribute'
                   WHERE language_source IS NULL AND language IS NOT NULL""")
    queries = [q for (q,) in con.execute("""SELECT DISTINCT original_query FROM raw_traces
                                            WHERE language_source IS NULL""").fetchall()]
    if not queries:
        return {}
    found = identify_all(queries, settings)
    con.register("_identified", pa.table({
        "query": pa.array(queries, pa.string()), "language": pa.array(found, pa.string()),
        "source": pa.array([LanguageSource.UNDETERMINED if code == UNDETERMINED else LanguageSource.DETECTED
                            for code in found], pa.string())}))
    try:
        counts = dict(con.execute("""
            SELECT source, count(*) FROM raw_traces JOIN _identified ON original_query = query
            WHERE language_source IS NULL GROUP BY 1""").fetchall())
        con.execute("""UPDATE raw_traces SET language = i.language, language_source = i.source
                       FROM _identified i
                       WHERE raw_traces.language_source IS NULL AND raw_traces.original_query = i.query""")
    finally:
        con.unregister("_identified")
    return counts
