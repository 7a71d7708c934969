"""The offline judge against humans: `rag-loop calibrate` on the dev file, beside bare token
overlap (the share of answer words found in the context) on the same rows.

    python bench/judge.py [--file ../shared/data/begin_cmu_dog_dev.jsonl] [--threshold T]

Prints ROC-AUC of both, the judge's confusion matrix, kappa, the best threshold and its speed
(target: ROC-AUC at least 0.01 above token overlap's on every human-labelled set, such as
begin_cmu_dog_dev.jsonl and begin_topicalchat_dev.jsonl; >= 300 cases/s).
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")

from sklearn.metrics import roc_auc_score  # noqa: E402

from rag_loop.evaluation.calibration import read_rows, run_calibration, summary_lines  # noqa: E402
from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.evaluation.settings import DEFAULT_THRESHOLDS  # noqa: E402

DEV = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "begin_cmu_dog_dev.jsonl"
_WORD = re.compile(r"\w+")


def token_overlap(answer: str, contexts: list[str]) -> float:
    words = _WORD.findall(answer.lower())
    context = set(_WORD.findall(" ".join(contexts).lower()))
    return sum(w in context for w in words) / len(words) if words else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, default=DEV)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLDS["Faithfulness"])
    args = parser.parse_args()
    rows, _ = read_rows(args.file)
    overlap = roc_auc_score([r.faithful for r in rows], [token_overlap(r.answer, r.contexts) for r in rows])
    result, _ = run_calibration(None, args.file, OfflineJudge(), args.threshold)
    print(f"{args.file.name}: {len(rows)} rows")
    print(f"token overlap ROC-AUC: {overlap:.3f}")
    print("offline judge (Faithfulness):")
    for line in summary_lines(result):
        print("  " + line)
    if result.roc_auc is not None:
        print(f"judge minus overlap: {result.roc_auc - overlap:+.3f}")


if __name__ == "__main__":
    main()
