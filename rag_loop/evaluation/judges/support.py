"""Graded, lexical support of a claim by a context: the offline Faithfulness judge's rules.

A claim's support is a number in [0, 1], not a verdict, so that scores rank answers:

- Terms: text lower-cased, accents folded, "n't" spelled "not", numbers normalised (digits and
  number words alike: "five" = "5", "1,000" = "1.000" = "1 000" = "1000", "7th" = "7", English
  and a few Vietnamese number words), month names and their abbreviations merged ("Jun" =
  "June"), and a light suffix stemmer ("rotated" = "rotate", "movies" = "movie") that leaves
  the yes/no and negation cue words as they are ("true", "nothing", "none" stay cues).
- Coverage: the weighted share of the claim's terms found in the context, half anywhere in it
  and half in its best-matching sentence (so that "Paris is the capital of Germany" is not
  supported by "Paris is the capital of France. Berlin is the capital of Germany."). Content
  words weigh 1, function words 0.25 (a chit-chat reply made of "i", "my", "you" has little in
  the documents), numbers and capitalised names 2 (what an unfaithful answer swaps), and
  third-person pronouns 0 ("it", "he": they refer to what the context is about).
- Contradiction cues, multiplied in: a word negated in the claim ("not", "no", "never",
  "không", "chưa", up to 3 content words after the cue, within its clause) but asserted in the
  best-matching context sentence, or the other way round, halves support (a word asserted
  elsewhere in the same text is not negated: "can not copy Stark's reactor, so Stane attacks
  Stark" asserts Stark); a number of the claim that the context does not have halves it too
  ("12 days" is not "15 days").
- Claims are the answer's statements. A question about what the context is about (one of its
  content words is in the context) asserts nothing the context can attribute: it counts as a
  claim with support 0 (QUESTION_SUPPORT; "Did you know that ...?" included: on both BEGIN dev
  sets no answer that asks a question is labelled fully attributable). A question about
  nothing in the context ("Anything else I can help with?") is dropped: closing an answer
  with it is not unfaithful.
  A bare "yes"/"no" ("Yeah.", "That is true.", "I agree.") is dropped when other statements
  carry the content. A bare yes/no answer is judged with the question: supported as far as
  the question's words are found in the context, and its polarity ("no") must agree with the
  best-matching context sentence. A short answer with content words ("Paris", "in 1998") is
  judged on its own words (QUESTION_WEIGHT = 0: mixing in the question's words lowered
  ROC-AUC on the dev dialogues).
- A claim's grade is OVERLAP_SHARE of its bare word overlap (the share of its words, lower-cased
  and accents folded, found anywhere in the context: no stemming, weights or rules; third-person
  pronouns left out as above) plus the rest of its support above. The rules carry most of the
  gain over bare overlap on the dev sets, but each one is a bet on how people label (stemmed
  matches, the best sentence, weights): the overlap term keeps the score nearer overlap's
  ranking where a rule misjudges unseen data. OVERLAP_SHARE 0.2 was chosen on BEGIN CMU-DoG dev
  (grid 0..1 by 0.05, ROC-AUC 0.9809 -> 0.9817) and checked on Topical-Chat dev (0.9656 ->
  0.9678); choosing on Topical-Chat gives 0.55 (0.9696 there), which gives 0.9804 on CMU-DoG
  (`python bench/judge.py` prints both directions). A bare "yes"/"no" judged with the question
  keeps its support alone (its own words are not in any context), and a question keeps
  QUESTION_SUPPORT.
- An answer with no claims scores 0 (nothing faithful was said).

The other weights are round values fixed a priori, not fitted; on both dev sets (BEGIN CMU-DoG and
Topical-Chat) ROC-AUC moves by < 0.01 when any one of them is halved or doubled
(python bench/judge.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from rag_loop.text import fold_accents

# weights of a term in the coverage (see the module docstring)
W_FUNCTION, W_CONTENT, W_KEY = 0.25, 1.0, 2.0
NEGATION_MISMATCH = 0.5  # factor when the claim and its best context sentence disagree on "not"
MISSING_NUMBER = 0.5  # factor when a number of the claim is nowhere in the context
QUESTION_WEIGHT = 0.0
QUESTION_SUPPORT = 0.0  # support of a question in the answer: it asserts nothing attributable
SENTENCE_SHARE = 0.5  # weight of the coverage by the best-matching sentence alone
SHORT_CLAIM = 4  # fewer content words than this: the question helps judge the claim
OVERLAP_SHARE = 0.2  # weight of a claim's bare word overlap in its grade (see the docstring)

_FUNCTION = frozenset("""a an the of to in on for and or is are be been being was were am it its this that these
those with as at by from do does did done i you we they he she him her his hers them their theirs me my
mine your yours our ours us can could would should will shall may might must have has had how what when
where which who whom whose why per up so but if then than there here just very really too also well oh
yeah yes yep ok okay lol um uh hmm like about into out over all any some much many more most such own
same only other one ones s t d ll re ve m la co duoc cho va voi cua toi ban minh thi nao gi la mot nhung cac
""".split())
# third-person pronouns refer to what the context is about (DeepEval's claim extraction would
# resolve them): no weight. First and second person ("i", "you") stay function words.
_REFERRING = frozenset("it its he him his she her hers they them their theirs".split())
_NEGATION = frozenset(["not", "no", "never", "none", "nothing", "nobody", "neither", "nor", "without",
                       "khong", "chua", "chang", "cannot"])
_YES = frozenset(["yes", "yeah", "yep", "yup", "true", "correct", "right", "agree", "sure", "exactly",
                  "indeed", "co", "dung", "vang", "u"])
_NO = frozenset(["no", "nope", "false", "incorrect", "khong", "chua", "sai"])
_CUES = _NEGATION | _YES | _NO  # kept unstemmed

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("_ _ twenty thirty forty fifty sixty seventy eighty ninety".split())
         if w != "_"}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
             "eighth": 8, "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "twentieth": 20}
# Vietnamese number words (accents folded). "nam", "ba", "sau", "bay" are also ordinary words
# ("year", "father", "after", "fly"), so they count as numbers only before a unit word.
_VI_UNITS = {"mot": 1, "hai": 2, "ba": 3, "bon": 4, "tu": 4, "nam": 5, "lam": 5, "sau": 6, "bay": 7,
             "tam": 8, "chin": 9, "muoi": 10}
_VI_UNIT_WORDS = frozenset(["ngay", "tuan", "thang", "nam", "gio", "phut", "giay", "lan", "nguoi",
                            "trieu", "nghin", "ngan", "tram", "dong", "tuoi", "buoi", "ky"])
_MONTHS = {m: m for m in "january february march april june july august september october november "
           "december".split()}
_MONTHS.update({"jan": "january", "feb": "february", "mar": "march", "apr": "april", "jun": "june",
                "jul": "july", "aug": "august", "sep": "september", "sept": "september", "oct": "october",
                "nov": "november", "dec": "december"})

_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:([,. ])\d{3})(?:\1\d{3})*(?![\d]|[.,]\d)")
_ORDINAL_DIGITS = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b")
_TOKEN = re.compile(r"\d+(?:\.\d+)?|\w+")
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+")
_CAPITALISED = re.compile(r"\b[A-Z][\w-]*")
_WORD = re.compile(r"\w+")


def _contractions(text: str) -> str:
    text = re.sub(r"\b(can)not\b", r"\1 not", text, flags=re.I)
    text = re.sub(r"\bwon[’']t\b", "will not", text, flags=re.I)
    text = re.sub(r"\bcan[’']t\b", "can not", text, flags=re.I)
    return re.sub(r"n[’']t\b", " not", text, flags=re.I)


def stem(word: str) -> str:
    """A light English suffix stemmer; numbers and short words are kept as they are."""
    if len(word) <= 3 or word[0].isdigit():
        return word
    for suffix, keep in (("ies", "y"), ("ied", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", ""),
                         ("ly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + keep
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiou":
        word = word[:-1]  # "stopp(ed)" = "stop"
    return word


def _numbers(words: list[str]) -> list[tuple[str, bool]]:
    """Number words merged into digits: ("two", "hundred") -> "200". (term, is_number)."""
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w in _UNITS or w in _TENS or (w in _SCALES and out and out[-1][1]):
            total, current, j = 0, 0, i
            while j < len(words):
                x = words[j]
                if x in _UNITS:
                    current += _UNITS[x]
                elif x in _TENS:
                    current += _TENS[x]
                elif x in _SCALES:
                    current = max(current, 1) * _SCALES[x]
                    if _SCALES[x] >= 1000:
                        total, current = total + current, 0
                elif x == "and" and j > i and words[j - 1] in _SCALES and j + 1 < len(words) \
                        and (words[j + 1] in _UNITS or words[j + 1] in _TENS):
                    pass  # "two hundred and five"
                else:
                    break
                j += 1
            if j == i:  # a scale word on its own after a digit ("5 million")
                value = int(float(out.pop()[0])) * _SCALES[w]
                out.append((str(value), True))
                i += 1
                continue
            out.append((str(total + current), words[i:j] != ["one"]))  # "the one about ..."
            i = j
            continue
        if w in _ORDINALS:
            out.append((str(_ORDINALS[w]), True))
        elif w in _VI_UNITS and i + 1 < len(words) and (words[i + 1] in _VI_UNIT_WORDS
                                                         or words[i + 1] in _VI_UNITS):
            value = _VI_UNITS[w]
            if words[i + 1] == "muoi":  # "hai muoi" = 20
                value, i = value * 10, i + 1
                if i + 1 < len(words) and words[i + 1] in _VI_UNITS and words[i + 1] != "muoi" \
                        and i + 2 < len(words) and words[i + 2] in _VI_UNIT_WORDS:
                    value, i = value + _VI_UNITS[words[i + 1]], i + 1
            elif w == "muoi" and words[i + 1] in _VI_UNITS:  # "muoi lam" = 15
                value, i = 10 + _VI_UNITS[words[i + 1]], i + 1
            out.append((str(value), True))
        elif w[0].isdigit():
            out.append((w.rstrip("0").rstrip(".") if "." in w else w.lstrip("0") or "0", True))
        elif w in _MONTHS:
            out.append((_MONTHS[w], False))
        else:
            out.append((w, False))
        i += 1
    return out


@dataclass(frozen=True)
class Term:
    text: str
    weight: float
    number: bool


@lru_cache(maxsize=65536)
def terms(text: str) -> tuple[Term, ...]:
    """The normalised terms of a text with their weights (see the module docstring)."""
    names = {stem(fold_accents(m.group()).lower()) for m in _CAPITALISED.finditer(text)
             if m.start() > 0 and text[m.start() - 1] not in ".!?\n" and text[:m.start()].strip()
             and m.group() != "I"}
    folded = fold_accents(_contractions(text)).lower()
    folded = _THOUSANDS.sub(lambda m: re.sub(r"[,. ]", "", m.group()), folded)
    folded = _ORDINAL_DIGITS.sub(r"\1", folded)
    found = []
    for word, is_number in _numbers(_TOKEN.findall(folded)):
        if is_number:
            found.append(Term(word, W_KEY, True))
            continue
        stemmed = word if word in _CUES else stem(word)  # "none" is a cue, not the prefix "non"
        if word in _REFERRING:
            continue
        if word in _FUNCTION or len(word) < 2:
            found.append(Term(stemmed, W_FUNCTION, False))
        else:
            found.append(Term(stemmed, W_KEY if stemmed in names else W_CONTENT, False))
    return tuple(found)


def vocabulary(text: str) -> frozenset[str]:
    return frozenset(t.text for t in terms(text))


_CLAUSE = re.compile(r"[,;:.!?()\n]+|\s(?:but|although|though|while|whereas|nhung)\s", re.I)
NEGATION_SCOPE = 3  # content words after a negation cue that it negates, within its clause


def negated(text: str) -> bool:
    return any(t.text in _NEGATION for t in terms(text))


@lru_cache(maxsize=65536)
def negated_words(text: str) -> frozenset[str]:
    """Content words under a negation: up to NEGATION_SCOPE content words after "not", "no",
    "never", "không"... in the same clause ("is not involved in hotels" -> involve, hotel),
    unless the text asserts them elsewhere ("can not copy Stark's reactor, so Stane attacks
    Stark" does not negate Stark)."""
    found: set[str] = set()
    asserted: set[str] = set()
    for clause in _CLAUSE.split(text):
        left = 0
        for term in terms(clause):
            if term.text in _NEGATION:
                left = NEGATION_SCOPE
            elif left and term.weight >= W_CONTENT:
                found.add(term.text)
                left -= 1
            else:
                asserted.add(term.text)
    return frozenset(found - asserted)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text or "") if s.strip()]


@lru_cache(maxsize=65536)
def _word_list(text: str) -> tuple[str, ...]:
    return tuple(_WORD.findall(fold_accents(text).lower()))


def words(text: str) -> frozenset[str]:
    """A text's bare words: lower-cased, accents folded, nothing stemmed or dropped."""
    return frozenset(_word_list(text))


def word_overlap(claim: str, context: Context) -> float:
    """Bare word overlap: the share of the claim's words found anywhere in the context (third-
    person pronouns left out, as in the rules: "It was developed by OpenAI" is all found)."""
    found = [w for w in _word_list(claim) if w not in _REFERRING]
    return sum(w in context.words for w in found) / len(found) if found else 0.0


def _coverage(claim: Sequence[Term], found: frozenset[str]) -> float:
    total = sum(t.weight for t in claim)
    return sum(t.weight for t in claim if t.text in found) / total if total else 0.0


class Context:
    """A retrieval context prepared once per case: its vocabulary and its sentences."""

    def __init__(self, texts: Sequence[str]):
        self.sentences = [s for text in texts for s in sentences(text)]
        self.sentence_vocab = [vocabulary(s) for s in self.sentences]
        self.sentence_negated = [negated_words(s) for s in self.sentences]
        self.vocab = frozenset().union(*self.sentence_vocab) if self.sentence_vocab else frozenset()
        self.words = frozenset().union(*(words(text) for text in texts)) if texts else frozenset()

    def best_sentence(self, words: set[str]) -> int | None:
        """The sentence sharing most of these words (None when none shares any)."""
        best, index = 0, None
        for i, vocab in enumerate(self.sentence_vocab):
            shared = len(words & vocab)
            if shared > best:
                best, index = shared, i
        return index


def _polarity(claim_negated: frozenset[str] | bool, context: Context, words: set[str]) -> float:
    """NEGATION_MISMATCH when the best-matching context sentence negates a shared word that the
    claim asserts, or the other way round; for a bare "no" (claim_negated True/False), when
    the sentence's negation of the question's words disagrees with the answer's polarity."""
    index = context.best_sentence(words)
    if index is None:
        return 1.0
    shared = words & context.sentence_vocab[index]
    in_context = context.sentence_negated[index] & shared
    if isinstance(claim_negated, bool):
        return NEGATION_MISMATCH if claim_negated != bool(in_context) else 1.0
    return NEGATION_MISMATCH if (claim_negated & shared) != in_context else 1.0


def support(claim: str, context: Context, question: str = "") -> float:
    """How far the context supports the claim, in [0, 1] (see the module docstring)."""
    claim_terms = [t for t in terms(claim) if t.text not in _NEGATION]
    content = [t for t in claim_terms if t.weight >= W_CONTENT and t.text not in _YES | _NO]
    question_terms = [t for t in terms(question) if t.weight >= W_CONTENT and t.text not in _NEGATION]
    if not content:  # "Yes.", "No, it is not.": judged by the question's words and polarity
        if not question_terms:
            return 0.0
        words = {t.text for t in question_terms}
        first = terms(claim)[0].text if terms(claim) else ""
        return _coverage(question_terms, context.vocab) * _polarity(negated(claim) or first in _NO,
                                                                    context, words)
    score = _coverage(claim_terms, context.vocab)
    if SENTENCE_SHARE:
        # the same terms in one sentence: "Paris is the capital of Germany" is not supported by
        # "Paris is the capital of France. Berlin is the capital of Germany."
        index = context.best_sentence({t.text for t in content})
        local = _coverage(claim_terms, context.sentence_vocab[index]) if index is not None else 0.0
        score = (1 - SENTENCE_SHARE) * score + SENTENCE_SHARE * local
    if len(content) < SHORT_CLAIM and question_terms and QUESTION_WEIGHT:
        # a short answer ("Paris", "in 1998") means little alone; the question says what it answers
        score = (1 - QUESTION_WEIGHT) * score + QUESTION_WEIGHT * _coverage(question_terms, context.vocab)
    numbers = {t.text for t in claim_terms if t.number}
    if numbers - context.vocab:
        score *= MISSING_NUMBER
    return score * _polarity(negated_words(claim), context, {t.text for t in content})


def is_bare_polarity(claim: str) -> bool:
    """"Yes", "No", "Yeah": a claim with no content words of its own."""
    return not [t for t in terms(claim) if t.weight >= W_CONTENT and t.text not in _YES | _NO
                and t.text not in _NEGATION]


def is_question(claim: str) -> bool:
    return claim.rstrip().endswith("?")


def faithfulness(claims: Sequence[str], context: Context, question: str = "",
                 overlap_share: float = OVERLAP_SHARE) -> list[tuple[str, float]]:
    """(claim, grade) for the answer's statements: a claim's grade blends its bare word overlap
    (`overlap_share` of it) with its support; a question gets QUESTION_SUPPORT (the context cannot
    attribute it), and a bare "yes"/"no" is judged with the question (support alone) only when
    no other statement asserts something."""
    asserted = [c for c in claims if not is_question(c)]
    substantive = [c for c in asserted if not is_bare_polarity(c)]
    questions = [(c, QUESTION_SUPPORT) for c in claims if is_question(c) and _about(c, context)]
    if not substantive:
        return [(c, support(c, context, question)) for c in asserted] + questions
    return [(c, overlap_share * word_overlap(c, context) + (1 - overlap_share) * support(c, context, question))
            for c in substantive] + questions


def _about(question: str, context: Context) -> bool:
    """Does a question name what the context is about (a content word of it)? "Did you know
    ESPN won an Emmy?" presents knowledge; "Anything else I can help with?" does not."""
    return bool({t.text for t in terms(question) if t.weight >= W_CONTENT} & context.vocab)
