"""The offline judge against humans: `rag-loop calibrate` on each dev file, beside bare token
overlap (the share of answer words found in the context) on the same rows.

    python bench/judge.py [--file F ...] [--threshold T]

Default files: BEGIN CMU-DoG and Topical-Chat dev (../shared/data). Per file: ROC-AUC of both,
the judge's confusion matrix, kappa, the best threshold and its speed, then what the
Faithfulness score is made of (ROC-AUC of the rules' support alone, of the claims' bare word
overlap alone, and of the grade that blends them at OVERLAP_SHARE), and, with two or more
files, the blend weight each file would choose and what it gives on the others (leave one set
out). Target: ROC-AUC at least 0.01 above token overlap's on every human-labelled set, also
unseen ones; >= 300 cases/s.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")

import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from rag_loop.evaluation.calibration import (  # noqa: E402
    CalibrationRow,
    read_rows,
    run_calibration,
    summary_lines,
    token_overlap,
)
from rag_loop.evaluation.judges.evidence import statements  # noqa: E402
from rag_loop.evaluation.judges.offline import OfflineJudge  # noqa: E402
from rag_loop.evaluation.judges.support import OVERLAP_SHARE, Context, faithfulness  # noqa: E402
from rag_loop.evaluation.settings import DEFAULT_THRESHOLDS  # noqa: E402

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
DEV = [DATA / "begin_cmu_dog_dev.jsonl", DATA / "begin_topicalchat_dev.jsonl"]
GRID = np.round(np.arange(0.0, 1.0001, 0.05), 2)


def scores(rows: list[CalibrationRow], overlap_share: float) -> list[float]:
    """The offline Faithfulness score of each row with another blend weight."""
    out = []
    for row in rows:
        judged = faithfulness(statements(row.answer), Context(row.contexts), row.question, overlap_share)
        out.append(sum(g for _, g in judged) / len(judged) if judged else 0.0)
    return out


def blend_curve(rows: list[CalibrationRow]) -> list[float]:
    """ROC-AUC at each blend weight of GRID."""
    labels = [r.faithful for r in rows]
    return [float(roc_auc_score(labels, scores(rows, share))) for share in GRID]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=Path, nargs="+", default=DEV)
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLDS["Faithfulness"])
    args = parser.parse_args()
    curves = {}
    for path in args.file:
        rows, _ = read_rows(path)
        labels = [r.faithful for r in rows]
        overlap = roc_auc_score(labels, [token_overlap(r.answer, r.contexts) for r in rows])
        result, _ = run_calibration(None, path, OfflineJudge(), args.threshold)
        print(f"{path.name}: {len(rows)} rows")
        print(f"token overlap ROC-AUC: {overlap:.3f}")
        print("offline judge (Faithfulness):")
        for line in summary_lines(result):
            print("  " + line)
        if result.roc_auc is None:
            continue
        print(f"judge minus overlap: {result.roc_auc - overlap:+.3f}")
        curves[path.name] = blend_curve(rows)
        curve = dict(zip(GRID.tolist(), curves[path.name]))
        print(f"made of: rules' support alone {curve[0.0]:.4f}, claims' bare word overlap alone "
              f"{curve[1.0]:.4f}, both at OVERLAP_SHARE {OVERLAP_SHARE} {curve[OVERLAP_SHARE]:.4f}")
    for name, curve in curves.items() if len(curves) > 1 else ():
        chosen = int(np.argmax(curve))
        others = ", ".join(f"{other} {c[chosen]:.4f} (rules alone {c[0]:.4f})"
                           for other, c in curves.items() if other != name)
        print(f"OVERLAP_SHARE chosen on {name}: {GRID[chosen]:g} ({curve[chosen]:.4f}); on {others}")


if __name__ == "__main__":
    main()
