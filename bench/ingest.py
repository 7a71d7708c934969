"""Ingestion speed against a bare DuckDB `read_json` of the same file, in the same run.

    python bench/ingest.py [--traces 1000000] [--workdir bench/out]

Writes N demo-shaped native traces to one JSONL file, then times (1) the bare scan:
`CREATE TABLE AS SELECT * FROM read_json(file)` into a fresh DuckDB file, and (2) rag-loop's
ingestion of the same file into another fresh DuckDB file (validation, quarantine, dedup,
split into traces / chunks / spans / feedback; a clean file takes the `read_json` reader).
Prints both, the ratio (target <= 1.5) and the peak resident memory of the ingestion
process (target < 4 GB); each phase runs in its own process. `--malformed-line` also times a
copy whose last line is cut off, which the fallback readers take.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import resource
import shutil
import time
from pathlib import Path

import duckdb

from rag_loop.ingest import ingest_directory
from rag_loop.ingest.pipeline import DEFAULT_BATCH_BYTES, DEFAULT_MEMORY_LIMIT


def write_traces(path: Path, count: int, seed: int = 1) -> None:
    """Traces shaped like the demo's: 5 chunks, 4 spans, feedback on some."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            chunks = [{"doc_id": f"doc-{rng.randrange(40)}", "chunk_id": f"c-{rng.randrange(400)}",
                       "doc_version": "2026", "score": round(rng.random(), 4), "rank": r + 1,
                       "rerank_score": round(rng.random(), 4), "rerank_rank": r + 1,
                       "selected": r < 2} for r in range(5)]
            record = {
                "trace_id": f"tr-{i:012d}", "request_id": f"req-{i}", "session_id": f"s-{i // 2}",
                "conversation_id": f"s-{i // 2}", "turn_id": i % 2 + 1,
                "timestamp": f"2026-11-{1 + i % 14:02d}T{i % 24:02d}:00:00.000Z",
                "environment": "production", "rag_version": "rag-v12", "prompt_version": "qa-v3",
                "model_name": "extractive-v1", "provider": "in-house", "index_version": "kb-2026-10-01",
                "chunking_version": "chunk-v1", "original_query": "How many days of annual leave do I get?",
                "chunks": chunks, "answer": "Full-time employees get 15 days of paid annual leave. [c-1]",
                "citations": ["c-1"], "temperature": 0.0, "input_tokens": 220, "output_tokens": 30,
                "finish_reason": "stop", "status": "ok", "is_fallback": False,
                "latency_ms": 1234.5, "cost_usd": 0.00005,
                "spans": [{"name": n, "kind": n, "start_time": "2026-11-01T00:00:00.000Z",
                           "duration_ms": round(rng.uniform(5, 900), 2), "status": "ok"}
                          for n in ("query_rewrite", "retrieval", "rerank", "generation")],
                "feedback": {"rating": "negative", "category": "incorrect"} if i % 20 == 0 else None,
                "language": "vi" if i % 5 < 2 else "en", "tenant": "acme", "query_type": "policy",
                "risk_level": "medium"}
            handle.write(json.dumps(record) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out"))
    parser.add_argument("--batch-mb", type=int, default=DEFAULT_BATCH_BYTES >> 20,
                        help="ingestion batch size in MB")
    parser.add_argument("--memory-limit", default=DEFAULT_MEMORY_LIMIT,
                        help="DuckDB memory_limit during the ingestion")
    parser.add_argument("--malformed-line", action="store_true",
                        help="also ingest a copy with one malformed last line (the fallback readers)")
    args = parser.parse_args()
    traces_dir = args.workdir / f"traces-{args.traces}"  # one file: nothing else to ingest
    traces_dir.mkdir(parents=True, exist_ok=True)
    source = traces_dir / f"bench-{args.traces}.jsonl"
    if not source.exists():
        write_traces(source, args.traces)
    print(f"file: {source} ({source.stat().st_size / 1e6:.0f} MB, {args.traces:,} traces)")

    ingest, total, ingest_peak = _in_process(_ingest, args.workdir, traces_dir, args.batch_mb,
                                             args.memory_limit)
    (bare,) = _in_process(_bare, args.workdir, source)
    print(f"bare read_json : {bare:7.2f} s  ({args.traces / bare:,.0f} traces/s)")
    print(f"rag-loop ingest: {ingest:7.2f} s  ({args.traces / ingest:,.0f} traces/s), {total} "
          f"(batches of {args.batch_mb} MB, DuckDB memory_limit {args.memory_limit})")
    print(f"ratio ingest/bare: {ingest / bare:.2f}  (target <= 1.5)")
    print(f"peak RSS of the ingestion process: {ingest_peak:.2f} GB  (target < 4)")
    if args.malformed_line:
        malformed_dir = args.workdir / f"malformed-{args.traces}"
        malformed_dir.mkdir(exist_ok=True)
        malformed = malformed_dir / source.name
        if not malformed.exists():
            shutil.copyfile(source, malformed)
            with open(malformed, "a", encoding="utf-8") as handle:
                handle.write('{"trace_id": "cut-off", "original_query": "how m\n')
        seconds, total, peak = _in_process(_ingest, args.workdir, malformed_dir, args.batch_mb,
                                           args.memory_limit)
        print(f"with one malformed last line: {seconds:7.2f} s, ratio {seconds / bare:.2f}, "
              f"peak RSS {peak:.2f} GB, {total}")


def _fresh_database(path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to a new, empty DuckDB file at `path`."""
    for stale in (path, Path(f"{path}.wal")):
        stale.unlink(missing_ok=True)
    return duckdb.connect(str(path))


def _in_process(phase, *args) -> tuple:
    """Run one phase in its own forked process (its own peak RSS); return what it reports."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    process = context.Process(target=lambda: results.put(phase(*args)))
    process.start()
    figures = results.get()
    process.join()
    return figures


def _ingest(workdir: Path, traces_dir: Path, batch_mb: int, memory_limit: str) -> tuple:
    start = time.perf_counter()
    with _fresh_database(workdir / "ingest.duckdb") as con:
        report = ingest_directory(con, traces_dir, batch_bytes=batch_mb << 20, memory_limit=memory_limit)
    readers = ", ".join(sorted({f.reader for f in report.files}))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return time.perf_counter() - start, f"{report.total()} by {readers}", peak


def _bare(workdir: Path, source: Path) -> tuple:
    start = time.perf_counter()
    with _fresh_database(workdir / "bare.duckdb") as con:
        con.execute(f"CREATE TABLE bare AS SELECT * FROM read_json('{source}')")
    return (time.perf_counter() - start,)


if __name__ == "__main__":
    main()
