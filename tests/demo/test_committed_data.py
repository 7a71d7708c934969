"""The committed demo data holds the planted events the demo's story tells (tests/e2e/test_planted_events.py:
the detectors find them)."""

import duckdb

from tests.helpers import DEMO


def test_committed_demo_data_holds_the_planted_events(demo_run):
    """On the demo run's traces: the session's demo run ingested the committed DEMO / "traces"
    (its raw_traces asset, as `ingest_directory` on that folder), and no later asset of the loop
    changes raw_traces, trace_feedback or trace_chunks."""
    _, database, paths = demo_run
    assert paths.traces_dir == str(DEMO / "traces")
    with duckdb.connect(str(database), read_only=True) as con:  # the worker's copy: closed after
        con.execute("SET TimeZone = 'UTC'")  # the days below are UTC days, as ingestion left it

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
