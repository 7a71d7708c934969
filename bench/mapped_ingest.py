"""Mapped ingestion (a team's own log shape through a mapping file) against the native reader on
the same content, in the same run.

    PYTHONPATH=bench python bench/mapped_ingest.py [--traces 1000000] [--repeat 3] [--workdir bench/out] [--reuse]

Writes N demo-shaped native traces (bench/ingest.py's `write_traces`) and the same traces in a
log shape of their own (other names, nesting, epoch milliseconds, chunks as `docs`) with the
mapping file that reads them back; times rag-loop's ingestion of each into a fresh DuckDB file
and prints both (wall and CPU seconds: the CPU of every thread of this process, steadier
than wall time on a loaded machine) and the ratio (goal <= 1.5, issue 47), with the load
average, for each of `--repeat` rounds (native first in odd rounds, mapped first in even ones).
The two ingestions store the same raw_traces, trace_chunks and trace_feedback rows, each trace
on the same line (checked; timestamps of ingestion aside). `--reuse` keeps the files of an
earlier run of the same size.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from datetime import datetime
from pathlib import Path

import duckdb
from ingest import write_traces

from rag_loop.ingest import ingest_directory

MAPPING = """
fields:
  trace_id: id
  timestamp: {path: at, format: epoch_ms}
  session_id: who.session
  conversation_id: who.session
  turn_id: who.turn
  request_id: request
  environment: {value: production}
  rag_version: versions.rag
  prompt_version: versions.prompt
  index_version: versions.index
  chunking_version: versions.chunking
  model_name: model.name
  provider: model.provider
  original_query: question
  answer: reply
  citations: cites
  temperature: model.temperature
  input_tokens: usage.in
  output_tokens: usage.out
  finish_reason: model.finish
  status: outcome
  is_fallback: fallback
  latency_ms: latency
  cost_usd: cost
  language: lang
  tenant: tenant
  query_type: kind
  risk_level: risk
  chunks:
    path: docs
    each: {doc_id: doc, chunk_id: chunk, doc_version: version, score: s, rank: {position: true},
           rerank_score: rs, rerank_rank: rr, selected: used}
  spans:
    path: steps
    each: {name: name, duration_ms: ms}
  feedback:
    path: feedback
    fields: {rating: rating, category: why}
"""


def own_shape(record: dict) -> dict:
    """A native trace in a log shape of its own: what MAPPING reads back."""
    at = datetime.fromisoformat(record["timestamp"].replace("Z", "+00:00"))
    shaped = {
        "id": record["trace_id"], "request": record.get("request_id"), "at": int(at.timestamp() * 1000),
        "who": {"session": record.get("session_id"), "turn": record.get("turn_id")},
        "versions": {"rag": record.get("rag_version"), "prompt": record.get("prompt_version"),
                     "index": record.get("index_version"), "chunking": record.get("chunking_version")},
        "model": {"name": record.get("model_name"), "provider": record.get("provider"),
                  "temperature": record.get("temperature"), "finish": record.get("finish_reason")},
        "question": record["original_query"], "reply": record.get("answer"), "cites": record.get("citations"),
        "usage": {"in": record.get("input_tokens"), "out": record.get("output_tokens")},
        "outcome": record.get("status"), "fallback": record.get("is_fallback"), "latency": record.get("latency_ms"),
        "cost": record.get("cost_usd"), "lang": record.get("language"), "tenant": record.get("tenant"),
        "kind": record.get("query_type"), "risk": record.get("risk_level"),
        "docs": [{"doc": c["doc_id"], "chunk": c.get("chunk_id"), "version": c.get("doc_version"),
                  "s": c.get("score"), "rs": c.get("rerank_score"), "rr": c.get("rerank_rank"),
                  "used": c.get("selected")} for c in record.get("chunks", [])],
        "steps": [{"name": s["name"], "ms": s.get("duration_ms")} for s in record.get("spans", [])],
    }
    if record.get("feedback"):
        shaped["feedback"] = {"rating": record["feedback"].get("rating"), "why": record["feedback"].get("category")}
    return shaped


def _ingest(folder: Path, database: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ingesting `folder` into a fresh database file."""
    database.unlink(missing_ok=True)
    with duckdb.connect(str(database)) as con:
        started, cpu = time.perf_counter(), time.process_time()
        ingest_directory(con, folder)
        return time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out/mapped"))
    parser.add_argument("--repeat", type=int, default=1, help="rounds, native and mapped in alternating order")
    parser.add_argument("--reuse", action="store_true", help="keep the files an earlier run of this size wrote")
    args = parser.parse_args()
    native, mapped = args.workdir / "native", args.workdir / "mapped"
    done = args.workdir / f"written-{args.traces}"
    if not (args.reuse and done.exists()):
        shutil.rmtree(args.workdir, ignore_errors=True)
        native.mkdir(parents=True), mapped.mkdir(parents=True)
        write_traces(native / "traces.jsonl", args.traces)
        with open(native / "traces.jsonl", encoding="utf-8") as source, \
                open(mapped / "log.jsonl", "w", encoding="utf-8") as target:
            for line in source:
                target.write(json.dumps(own_shape(json.loads(line))) + "\n")
        done.touch()
    (mapped / "rag-loop-mapping.yaml").write_text(MAPPING)
    print(f"{args.traces} traces; load average {os.getloadavg()[0]:.2f}")
    ratios, cpu_ratios = [], []
    for round_no in range(1, args.repeat + 1):  # alternate which goes first: the load drifts
        order = [("native", native), ("mapped", mapped)][:: 1 if round_no % 2 else -1]
        times = {name: _ingest(folder, args.workdir / f"{name}.duckdb") for name, folder in order}
        ratios.append(times["mapped"][0] / times["native"][0])
        cpu_ratios.append(times["mapped"][1] / times["native"][1])
        print(f"round {round_no}: native ingestion {times['native'][0]:.1f} s ({times['native'][1]:.1f} CPU-s), "
              f"mapped ingestion {times['mapped'][0]:.1f} s ({times['mapped'][1]:.1f} CPU-s), ratio {ratios[-1]:.2f} "
              f"(CPU {cpu_ratios[-1]:.2f}; goal <= 1.5); load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.repeat > 1:
        print(f"median ratio {statistics.median(ratios):.2f} (CPU {statistics.median(cpu_ratios):.2f}) "
              f"over {args.repeat} rounds")
    with duckdb.connect(str(args.workdir / "native.duckdb")) as con:
        con.execute(f"ATTACH '{args.workdir / 'mapped.duckdb'}' AS m (READ_ONLY)")
        for table, drop in (("raw_traces", "source_format, source_file, source_line, ingested_at"),
                            ("trace_chunks", ""), ("trace_feedback", "")):
            columns = f" EXCLUDE ({drop})" if drop else ""
            differ = con.execute(f"SELECT count(*) FROM (SELECT *{columns} FROM {table} EXCEPT ALL "
                                 f"SELECT *{columns} FROM m.{table})").fetchall()[0][0]
            print(f"{table}: {differ} rows of the native ingestion not in the mapped one")
        moved = con.execute("SELECT count(*) FROM raw_traces n JOIN m.raw_traces USING (trace_id) "
                            "WHERE n.source_line <> m.raw_traces.source_line").fetchall()[0][0]
        print(f"raw_traces: {moved} traces on another line than in the native ingestion")


if __name__ == "__main__":
    main()
