"""The curation queue on the demo: suggestions, files, goldens already covered."""
from pathlib import Path

from rag_loop.curation.queue import build_curation_queue
from rag_loop.curation.queue_files import read_queue
from rag_loop.curation.representatives import (
    QueueSettings,
)
from rag_loop.goldens.release import publish_release
from tests.helpers import demo_copy, fake_embedder, metadata_of, query


def test_demo_queue_materializes_with_suggestions_and_files(demo_run):
    result, database, paths = demo_run
    embedded = metadata_of(result, "query_embeddings")
    assert set(embedded["languages_on_default_model"]) == {"en", "vi"}  # the fake: no per-language model
    clusters = metadata_of(result, "intent_clusters")
    assert clusters["clusters_en"] > 20 and clusters["clusters_vi"] > 20
    queue = metadata_of(result, "curation_queue")
    rows = read_queue(next((Path(paths.curation_dir) / "queue").glob("*.jsonl")))
    assert len(rows) == queue["dagster/row_count"]
    assert [r["priority"] for r in rows] == sorted(r["priority"] for r in rows)
    first = rows[0]
    assert first["retrieval_context"] and first["retrieval_context"][0]["text"]
    assert {"expected_output", "expected_sources", "tags", "origin", "failure_type", "decision"} <= set(first)
    stale = [r for r in rows if "stale_source" in r["signals"]]
    assert stale and all(r["suggested_failure_type"] == "data_freshness" for r in stale)
    # every candidate is in exactly one cluster or singleton
    assert query(database, "SELECT count(*), count(DISTINCT trace_id) FROM trace_clusters") == \
        query(database, "SELECT count(*), count(*) FROM failure_candidates")


def test_a_representative_covered_by_a_golden_is_counted_not_queued(demo_run, tmp_path):
    con = demo_copy(demo_run, tmp_path)
    first = con.execute("SELECT input, language FROM curation_queue LIMIT 1").fetchall()[0]
    publish_release(tmp_path / "goldens", [{"name": "g-1", "input": first[0], "expected_output": "x",
                                            "additional_metadata": {"language": first[1], "origin": "manual",
                                                                    "failure_type": "none", "tags": []}}],
                    "", "", {})
    router = fake_embedder().router()  # the one demo_run embedded with
    figures = build_curation_queue(con, router, QueueSettings(), tmp_path / "queue", tmp_path / "goldens")
    assert figures.covered_by_goldens >= 1
    assert first[0] not in {r[0] for r in con.execute("SELECT input FROM curation_queue").fetchall()}


def test_a_text_queued_twice_is_one_row_with_every_trace_and_weight():
    """A text asked in two languages, or in a cluster and (in other case) as a singleton."""
    from rag_loop.curation.queue import one_row_per_text

    def row(trace, text, weight):
        return {"trace_id": trace, "input": text, "variant_trace_ids": [trace], "variant_count": 1,
                "variant_weight": weight}
    rows = one_row_per_text([row("a", "How long must my password be?", 2.0), row("b", "Where is the VPN?", 1.0),
                             row("c", " how long must my  password be? ", 3.5)])
    assert [(r["trace_id"], r["variant_trace_ids"], r["variant_count"], r["variant_weight"]) for r in rows] == \
        [("a", ["a", "c"], 2, 5.5), ("b", ["b"], 1, 1.0)]
