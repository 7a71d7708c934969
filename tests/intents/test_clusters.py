"""Intent clusters across runs: a new intent gets a new cluster, old ones keep their ids."""
from rag_loop.intents.clusters import cluster_intents
from rag_loop.vectors.clustering import (
    ClusterSettings,
)
from tests.helpers import demo_copy, query_one


def test_a_surge_intent_is_a_new_cluster_on_the_next_run(demo_run, tmp_path):
    con = demo_copy(demo_run, tmp_path)
    con.execute("CREATE TABLE all_candidates AS SELECT * FROM failure_candidates")
    con.execute("DELETE FROM failure_candidates WHERE day >= '2026-11-12'")
    con.execute("DELETE FROM query_embeddings WHERE trace_id NOT IN (SELECT trace_id FROM failure_candidates)")
    con.execute("DROP TABLE intent_clusters")
    cluster_intents(con, ClusterSettings())
    assert query_one(con, "SELECT count(*) FILTER (is_new IS NOT NULL) FROM intent_clusters") == 0
    before = dict(con.execute("SELECT cluster_id, medoid_query FROM intent_clusters "
                              "WHERE NOT is_singleton").fetchall())
    con.execute("DELETE FROM failure_candidates")
    con.execute("INSERT INTO failure_candidates SELECT * FROM all_candidates")
    con.execute("DELETE FROM query_embeddings")
    _, database, _ = demo_run
    con.execute(f"ATTACH '{database}' AS original (READ_ONLY)")
    con.execute("INSERT INTO query_embeddings SELECT * FROM original.query_embeddings")
    cluster_intents(con, ClusterSettings())
    new = con.execute("SELECT cluster_id, label, medoid_query FROM intent_clusters "
                      "WHERE is_new AND NOT is_singleton").fetchall()
    assert any("977" in medoid for _, _, medoid in new), new
    kept = con.execute("SELECT count(*) FROM intent_clusters WHERE NOT is_new AND NOT is_singleton "
                       "AND cluster_id IN (SELECT unnest(?))", [list(before)]).fetchall()[0][0]
    assert kept > 0.7 * len(before)
