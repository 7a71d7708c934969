import duckdb

from rag_loop.demo.generate import read_truth, simulate, stored_trace_id
from rag_loop.demo.intent_catalog import INTENTS
from rag_loop.ingest import ingest_directory
from tests.helpers import DEMO


def test_the_generator_reproduces_the_committed_ground_truth():
    """One simulation (seed 7) against the committed truth.parquet: the generator is
    deterministic across runs and machines, and the committed data is what it makes."""
    traces = simulate(7)
    truth = read_truth(DEMO)
    assert [stored_trace_id(t) for t in traces] == truth["trace_id"].to_pylist()
    assert [t["_intent"] for t in traces] == truth["intent"].to_pylist()
    assert len(traces) >= 5000 and len({t["timestamp"][:10] for t in traces}) == 14
    assert len(INTENTS) >= 40 and all(i.en and i.vi for i in INTENTS)


def test_committed_demo_data_holds_the_planted_events():
    con = duckdb.connect()  # in memory: the data is asked about, not kept
    ingest_directory(con, DEMO / "traces")

    def one(sql):
        return con.execute(sql).fetchall()[0][0]

    # 3: the prompt regression hurts Vietnamese policy answers
    bad = """SELECT avg((f.category IS NOT NULL)::INT) FROM raw_traces t
             LEFT JOIN trace_feedback f USING (trace_id)
             WHERE t.language = 'vi' AND t.query_type = 'policy' AND t.prompt_version = '{}'"""
    assert one(bad.format("qa-v4")) > 2 * one(bad.format("qa-v3"))
    # 4: the rebuild lowers top-1 retrieval scores
    top1 = """SELECT median(c.score) FROM trace_chunks c JOIN raw_traces t USING (trace_id)
              WHERE c.rank = 1 AND t.index_version = '{}'"""
    assert one(top1.format("kb-2026-11-09")) < one(top1.format("kb-2026-10-01"))
    # 5: password policy 2024 retrieved during the indexing lag
    stale = one("""SELECT count(*) FROM trace_chunks c JOIN raw_traces t USING (trace_id)
                   WHERE c.doc_id = 'password-policy' AND c.doc_version = '2024' AND c.selected
                   AND t."timestamp" BETWEEN '2026-11-11 09:00:00+00' AND '2026-11-11 15:30:00+00'""")
    assert stale > 0
    # 2 and 6: timeouts spike on the 4th; ERR-PAY-977 surges on the 12th-13th
    assert one("SELECT count(*) FILTER (status = 'timeout') FROM raw_traces "
               "WHERE \"timestamp\"::DATE = '2026-11-04'") > 10
    surge = "SELECT count(*) FROM raw_traces WHERE original_query ILIKE '%977%' AND \"timestamp\"::DATE {}"
    assert one(surge.format("BETWEEN '2026-11-12' AND '2026-11-13'")) > 50
    assert one(surge.format("< '2026-11-12'")) == 0
    # 7: empty retrievals exist
    assert one("SELECT count(*) FROM raw_traces t WHERE NOT EXISTS "
               "(SELECT 1 FROM trace_chunks c WHERE c.trace_id = t.trace_id)") > 10
