"""Language identification of short queries: accuracy per language and hard case, and cost.

    python bench/language_id.py [--data ../shared/data] [--compare]

Sets (each query once): the English intent sets of `../shared/data` (banking77, hwu64) and the
BEGIN dialogue turns; the demo world's queries per language, its Vietnamese with diacritics,
typed without them, and the same queries with their diacritics stripped; the queries of the
OTLP fixtures (`tests/fixtures/otlp/truth.jsonl`, written by real instrumented apps); a few
Vietnamese sentences with English words in them; code-like strings and noise, whose right
answer is `und`; and the queries of three words or fewer of all but the last. The settings
(confidence floor 0.1, 3 letters) were chosen on banking77 and the demo's sets; hwu64, BEGIN,
the fixtures and the mixed sentences were not looked at to choose them.
Printed per set: the share identified right, the share answered `und`, the commonest wrong
answers. Then the cost of `identify` per 100k queries, beside a bare `str.split` of the same
queries in the same process (the baseline), and the first call (the model's load).

Two settings are measured: every language the model knows (a deployment that does not say),
and `languages=en,vi` (one that does). `--compare` adds lingua-language-detector, the other
offline candidate, if it is installed (`pip install lingua-language-detector`), both ways.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import json
import time
from collections.abc import Callable
from pathlib import Path

from rag_loop.ingest.language import UNDETERMINED, LanguageSettings, identify
from rag_loop.text import fold_accents

ROOT = Path(__file__).resolve().parent.parent
CODE_LIKE = ["ERR-PAY-977", "ERR_PAY_977", "INC-2041", "0x7f3a", "SKU 44-1209-B", "#4411", "v2.3.1",
             "HTTP 503", "IT-001", "TKT-88321?", "ORA-00942", "E1102", "404", "???", "ok", "a",
             "PAY-977 ERR", "https://pay.example.com/err/977", "ops@example.com", "1.200.000 đ",
             "kwijibo zxqv", ":)", "...", "ERR-PAY-977?!"]


# Vietnamese sentences with English words in them, as helpdesk users type them: the sentence's
# language is the answer
MIXED = ["Làm sao reset password cho tài khoản?", "VPN bị disconnect liên tục phải làm gì?",
         "cách đổi email trong profile", "Tôi không login được vào portal", "update laptop driver ở đâu",
         "deadline nộp expense report là khi nào?", "làm sao book phòng meeting", "file PDF không mở được",
         "Có cần approval của manager không?", "team mình dùng Slack hay Teams?",
         "lam sao reset password cho tai khoan", "vpn bi disconnect lien tuc phai lam gi"]


def demo_queries() -> list[tuple[str, str]]:
    """(query, language) of the demo world's native traces, each query once."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "data/demo/traces/native").glob("*.jsonl*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and record.get("language") and record.get("original_query"):
                    found.setdefault(record["original_query"], record["language"])
    return sorted(found.items())


def load_sets(data: Path) -> dict[str, list[tuple[str, str]]]:
    """Each set: (query, the right answer)."""
    def column(name: str, key: str) -> list[str]:
        with open(data / name, encoding="utf-8") as rows:
            return sorted({row[key] for row in csv.DictReader(rows)})

    def begin(name: str) -> list[str]:
        with open(data / name, encoding="utf-8") as rows:
            return sorted({json.loads(line)["question"] for line in rows if line.strip()})

    demo = demo_queries()
    vietnamese = [q for q, lang in demo if lang == "vi"]
    with_marks = [q for q in vietnamese if fold_accents(q) != q]
    truth = [json.loads(line) for line in open(ROOT / "tests/fixtures/otlp/truth.jsonl", encoding="utf-8")]
    fixtures = sorted({(r["original_query"], r["language"] or UNDETERMINED) for r in truth if r["original_query"]})
    return {
        "banking77 (en)": [(q, "en") for q in column("banking77.csv", "query")],
        "hwu64 (en)": [(q, "en") for q in column("hwu64.csv", "query")],
        "BEGIN turns (en)": [(q, "en") for name in ("begin_cmu_dog_dev.jsonl", "begin_topicalchat_dev.jsonl")
                             for q in begin(name)],
        "demo en": [(q, "en") for q, lang in demo if lang == "en"],
        "demo vi, diacritics": [(q, "vi") for q in with_marks],
        "demo vi, typed without": [(q, "vi") for q in vietnamese if fold_accents(q) == q],
        "demo vi, stripped": [(fold_accents(q), "vi") for q in with_marks],
        "OTLP fixtures (en, vi)": fixtures,
        "mixed: vi with English words": [(q, "vi") for q in MIXED],
        "code-like, noise (und)": [(q, UNDETERMINED) for q in CODE_LIKE],
    }


def accuracy(sets: dict[str, list[tuple[str, str]]], identify_one: Callable[[str], str]) -> list[dict]:
    rows = []
    short = [case for name, cases in sets.items() if not name.startswith("code") for case in cases
             if len(case[0].split()) <= 3]
    for name, cases in {**sets, "short (3 words or fewer), of the sets above": short}.items():
        answers = [identify_one(q) for q, _ in cases]
        wrong = collections.Counter(a for a, (_, right) in zip(answers, cases) if a != right)
        rows.append({"set": name, "n": len(cases),
                     "right": sum(a == right for a, (_, right) in zip(answers, cases)) / len(cases),
                     "und": sum(a == UNDETERMINED for a in answers) / len(cases),
                     "wrong answers": ", ".join(f"{code} {n}" for code, n in wrong.most_common(4))})
    return rows


def cost(queries: list[str], identify_one: Callable[[str], str]) -> tuple[float, float, float]:
    """(first call s, s per 100k queries, baseline s per 100k): each query identified anew."""
    start = time.perf_counter()
    identify_one(queries[0])
    first = time.perf_counter() - start
    start = time.perf_counter()
    for query in queries:
        identify_one(query)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    for query in queries:
        query.split()
    bare = time.perf_counter() - start
    return first, seconds * 100_000 / len(queries), bare * 100_000 / len(queries)


def lingua(languages: tuple[str, ...]) -> Callable[[str], str]:
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    builder = (LanguageDetectorBuilder.from_iso_codes_639_1(*[getattr(IsoCode639_1, c.upper()) for c in languages])
               if languages else LanguageDetectorBuilder.from_all_languages())
    detector = builder.with_preloaded_language_models().build()

    def identify_one(text: str) -> str:
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else UNDETERMINED
    return identify_one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--compare", action="store_true", help="lingua-language-detector too")
    args = parser.parse_args()
    sets = load_sets(args.data)
    queries = [q for cases in sets.values() for q, _ in cases]
    candidates: dict[str, Callable[[str], str]] = {}
    for languages in ((), ("en", "vi")):
        settings = LanguageSettings(languages)
        candidates[f"rag-loop identify, languages={','.join(languages) or 'all'}"] = \
            lambda q, s=settings: identify(q, s)
        if args.compare:
            candidates[f"lingua, languages={','.join(languages) or 'all'}"] = lingua(languages)
    import pandas as pd

    for name, identify_one in candidates.items():
        first, per_100k, bare = cost(queries, identify_one)
        print(f"\n## {name}\nfirst call {first:.2f} s; {per_100k:.2f} s per 100k queries "
              f"({len(queries)} queries, each identified anew), bare split {bare:.3f} s per 100k: "
              f"{per_100k / bare:.0f}x")
        print(pd.DataFrame(accuracy(sets, identify_one)).to_markdown(index=False, floatfmt=".3f"))


if __name__ == "__main__":
    main()
