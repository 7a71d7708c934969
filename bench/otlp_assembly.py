"""What one OTLP assembly costs as the stored spans grow: `assemble_ready` looking only at the
pending trace ids (`otlp_pending`, the new spans' traces), against the same call with every
stored trace id pending, which is what assembly did before the table (a count of every stored
span per trace id, each run).

    python bench/otlp_assembly.py [--spans 10000000,40000000] [--new 5000] [--workdir bench/out]

Per size, a database of that many stored spans (4 per trace, all assembled) and `--new`
traces whose spans just arrived (not yet assembled), built with SQL; then, each on its own
copy of it and in a process of its own, the two assemblies, timed, with the process's peak
resident memory (DuckDB limited to 1GB, as ingestion runs it). Both assemble the same new
traces (checked).
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import shutil
import time
from pathlib import Path

import duckdb

from rag_loop.ingest.otlp.assembly import assemble_ready
from rag_loop.store.tables import create_tables

NOW_NS = 1_893_456_000_000_000_000  # 2030: every trace is past its grace period


def build(path: Path, spans: int, new: int) -> None:
    """`spans` stored spans of traces assembled before, and the spans of `new` more traces."""
    with duckdb.connect(str(path)) as con:
        create_tables(con)
        con.execute(f"""
            INSERT INTO otlp_spans BY NAME
            SELECT printf('%032x', i // 4) AS trace_id, printf('%016x', i) AS span_id,
                   CASE WHEN i % 4 = 0 THEN '' ELSE printf('%016x', i - i % 4) END AS parent_span_id,
                   'span' AS name, 1_793_500_000_000_000_000 + i * 250_000_000 AS start_ns,
                   1_793_500_000_000_000_000 + i * 250_000_000 + 100_000_000 AS end_ns,
                   'x.jsonl' AS source_file, i // 512 + 1 AS source_line, now() AS received_at
            FROM range({spans + 4 * new}) r(i)""")
        con.execute(f"""
            INSERT INTO otlp_traces (trace_id, state, complete, spans, assembled_at)
            SELECT printf('%032x', t), 'duplicate', true, 4, now() FROM range({spans // 4}) r(t)""")
        con.execute("DELETE FROM otlp_pending")
        con.execute(f"""INSERT INTO otlp_pending (trace_id)
                        SELECT printf('%032x', t) FROM range({spans // 4}, {spans // 4 + new}) r(t)""")
        con.execute("CHECKPOINT")


def assemble(path: Path, every_trace_pending: bool) -> tuple[float, float, int]:
    with duckdb.connect(str(path)) as con:
        con.execute("SET memory_limit = '1GB'")
        if every_trace_pending:
            con.execute("INSERT INTO otlp_pending (trace_id) SELECT trace_id FROM otlp_traces")
        con.execute("BEGIN")
        start = time.perf_counter()
        counts = assemble_ready(con, NOW_NS)
        seconds = time.perf_counter() - start
        con.execute("ROLLBACK")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    return seconds, peak, counts.ingested + counts.quarantined + counts.duplicates + counts.not_a_request


def in_process(path: Path, every_trace_pending: bool) -> tuple[float, float, int]:
    """`assemble` in a forked process of its own (its own peak resident memory)."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    process = context.Process(target=lambda: results.put(assemble(path, every_trace_pending)))
    process.start()
    figures = results.get()
    process.join()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", default="10000000,40000000")
    parser.add_argument("--new", type=int, default=5000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    for spans in (int(s) for s in args.spans.split(",")):
        base = args.workdir / f"otlp-assembly-{spans}.duckdb"
        base.unlink(missing_ok=True)
        build(base, spans, args.new)
        figures = {}
        for every in (True, False):
            copy = args.workdir / "otlp-assembly-run.duckdb"
            shutil.copy(base, copy)
            figures[every] = in_process(copy, every)
            copy.unlink()
        (old, old_mb, old_n), (new, new_mb, new_n) = figures[True], figures[False]
        assert old_n == new_n == args.new, (old_n, new_n)
        print(f"{spans:>11,} stored spans, {args.new:,} new traces: pending only {new:6.2f} s "
              f"(peak {new_mb:5.0f} MB), every trace id {old:6.2f} s ({old_mb:5.0f} MB), "
              f"ratio {old / new:5.1f}")
        base.unlink()


if __name__ == "__main__":
    main()
