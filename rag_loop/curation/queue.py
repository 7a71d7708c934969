"""`curation_queue`: representatives of every intent cluster and singleton, goldens already
covered left out, suggestions pre-filled, in priority order, exported for curators."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from rag_loop.curation.exports import cluster_phrasings, export_intents, export_knowledge
from rag_loop.curation.queue_files import (
    CURATOR_FIELDS,
    batch_name,
    export_for_workspace,
    export_queue,
)
from rag_loop.curation.representatives import QueueSettings, covered_by_goldens, select_representatives
from rag_loop.goldens.coverage import intent_coverage, release_goldens
from rag_loop.intents.members import candidate_members, load_vectors
from rag_loop.logs import Log, quiet
from rag_loop.schema import Origin, Priority
from rag_loop.selection.suggestions import suggest_origin
from rag_loop.store.incidents import open_incident_ids
from rag_loop.store.releases import read_goldens, release_versions
from rag_loop.store.tables import has_table, replace_table
from rag_loop.store.traces import retrieval_contexts, trace_details
from rag_loop.text import same_text_key
from rag_loop.vectors.clustering import (
    NOISE,
    Clustering,
)
from rag_loop.vectors.router import LanguageRouter


@dataclass
class QueueReport:
    """What `build_curation_queue` queued and exported."""

    queued: int
    covered_by_goldens: int  # representatives a released golden already covers
    batch: str
    files: list[str]  # the JSONL and CSV exports, when anything was queued
    by_priority: dict[str, int]
    by_suggested_failure_type: dict[str, int]
    incident_rows: int = 0  # rows standing for an open incident's failing traces (P0, origin incident)
    coverage: str = ""  # what ordered the rows within a priority: the coverage of which release, or why none


def build_curation_queue(con: duckdb.DuckDBPyConnection, router: LanguageRouter,
                         settings: QueueSettings, queue_dir: Path, goldens_dir: Path,
                         log: Log = quiet) -> QueueReport:
    """(Re)build `curation_queue` from the clusters and export it as `<batch>.jsonl` / `.csv`.

    Representatives already covered by the newest golden release are counted, not queued.
    A representative of a cluster that is new since the previous clustering run is at
    least P2 (novel). Open incidents (`rag-loop incident open`) come first: a row standing for
    one of their failing traces is P0 with origin `incident`, and their failing traces no row
    stands for (a golden covers the text, or another trace represents the intent) get rows of
    their own, one per intent first, at most `INCIDENT_ROWS` per incident (issue 48). Within a
    priority, an intent the newest release leaves uncovered comes before a covered one, the
    largest uncovered volume first (`CoverageOrder`); every row says why it ranks where it does
    (`rank_reason`).
    """
    members = candidate_members(con).set_index("trace_id")
    clusters = con.execute("SELECT * FROM intent_clusters").df().set_index("cluster_id")
    assigned = dict(con.execute("SELECT trace_id, cluster_id FROM trace_clusters").fetchall())
    goldens = load_golden_inputs(goldens_dir)
    parts, covered = [], 0
    for language in sorted(members["language"].unique()):
        trace_ids, vectors = load_vectors(con, language)
        if not trace_ids:
            continue
        group = members.loc[trace_ids].reset_index()
        clustering, cluster_ids = _clustering_from_tables(trace_ids, vectors, assigned, clusters)
        queue = select_representatives(group, vectors, clustering, settings)
        queue["cluster_id"] = [cluster_ids[c] if c != NOISE else assigned[trace_ids[p]]
                               for c, p in zip(queue["cluster"], queue["point"])]
        inputs = [g["input"] for g in goldens if g["language"] in (None, language)]
        if inputs:
            _, golden_vectors = router.embed(con, inputs, language, log=log)
            hit, _ = covered_by_goldens(vectors[queue["point"]], golden_vectors,
                                           settings.golden_similarity)
            covered += int(hit.sum())
            queue = queue[~hit]
        queue = queue.assign(trace_id=[trace_ids[p] for p in queue["point"]])
        parts.append(queue.drop(columns=["point", "cluster"]))
    queue = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    incidents = open_incident_ids(con)
    queue = pd.concat([queue, _incident_items(queue, incidents, members, clusters, assigned)],
                      ignore_index=True) if incidents else queue
    coverage = coverage_order(con, goldens_dir)
    rows = _queue_rows(con, queue, members, clusters, incidents, coverage) if len(queue) else []
    last_day = str(members["timestamp"].max())[:10] if len(members) else "empty"
    batch = batch_name(pd.DataFrame({"trace_id": [r["trace_id"] for r in rows]}), last_day)
    for row in rows:
        row["batch"] = batch
    paths = export_queue(rows, queue_dir, batch) if rows else ()
    if rows:  # the curator workspace's hand-over: it never opens the database
        details, phrasings = trace_details(con, [r["trace_id"] for r in rows]), cluster_phrasings(con)
        for row in rows:
            details.setdefault(row["trace_id"], {})["phrasings"] = phrasings.get(row["cluster_id"], [])
        paths = (*paths, export_for_workspace(rows, details, queue_dir, batch),
                 export_knowledge(con, queue_dir), export_intents(con, queue_dir))
    replace_table(con, "curation_queue", pd.DataFrame(rows) if rows else pd.DataFrame(
        {"trace_id": pd.Series(dtype=str), "batch": pd.Series(dtype=str)}))
    return QueueReport(len(rows), covered, batch, [str(p) for p in paths], _counts(rows, "priority"),
                       _counts(rows, "suggested_failure_type"), sum(bool(r.get("incidents")) for r in rows),
                       coverage.summary())


def _counts(rows: list[dict], key: str) -> dict[str, int]:
    return dict(sorted(Counter(r[key] for r in rows).items()))


def _clustering_from_tables(trace_ids: list[str], vectors: np.ndarray, assigned: dict[str, str],
                            clusters: pd.DataFrame) -> tuple[Clustering, list[str]]:
    """The stored clustering of one language, as `select_representatives` takes it."""
    real = [c for c in dict.fromkeys(assigned[t] for t in trace_ids)
            if not clusters.loc[c, "is_singleton"]]
    index = {c: i for i, c in enumerate(real)}
    labels = np.array([index.get(assigned[t], NOISE) for t in trace_ids])
    centroids = np.array([clusters.loc[c, "centroid"] for c in real], dtype=np.float32).reshape(
        len(real), vectors.shape[1])
    medoids = np.array([trace_ids.index(clusters.loc[c, "medoid_trace_id"]) for c in real], dtype=int)
    radii = np.array([clusters.loc[c, "radius"] for c in real], dtype=float)
    return Clustering(labels, centroids, medoids, radii), real


INCIDENT_ROWS = 10  # rows added per open incident no queued row stands for


def _incident_items(queue: pd.DataFrame, incidents: dict[str, list[str]], members: pd.DataFrame,
                    clusters: pd.DataFrame, assigned: dict[str, str]) -> pd.DataFrame:
    """Queue items for open incidents' failing traces that no queued row stands for: selected
    and clustered ones only (the others have no intent to show), one per intent first, at most
    INCIDENT_ROWS per incident."""
    represented = set(queue["trace_id"]) if len(queue) else set()
    for variants in (queue["variant_trace_ids"] if len(queue) else []):
        represented.update(variants)
    items, per_incident = [], Counter()
    waiting: dict[str, list[str]] = {}
    for trace_id in sorted(t for t in incidents if t not in represented and t in members.index
                           and t in assigned and assigned[t] in clusters.index):
        waiting.setdefault(assigned[trace_id], []).append(trace_id)
    rounds = max((len(v) for v in waiting.values()), default=0)
    for trace_id in [ids[r] for r in range(rounds) for _, ids in sorted(waiting.items()) if r < len(ids)]:
        owners = [i for i in incidents[trace_id] if per_incident[i] < INCIDENT_ROWS]
        if not owners:
            continue
        per_incident.update(owners)
        weight = float(members.loc[[trace_id], "weight"].iloc[0])
        cluster = clusters.loc[assigned[trace_id]]
        items.append({"trace_id": trace_id, "cluster_id": assigned[trace_id], "priority": Priority.P0.value,
                      "singleton": bool(cluster["is_singleton"]), "diversity_rank": 0,
                      "cluster_size": int(cluster["size"]) if "size" in cluster else 1,
                      "cluster_weight": float(cluster["weight"]) if "weight" in cluster else weight,
                      "representative_rank": 0, "variant_count": 1, "variant_trace_ids": [trace_id],
                      "variant_weight": weight})
    return pd.DataFrame(items)


@dataclass(frozen=True)
class CoverageOrder:
    """Golden coverage as the queue orders by it (issue 48): per intent, the traffic volume (Σ 1/π
    over the days `golden_coverage` stored) the newest release leaves uncovered — 0 for an intent
    it covers. `note` says why there is none (no coverage computed): then coverage orders nothing,
    and every row says so."""

    release: str | None = None
    uncovered: dict[str, float] = field(default_factory=dict)
    covered: frozenset[str] = frozenset()
    days: int = 0
    note: str | None = "coverage not computed (no golden_coverage rows: run coverage_job)"

    def key(self, cluster_id: str) -> float:
        """Sort key: the larger the uncovered volume, the earlier (0 without figures)."""
        return -self.uncovered.get(cluster_id, 0.0)

    def reason(self, cluster_id: str) -> str:
        if self.note:
            return self.note
        if cluster_id in self.covered:
            return f"its intent is covered by {self.release} (after uncovered intents)"
        if cluster_id not in self.uncovered:
            return "its intent has no coverage figure (new since golden_coverage ran)"
        by = f"by {self.release}" if self.release else "(no golden release yet)"
        return (f"its intent is uncovered {by}: {self.uncovered[cluster_id]:,.0f} requests (Σ 1/π) over "
                f"{self.days} days, larger uncovered intents first")

    def summary(self) -> str:
        if self.note:
            return self.note
        by = f"by {self.release}" if self.release else "(no release: every intent uncovered)"
        return f"uncovered volume {by} over {self.days} days"


def coverage_order(con: duckdb.DuckDBPyConnection, goldens_dir: Path) -> CoverageOrder:
    """Per intent, the volume the newest release in `goldens_dir` leaves uncovered: the stored
    days of `golden_coverage_intents`, covered as the newest release covers them now (not as
    when the days were measured). No stored coverage: `CoverageOrder()` says it is not computed."""
    if not has_table(con, "golden_coverage_intents"):
        return CoverageOrder()
    days = con.execute("SELECT count(DISTINCT day) FROM golden_coverage_intents WHERE slice = 'all'").fetchall()[0][0]
    if not days:
        return CoverageOrder()
    goldens = release_goldens(goldens_dir)
    frame = intent_coverage(con, goldens)
    covered = frozenset(frame.loc[frame["covered"].eq(True).fillna(False).to_numpy(dtype=bool), "cluster_id"])
    return CoverageOrder(goldens.version, dict(zip(frame["cluster_id"], frame["uncovered_volume"].astype(float))),
                         covered, int(days), None)


def rank_reason(row: dict, singleton: bool, coverage: CoverageOrder) -> str:
    """Why a queue row ranks where it does, after its priority: an incident, which representative
    of its intent it is, and its intent's coverage (a singleton: farthest first among singletons)."""
    parts = [f"{row['priority']}"]
    if row.get("incidents"):
        parts.append(f"a failing trace of open incident {', '.join(row['incidents'])}: first")
    parts.append("a singleton query (ordered farthest from the others first)" if singleton else
                 "the first representative of its intent" if not row["representative_rank"] else
                 f"representative {row['representative_rank'] + 1} of its intent (after every first one)")
    if not singleton:
        parts.append(coverage.reason(row["cluster_id"]))
    return "; ".join(parts)


def _queue_rows(con: duckdb.DuckDBPyConnection, queue: pd.DataFrame, members: pd.DataFrame,
                clusters: pd.DataFrame, incidents: dict[str, list[str]] | None = None,
                coverage: CoverageOrder = CoverageOrder()) -> list[dict]:
    contexts = retrieval_contexts(con, queue["trace_id"].tolist())
    order = {p.value: i for i, p in enumerate(Priority)}
    rows, positions = [], {}
    # each row's trace and cluster looked up at once (a .loc per row cost more than the rest)
    traces = members.loc[queue["trace_id"]].to_dict("records")
    cluster_rows = clusters.loc[queue["cluster_id"]].to_dict("records")
    for item, trace, cluster in zip(queue.to_dict("records"), traces, cluster_rows, strict=True):
        positions[item["trace_id"]] = (bool(item["singleton"]), int(item["diversity_rank"]))
        priority = item["priority"]
        is_new = pd.notna(cluster["is_new"]) and bool(cluster["is_new"])
        if is_new and order[priority] > order[Priority.P2.value]:
            priority = Priority.P2.value  # a cluster the previous run did not have
        rows.append({
            "trace_id": item["trace_id"], "language": trace["language"], "input": trace["query"],
            "actual_output": trace["answer"], "retrieval_context": contexts.get(item["trace_id"], []),
            "cluster_id": item["cluster_id"], "cluster_label": cluster["label"],
            "cluster_size": int(item["cluster_size"]),
            "cluster_weight": round(float(item["cluster_weight"]), 3),
            "representative_rank": int(item["representative_rank"]),
            "variant_count": int(item["variant_count"]),
            "variant_trace_ids": list(item["variant_trace_ids"]),
            "variant_weight": round(float(item["variant_weight"]), 3),
            "signals": list(trace["signals"]), "feedback_category": trace["feedback_category"],
            "priority": priority, "suggested_failure_type": trace["suggested_failure_type"],
            "suggestion_reason": trace["suggestion_reason"],
            "suggested_origin": str(suggest_origin(trace["signals"])),
            # what the online judge said (judge_score, its Faithfulness, comes back on the label
            # so that curators and the judge can be compared: judge_calibration)
            "judge_score": _number(trace["faithfulness_score"]), "judge_scores": trace["judge_scores"],
            **{key: (list(value) if isinstance(value, list) else value)
               for key, value in CURATOR_FIELDS.items()},
        })
        if owners := sorted({i for t in (item["trace_id"], *item["variant_trace_ids"])
                             for i in (incidents or {}).get(t, ())}):
            rows[-1] |= {"priority": Priority.P0.value, "suggested_origin": str(Origin.INCIDENT),
                         "incidents": owners}  # an open incident's failing trace: first (issue 48)
    # within a priority: incidents, first representatives, then clusters by the volume the newest
    # release leaves uncovered (issue 48), singletons farthest first, then by weight
    rows.sort(key=lambda r: (order[r["priority"]], not r.get("incidents"), r["representative_rank"],
                             positions[r["trace_id"]][0],
                             0.0 if positions[r["trace_id"]][0] else coverage.key(r["cluster_id"]),
                             positions[r["trace_id"]][1], -r["cluster_weight"], r["trace_id"]))
    for row in rows:
        row["rank_reason"] = rank_reason(row, positions[row["trace_id"]][0], coverage)
    return one_row_per_text(rows)


def one_row_per_text(rows: list[dict]) -> list[dict]:
    """The first row of each text (`same_text_key`) in queue order, carrying the traces and
    weight of the later rows of that text: a text asked in two languages, or in a cluster and
    (in other case) as a singleton, is one row."""
    kept: dict[str, dict] = {}
    for row in rows:
        first = kept.setdefault(same_text_key(row["input"]), row)
        if first is not row:
            first["variant_trace_ids"] = first["variant_trace_ids"] + row["variant_trace_ids"]
            first["variant_count"] += row["variant_count"]
            first["variant_weight"] = round(first["variant_weight"] + row["variant_weight"], 3)
    return list(kept.values())


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else round(float(value), 4)


def load_golden_inputs(goldens_dir: Path) -> list[dict]:
    """Inputs of the newest release under `goldens_dir`, if any, with their language."""
    versions = release_versions(goldens_dir)
    if not versions:
        return []
    newest = versions[-1]
    return [{"input": g["input"], "release": newest,
             "language": (g.get("additional_metadata") or {}).get("language")}
            for g in read_goldens(goldens_dir, newest)]
