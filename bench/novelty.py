"""Novelty per day: its cost against the window's length, and what it finds, beside the old rule.

    python bench/novelty.py [--data ../shared/data] [--days 36] [--daily 2000] [--workdir bench/out]

Traffic: the real queries of banking77 and hwu64 (embedded once with the bundled
all-MiniLM-L6-v2 through the embedding cache in `--workdir`), 2,000 a day drawn from a skewed
(Zipf) mix of their intents; six intents are held back and start on a later day each (the new
intents to find). For every judged day, with windows of 7 and 28 days, it times
`rag_loop.selection.novelty.new_intent_members` (the day clustered alone, placed against the
window) and, as the baseline in the same process, the rule it replaced (the day clustered
together with the whole window, a cluster new when ≥ 80 % of it is the day's), and prints per
window: seconds per day (mean, max), the share of a new intent's first-day queries flagged
(recall), and the flagged queries of intents the window already had (false alarms).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from rag_loop.selection.novelty import NoveltySettings, new_intent_members
from rag_loop.vectors.cache import embed_cached
from rag_loop.vectors.clustering import NOISE, cluster_vectors
from rag_loop.vectors.embedding import load_embedder

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--days", type=int, default=36)
    parser.add_argument("--daily", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--skip-baseline", action="store_true", help="time only the rule in use")
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
    rules = {"day alone, placed against the window": new_intent_members}
    if not args.skip_baseline:
        rules["day and window clustered together (before)"] = lambda h, t, s: (window_clustering(h, t, s), None)
    print(f"{len(data):,} queries, {len(set(intents))} intents, {args.days} days x {args.daily:,} queries; "
          f"new intents start on days {sorted(held.values())}")
    for window in (7, 28):
        for name, rule in rules.items():
            seconds, found, first_day, alarms = [], 0, 0, 0
            for day in range(max(settings.min_history_days, 1), args.days):
                past = [i for d in range(max(0, day - window), day) for i in samples[d]]
                start = time.perf_counter()
                novel, _ = rule(vectors[past], vectors[samples[day]], settings)
                seconds.append(time.perf_counter() - start)
                asked = intents[samples[day]]
                known = set(intents[past])
                is_new = np.array([held.get(a) == day for a in asked])
                found += int((novel & is_new).sum())
                first_day += int(is_new.sum())
                alarms += int(sum(n and a in known for n, a in zip(novel, asked)))
            print(f"window {window:>2} days, {name}: {np.mean(seconds):.2f} s a day (max {max(seconds):.2f}); "
                  f"new intents' first-day queries flagged {found}/{first_day}; queries of known intents "
                  f"flagged {alarms}")


if __name__ == "__main__":
    main()
