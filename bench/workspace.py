"""The curator workspace under a large queue: the queue page and a trace page with N queued rows
and M labels already written (goal: each < 300 ms), beside a bare DuckDB scan of the same
Parquet file in the same process.

    python bench/workspace.py [--rows 100000] [--labels 20000] [--repeat 20]

The workspace reads only the queue export (`<batch>.parquet`, `knowledge.parquet`) and the
label files, never the trace tables, so the number of stored traces does not enter its pages:
a deployment with 1,000,000 traces and a 100,000-row queue is this benchmark.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
from starlette.testclient import TestClient

from rag_loop.curation.queue_files import export_for_workspace
from rag_loop.store.files import write_parquet_atomically
from rag_loop.workspace.app import create_app
from rag_loop.workspace.store import Workspace

WORDS = "leave policy days carry over password rotation payment error contractor invoice".split()


def build(folder: Path, rows: int, labels: int, seed: int = 7) -> list[str]:
    """A queue export of `rows` rows (each with 5 retrieved chunks) and `labels` label lines."""
    rng = random.Random(seed)
    queue, details = [], {}
    for i in range(rows):
        trace_id = f"tr-{i:08d}"
        text = " ".join(rng.choice(WORDS) for _ in range(12))
        queue.append({"trace_id": trace_id, "batch": "bench", "priority": rng.choice(["P0", "P1", "P2", "P3"]),
                      "language": rng.choice(["en", "vi"]), "input": f"{text}?", "actual_output": text,
                      "cluster_id": f"en-{i % 3000:04d}", "cluster_label": rng.choice(WORDS), "cluster_size": 3,
                      "retrieval_context": [{"chunk_id": f"doc-{i % 500}@1#c0", "text": text}],
                      "signals": rng.sample(["thumbs_down", "low_rerank_score", "no_citation"], 1),
                      "suggested_failure_type": "retrieval", "suggested_origin": "production_failure",
                      "variant_trace_ids": [trace_id]})
        details[trace_id] = {"status": "ok", "retrieved": [
            {"chunk_id": f"doc-{(i + k) % 500}@1#c0", "doc_id": f"doc-{(i + k) % 500}", "doc_version": "1",
             "rank": k + 1, "score": 0.5, "selected": k < 2, "text": text} for k in range(5)]}
    export_for_workspace(queue, details, folder / "queue", "bench")
    write_parquet_atomically(pa.table({
        "chunk_id": [f"doc-{d}@1#c0" for d in range(500)], "doc_id": [f"doc-{d}" for d in range(500)],
        "version": ["1"] * 500, "title": [f"Document {d}" for d in range(500)], "language": ["en"] * 500,
        "text": [" ".join(rng.choice(WORDS) for _ in range(20)) for _ in range(500)],
        "source_updated_at": pa.array([0] * 500, pa.timestamp("us", tz="UTC")), "newest_version": ["1"] * 500}),
        folder / "queue" / "knowledge.parquet")
    (folder / "labels").mkdir(parents=True)
    with open(folder / "labels" / "ana-bench.jsonl", "w") as handle:
        for i in rng.sample(range(rows), labels):
            handle.write(json.dumps({"trace_id": f"tr-{i:08d}", "decision": rng.choice(["accept", "reject", "later"]),
                                     "curator": "ana", "labeled_at": "2026-11-20T10:00:00+00:00"}) + "\n")
    return [row["trace_id"] for row in queue]


def timed(call, repeat: int) -> float:
    """Median seconds of `repeat` calls (after one warm-up)."""
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--labels", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        start = time.perf_counter()
        ids = build(folder, args.rows, args.labels)
        print(f"queue export of {args.rows:,} rows and {args.labels:,} labels written in "
              f"{time.perf_counter() - start:.1f} s")
        client = TestClient(create_app(Workspace(folder)), base_url="http://127.0.0.1")  # a served host
        client.cookies.set("rl_curator", "ana")
        parquet = str(folder / "queue" / "bench.parquet")
        bare = timed(lambda: duckdb.sql(f"SELECT count(*) FROM read_parquet('{parquet}')").fetchall(), args.repeat)
        pages = {
            "queue page": lambda: client.get("/"),
            "queue page, filtered (P1, vi, signal)": lambda: client.get(
                "/", params={"priority": "P1", "language": "vi", "signal": "thumbs_down"}),
            "queue page 1,000": lambda: client.get("/", params={"page": 1000}),
            "trace page": lambda: client.get(f"/trace/{ids[len(ids) // 2]}"),
            "source search": lambda: client.get("/sources", params={"q": "leave policy"}),
        }
        print(f"bare scan of the Parquet file: {bare * 1000:.1f} ms")
        for label, call in pages.items():
            assert call().status_code == 200, label
            seconds = timed(call, args.repeat)
            verdict = "ok" if seconds < 0.3 else "OVER the 300 ms goal"
            print(f"{label}: {seconds * 1000:.1f} ms median ({seconds / bare:.1f}x the bare scan) {verdict}")


if __name__ == "__main__":
    main()
