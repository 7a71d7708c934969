"""Offline-judge throughput on the demo's newest golden release.

    python bench/eval.py [--goldens .demo/goldens] [--repeat 3]

Times, in one process: the system under test alone (the demo rag_app answering every golden:
the bare baseline), then a full regression eval with the offline judge (six metrics per
case, embedding cache warm after the first repeat). Prints cases per second and the ratio.
Needs a release: run `make demo` first (the demo's releases are in its home, `.demo/`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

from rag_loop.evaluation.judges.offline import OfflineJudge
from rag_loop.evaluation.regression import EvalSettings, run_regression
from rag_loop.evaluation.runner import build_cases, load_app, release_of

DEMO_APP = "rag_loop.demo.rag_app:answer_for_eval"  # the demo's system under test
DEMO_GOLDENS = Path(__file__).resolve().parents[1] / ".demo" / "goldens"  # the demo's home (Makefile DEMO_HOME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goldens", type=Path, default=DEMO_GOLDENS)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    settings = EvalSettings(rag_app=DEMO_APP, rag_config={"config": "baseline"}, max_error_rate=1.0)
    release, goldens, _ = release_of(args.goldens, "latest")
    app = load_app(settings.rag_app)
    build_cases(goldens[:1], "live", app, settings.rag_config, None)  # warm the app's index

    start = time.perf_counter()
    for _ in range(args.repeat):
        build_cases(goldens, "live", app, settings.rag_config, None)
    bare = (time.perf_counter() - start) / args.repeat

    judge = OfflineJudge()
    judge.evidence.vectors(["warm up the embedding model"])
    timings = []
    with tempfile.TemporaryDirectory() as scratch, duckdb.connect(f"{scratch}/eval.duckdb") as con:
        for _ in range(args.repeat):
            start = time.perf_counter()
            report = run_regression(con, args.goldens, judge, settings)
            timings.append(time.perf_counter() - start)
    cases = report.cases
    metrics = report.table["metric"].nunique()
    print(f"release {release}: {cases} goldens x {metrics} metrics, offline judge")
    print(f"rag_app alone: {bare:.3f} s ({cases / bare:.0f} cases/s)")
    print(f"regression eval: first {timings[0]:.2f} s ({cases / timings[0]:.0f} cases/s, cold "
          f"embedding cache), then {min(timings[1:] or timings):.2f} s "
          f"({cases / min(timings[1:] or timings):.0f} cases/s); "
          f"ratio to the app alone {min(timings) / bare:.1f}")


if __name__ == "__main__":
    main()
