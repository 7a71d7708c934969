"""Ingestion speed against a bare DuckDB `read_json` of the same file, in the same run.

    python bench/ingest.py [--traces 1000000] [--workdir bench/out]

Writes N demo-shaped native traces to one JSONL file, then times (1) the bare scan:
`CREATE TABLE AS SELECT * FROM read_json(file)` into a fresh DuckDB file, and (2) rag-loop's
ingestion of the same file into another fresh DuckDB file (validation, quarantine, dedup,
split into traces / chunks / spans / feedback; a clean file takes the `read_json` reader).
Prints both, the ratio (target <= 1.5) and the peak resident memory of the ingestion
process (target < 4 GB); each phase runs in its own forked process. `--repeat N` times N rounds
of both (bare first in odd rounds, ingestion first in even ones), each round's ratio with the
load average at its start (the machine may be shared: compare ratios, not times), then the
median and best ratio. Each round also prints both phases' CPU seconds (the ingestion's workers
included) and their ratio, which the other sessions on a shared machine move less than wall time.
`--malformed-line` also times a copy whose last line is cut off, which the fallback readers take.
`--statements N` then ingests the file once more and lists the N statements that took the most CPU
(DuckDB's threads included), with their wall time: where the ingestion's time goes.

`--otlp [--spans 1000000]` does the same for a Collector-style OTLP JSON file: export batches
of 512 spans per line, each trace's root span a few traces later than its children (as a
BatchSpanProcessor exports them), so traces are split across lines. Target ratio <= 2 (issue 42).
`--increment N` then adds a file of N spans of new traces and times the next run over the
stored ones (a run's cost as the stored spans grow).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import shutil
import statistics
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


def _attr(key: str, value) -> dict:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    if isinstance(value, float):
        return {"key": key, "value": {"doubleValue": value}}
    return {"key": key, "value": {"stringValue": value}}


def _otlp_trace(i: int, rng: random.Random) -> list[dict]:
    """One OpenInference request: root CHAIN, RETRIEVER (5 documents), RERANKER, LLM."""
    trace_id = f"{i:032x}"
    start = 1_793_500_000_000_000_000 + i * 1_000_000_000
    query = "How many days of annual leave do I get?"

    def span(n: int, name: str, kind: str, attrs: dict, offset_ms: int, duration_ms: int) -> dict:
        return {"traceId": trace_id, "spanId": f"{i:012x}{n:04x}",
                "parentSpanId": "" if n == 0 else f"{i:012x}{0:04x}", "name": name, "kind": 1,
                "startTimeUnixNano": str(start + offset_ms * 1_000_000),
                "endTimeUnixNano": str(start + (offset_ms + duration_ms) * 1_000_000),
                "attributes": [_attr("openinference.span.kind", kind)]
                + [_attr(k, v) for k, v in attrs.items()], "status": {"code": 0}}

    documents = {}
    for r in range(5):
        prefix = f"retrieval.documents.{r}.document"
        documents.update({f"{prefix}.id": f"node-{rng.randrange(10**9)}",
                          f"{prefix}.score": round(rng.random(), 4),
                          f"{prefix}.content": "Full-time employees get 15 days of paid leave.",
                          f"{prefix}.metadata": json.dumps({"doc_id": f"doc-{rng.randrange(40)}",
                                                            "doc_version": "2026"})})
    reranked = {k.replace("retrieval.documents", "reranker.output_documents"): v
                for k, v in documents.items() if k.split(".")[2] in ("0", "1")}
    children = [
        span(1, "retrieve", "RETRIEVER", {"input.value": query, **documents}, 10, 90),
        span(2, "rerank", "RERANKER", reranked, 100, 40),
        span(3, "llm", "LLM", {"llm.model_name": "gpt-4o-mini", "llm.token_count.prompt": 220,
                               "llm.token_count.completion": 30,
                               "llm.output_messages.0.message.role": "assistant",
                               "llm.output_messages.0.message.content": "15 days."}, 150, 700)]
    root = span(0, "chat", "CHAIN", {"input.value": json.dumps({"message": query}),
                                     "output.value": "15 days.", "session.id": f"s-{i // 2}"},
                0, 900)
    return children + [root]


def write_otlp(path: Path, spans: int, per_line: int = 512, root_delay: int = 7, seed: int = 1,
               first: int = 0) -> None:
    """About `spans` spans as Collector file-exporter lines of `per_line` spans, of the traces
    numbered from `first`."""
    rng = random.Random(seed)
    roots: list[dict] = []
    batch: list[dict] = []
    with open(path, "w", encoding="utf-8") as handle:
        def emit(span: dict) -> None:
            batch.append(span)
            if len(batch) == per_line:
                _write_export(handle, batch)
                batch.clear()
        for i in range(first, first + spans // 4):
            *children, root = _otlp_trace(i, rng)
            for span in children:
                emit(span)
            roots.append(root)
            if len(roots) > root_delay:
                emit(roots.pop(0))
        for root in roots:
            emit(root)
        if batch:
            _write_export(handle, batch)


def _write_export(handle, spans: list[dict]) -> None:
    resource = {"attributes": [_attr("service.name", "rag-app"),
                               _attr("deployment.environment.name", "production")]}
    handle.write(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
        {"scope": {"name": "openinference.instrumentation.llama_index"}, "spans": spans}]}]}) + "\n")


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
    parser.add_argument("--otlp", action="store_true", help="an OTLP file of --spans spans instead")
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of bare scan and ingestion (each round's ratio and load)")
    parser.add_argument("--statements", type=int, default=0,
                        help="then list the N statements of one ingestion that took the most CPU")
    parser.add_argument("--increment", type=int, default=0,
                        help="with --otlp: then a file of this many new spans, ingested over the first")
    args = parser.parse_args()
    if args.otlp:
        return _main_otlp(args)
    traces_dir = args.workdir / f"traces-{args.traces}"  # one file: nothing else to ingest
    traces_dir.mkdir(parents=True, exist_ok=True)
    source = traces_dir / f"bench-{args.traces}.jsonl"
    if not source.exists():
        write_traces(source, args.traces)
    print(f"file: {source} ({source.stat().st_size / 1e6:.0f} MB, {args.traces:,} traces)")

    ingest, bare, total, ingest_peak = _rounds(args, traces_dir, source)
    print(f"bare read_json : {bare:7.2f} s  ({args.traces / bare:,.0f} traces/s)")
    print(f"rag-loop ingest: {ingest:7.2f} s  ({args.traces / ingest:,.0f} traces/s), {total} "
          f"(batches of {args.batch_mb} MB, DuckDB memory_limit {args.memory_limit})")
    print(f"ratio ingest/bare: {ingest / bare:.2f}  (target <= 1.5)")
    print(f"peak RSS of the ingestion process: {ingest_peak:.2f} GB  (target < 4)")
    if args.statements:
        _print_statements(args, traces_dir)
    if args.malformed_line:
        malformed_dir = args.workdir / f"malformed-{args.traces}"
        malformed_dir.mkdir(exist_ok=True)
        malformed = malformed_dir / source.name
        if not malformed.exists():
            shutil.copyfile(source, malformed)
            with open(malformed, "a", encoding="utf-8") as handle:
                handle.write('{"trace_id": "cut-off", "original_query": "how m\n')
        seconds, total, peak, _ = _in_process(_ingest, args.workdir, malformed_dir, args.batch_mb,
                                           args.memory_limit)
        print(f"with one malformed last line: {seconds:7.2f} s, ratio {seconds / bare:.2f}, "
              f"peak RSS {peak:.2f} GB, {total}")


class _TimedConnection:
    """A DuckDB connection that records each statement's wall and CPU seconds (this process's
    CPU, so DuckDB's threads count; the workers are not in it)."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self._con = con
        self.statements: list[tuple[float, float, str]] = []  # CPU s, wall s, SQL

    def _timed(self, method: str, sql: str, *args, **kwargs):
        start, cpu = time.perf_counter(), _own_cpu_seconds()
        result = getattr(self._con, method)(sql, *args, **kwargs)
        self.statements.append((_own_cpu_seconds() - cpu, time.perf_counter() - start, " ".join(sql.split())))
        return self if result is self._con else result

    def execute(self, sql: str, *args, **kwargs):
        return self._timed("execute", sql, *args, **kwargs)

    def executemany(self, sql: str, *args, **kwargs):
        return self._timed("executemany", sql, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._con, name)


def _own_cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _statements(workdir: Path, traces_dir: Path, batch_mb: int, memory_limit: str, top: int) -> tuple:
    start, cpu = time.perf_counter(), _cpu_seconds()
    with _fresh_database(workdir / "ingest.duckdb") as con:
        timed = _TimedConnection(con)
        ingest_directory(timed, traces_dir, batch_bytes=batch_mb << 20, memory_limit=memory_limit)
    ranked = sorted(timed.statements, reverse=True)
    return time.perf_counter() - start, _cpu_seconds() - cpu, sum(s[0] for s in ranked), ranked[:top]


def _print_statements(args: argparse.Namespace, traces_dir: Path) -> None:
    wall, cpu, in_statements, ranked = _in_process(_statements, args.workdir, traces_dir, args.batch_mb,
                                                   args.memory_limit, args.statements)
    print(f"one more ingestion: {wall:.2f} s, {cpu:.1f} CPU-s ({in_statements:.1f} in statements); "
          f"load {os.getloadavg()[0]:.2f}. Top statements by CPU:")
    for statement_cpu, statement_wall, sql in ranked:
        print(f"  {statement_cpu:6.2f} CPU-s {statement_wall:6.2f} s  {sql[:110]}")


def _main_otlp(args: argparse.Namespace) -> None:
    traces_dir = args.workdir / f"otlp-{args.spans}"
    traces_dir.mkdir(parents=True, exist_ok=True)
    source = traces_dir / f"spans-{args.spans}.otlp.jsonl"
    if not source.exists():
        write_otlp(source, args.spans)
    print(f"file: {source} ({source.stat().st_size / 1e6:.0f} MB, {args.spans:,} spans, "
          f"{args.spans // 4:,} traces, 512 spans per line)")
    ingest, bare, total, ingest_peak = _rounds(args, traces_dir, source)
    print(f"bare read_json : {bare:7.2f} s  ({args.spans / bare:,.0f} spans/s)")
    print(f"rag-loop ingest: {ingest:7.2f} s  ({args.spans / ingest:,.0f} spans/s), {total}")
    print(f"ratio ingest/bare: {ingest / bare:.2f}  (target <= 2)")
    print(f"peak RSS of the ingestion process plus its largest worker: {ingest_peak:.2f} GB  "
          "(target < 4)")
    if args.increment:
        new = traces_dir / f"new-{args.increment}.otlp.jsonl"
        write_otlp(new, args.increment, first=args.spans)
        try:
            seconds, total, peak = _in_process(_ingest_more, args.workdir, traces_dir, args.memory_limit)
        finally:
            new.unlink()
        print(f"a file of {args.increment:,} new spans over the {args.spans:,} stored: {seconds:.2f} s, "
              f"{total}, peak {peak:.2f} GB")


def _rounds(args: argparse.Namespace, traces_dir: Path, source: Path) -> tuple:
    """`args.repeat` rounds of ingestion and bare scan; prints each round's ratio and the load
    average (1, 5, 15 min) at its start, then the median and best; returns the last round's
    times, the ingestion's report and its largest peak RSS."""
    ratios, peaks = [], []
    for round_no in range(1, args.repeat + 1):
        load = os.getloadavg()
        phases = [("ingest", lambda: _in_process(_ingest, args.workdir, traces_dir, args.batch_mb,
                                                  args.memory_limit)),
                  ("bare", lambda: _in_process(_bare, args.workdir, source))]
        if round_no % 2:
            phases.reverse()  # bare first in odd rounds
        done = {name: run() for name, run in phases}
        ingest, total, peak, ingest_cpu = done["ingest"]
        bare, bare_cpu = done["bare"]
        ratios.append(ingest / bare)
        peaks.append(peak)
        print(f"round {round_no}: load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, bare {bare:.2f} s "
              f"({bare_cpu:.1f} CPU-s), ingest {ingest:.2f} s ({ingest_cpu:.1f} CPU-s), ratio {ingest / bare:.2f}, "
              f"CPU ratio {ingest_cpu / bare_cpu:.2f}", flush=True)
    if args.repeat > 1:
        print(f"ratio over {args.repeat} rounds: median {statistics.median(ratios):.2f}, "
              f"best {min(ratios):.2f}, worst {max(ratios):.2f}; load at the end {os.getloadavg()[0]:.2f}")
    return ingest, bare, total, max(peaks)


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


def _cpu_seconds() -> float:
    """CPU time of this process (all its threads) and of its reaped children (the workers): on
    a shared machine steadier than wall time, which counts the other sessions' share too."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _ingest(workdir: Path, traces_dir: Path, batch_mb: int, memory_limit: str) -> tuple:
    start, cpu = time.perf_counter(), _cpu_seconds()
    with _fresh_database(workdir / "ingest.duckdb") as con:
        report = ingest_directory(con, traces_dir, batch_bytes=batch_mb << 20, memory_limit=memory_limit)
    readers = ", ".join(sorted({f.reader for f in report.files}))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # the largest worker's
    return (time.perf_counter() - start, f"{report.total()} by {readers}", peak + worker,
            _cpu_seconds() - cpu)


def _ingest_more(workdir: Path, traces_dir: Path, memory_limit: str) -> tuple:
    """The next run on the database `_ingest` left: only the new file is read."""
    start = time.perf_counter()
    with duckdb.connect(str(workdir / "ingest.duckdb")) as con:
        report = ingest_directory(con, traces_dir, memory_limit=memory_limit)
    return time.perf_counter() - start, str(report.total()), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _bare(workdir: Path, source: Path) -> tuple:
    start, cpu = time.perf_counter(), _cpu_seconds()
    with _fresh_database(workdir / "bare.duckdb") as con:
        con.execute(f"CREATE TABLE bare AS SELECT * FROM read_json('{source}', "
                    "maximum_object_size = 268435456)")
    return time.perf_counter() - start, _cpu_seconds() - cpu


if __name__ == "__main__":
    main()
