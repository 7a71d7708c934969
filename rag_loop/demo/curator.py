"""A scripted curator for the demo: labels queue rows from the demo's ground truth.

    rag-loop demo curate --round 1   # label the first 40 rows of the newest queue
    rag-loop demo curate --round 2   # 30 more, relabel two, withdraw one

(options: --queue FILE, --labels-dir DIR, --curation-dir DIR or RAG_LOOP_CURATION_DIR; see
`rag-loop demo curate --help`).

It walks the queue in order, taking the first row of each (intent, language) so that the
goldens spread over the intents. It knows each trace's intent from the generator's ground
truth (`data/demo/truth.parquet`), so the expected output is
the fact of the newest document version in the query's language, and the expected source
is that fact's chunk. Rows whose intent has no document get the escalation answer. It writes
label files exactly as a curator would: `<labels dir>/demo-curator-round-<n>.jsonl`.

It also grades the online judge's Faithfulness and Answer Relevancy verdicts on each row it
labels (issue 45), as a person who knows what happened would (`OWN_VERDICTS`): a wrong chunk's
answer is faithful to it but does not answer the question; a mixed-up answer (`wrong_prompt`)
says what no chunk said. So the demo's agreement figures are the judge against the truth.
"""

from __future__ import annotations

import json
from pathlib import Path

from rag_loop.curation.queue_files import read_queue
from rag_loop.demo.generate import read_truth
from rag_loop.demo.intent_catalog import INTENTS
from rag_loop.demo.knowledge import DOCUMENTS
from rag_loop.store.files import write_atomically

DEMO_DIR = Path(__file__).resolve().parents[2] / "data" / "demo"
ROUNDS = {1: (0, 40), 2: (40, 70)}
LABELED_AT = {1: "2026-11-15T10:00:00+00:00", 2: "2026-11-16T10:00:00+00:00"}
# the curator's own verdict per generator outcome and metric (None: not graded); a demo choice
OWN_VERDICTS = {
    "Faithfulness": {"correct": True, "stale": True, "wrong": True, "fallback": True, "wrong_prompt": False},
    "Answer Relevancy": {"correct": True, "stale": True, "wrong_prompt": True, "wrong": False, "fallback": False},
}
UNDOCUMENTED = {"en": "This error code is not documented yet; escalate the case to payments support.",
                "vi": "Mã lỗi này chưa có trong tài liệu; hãy chuyển trường hợp cho bộ phận hỗ trợ thanh toán."}


def expected_answer(intent_name: str, language: str) -> tuple[str, list[str]]:
    """The newest documented answer to an intent, and its chunk id."""
    intent = next(i for i in INTENTS if i.name == intent_name)
    if intent.doc_id is None:
        return UNDOCUMENTED[language], []
    newest = max((d for d in DOCUMENTS if d.doc_id == intent.doc_id), key=lambda d: d.source_updated_at)
    index = 0 if language == "en" else 1
    return newest.facts[intent.fact][index], [newest.chunk_id(intent.fact, language)]


def judge_grades(row: dict, outcome: str | None) -> list[dict]:
    """The curator's grades of the judge's verdicts on a row: their own pass / fail where the
    truth says one (`OWN_VERDICTS`), and whether that agrees with the judge."""
    grades = []
    for metric, verdict in (row.get("judge_scores") or {}).items():
        own = OWN_VERDICTS.get(metric, {}).get(outcome or "")
        if own is None or not isinstance(verdict, dict) or verdict.get("passed") is None:
            continue
        grades.append({"metric": metric, "judge_version": verdict.get("judge_version") or "",
                       "judge_passed": verdict["passed"], "judge_score": verdict.get("score"),
                       "grade": "agree" if own == verdict["passed"] else "disagree", "curator_passed": own})
    return grades


def label_row(row: dict, intents: dict[str, str], labeled_at: str, outcomes: dict[str, str] | None = None) -> dict:
    intent = intents[row["trace_id"]]
    language = row.get("language") or "en"
    answer, sources = expected_answer(intent, language)
    failure_type = row["suggested_failure_type"]
    if failure_type == "none" and row["signals"]:
        failure_type = "generation"
    return {**row, "decision": "accept", "expected_output": answer, "expected_sources": sources,
            "tags": [intent.split("_")[0], language], "origin": row["suggested_origin"],
            "failure_type": failure_type, "curator": "demo-curator", "labeled_at": labeled_at,
            "judge_grades": judge_grades(row, (outcomes or {}).get(row["trace_id"]))}


def _one_per_intent(rows: list[dict], intents: dict[str, str]) -> list[dict]:
    """Queue rows in order, the first of each (intent, language): a curator spreads coverage."""
    seen, chosen = set(), []
    for row in rows:
        key = (intents.get(row["trace_id"]), row.get("language"))
        if key[0] is not None and key not in seen:
            seen.add(key)
            chosen.append(row)
    return chosen


def curate(queue_file: Path, labels_dir: Path, round_number: int,
           demo_dir: Path = DEMO_DIR) -> Path:
    """Write one round of labels once (a rerun keeps the file); returns the label file."""
    out = labels_dir / f"demo-curator-round-{round_number}.jsonl"
    if out.exists():
        return out
    truth = read_truth(demo_dir)
    intents = dict(zip(truth["trace_id"].to_pylist(), truth["intent"].to_pylist(), strict=True))
    outcomes = dict(zip(truth["trace_id"].to_pylist(), truth["outcome"].to_pylist(), strict=True))
    rows = _one_per_intent(read_queue(queue_file), intents)
    start, end = ROUNDS[round_number]
    labeled_at = LABELED_AT[round_number]
    labels = [label_row(r, intents, labeled_at, outcomes) for r in rows[start:end]]
    for row in labels[::9]:  # a curator rejects a few: not worth a regression test
        row.update(decision="reject", expected_output="", expected_sources=[], tags=[],
                   reject_reason="not worth a regression test")
    if round_number == 2:
        first = [label_row(r, intents, labeled_at, outcomes) for r in rows[:ROUNDS[1][1]]]
        accepted = [r for i, r in enumerate(first) if i % 9]
        for row in accepted[:2]:  # relabel: sharper expected output and tags
            row.update(expected_output=row["expected_output"] + " (see the HR portal)",
                       tags=[*row["tags"], "relabeled"])
        accepted[2].update(decision="reject", expected_output="", expected_sources=[], tags=[],
                           reject_reason="withdrawn: the question is out of scope")
        labels += accepted[:3]
    labels_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in labels))  # whole or not
    return out

