import os
from pathlib import Path

import duckdb
import pytest

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROJECT = Path(__file__).resolve().parent.parent
# asset tests embed with hashed word and character n-grams: deterministic and model-free;
# tests marked `real_models` (and the end-to-end test) use the bundled models
FAKE_EMBEDDER_SPEC = {"default_model": "hashing", "language_models": {}, "fold_accents_for": ["vi"]}


# the demo's system under test, as the demo's run config names it (data/demo/eval/)
DEMO_APP = {"rag_app": "rag_loop.demo.rag_app:answer_for_eval", "rag_config": {"config": "baseline"}}


def demo_config(name: str) -> dict:
    """A demo run config: data/demo/<name>.yaml (loop, release/round-1, eval/baseline ...)."""
    import yaml
    return yaml.safe_load((DEMO / f"{name}.yaml").read_text())


def fake_embedder():
    from assets.resources import EmbedderResource
    return EmbedderResource(**FAKE_EMBEDDER_SPEC)
DEMO = PROJECT / "data" / "demo"


@pytest.fixture
def con(tmp_path_factory):
    connection = duckdb.connect(str(tmp_path_factory.mktemp("db") / "test.duckdb"))
    yield connection
    connection.close()


def trace_line(trace_id: str, **fields) -> str:
    """A minimal valid native trace as one JSON line."""
    import json
    record = {"trace_id": trace_id, "original_query": "How many leave days?",
              "timestamp": "2026-11-01T08:00:00Z", **fields}
    return json.dumps(record)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """The whole asset graph materialized once on the demo data: (result, database, paths)."""
    from dagster import AssetsDefinition, materialize
    from dagster_duckdb import DuckDBResource

    from assets.resources import RagLoopPaths
    from definitions import defs
    root = tmp_path_factory.mktemp("demo_run")
    paths = RagLoopPaths(traces_dir=str(DEMO / "traces"), knowledge_dir=str(DEMO / "kb"),
                         curation_dir=str(root / "curation"), goldens_dir=str(root / "goldens"),
                         reports_dir=str(root / "reports"))
    resources = {"duckdb": DuckDBResource(database=str(root / "rag.duckdb")), "paths": paths,
                 "embedder": fake_embedder()}  # the loop's assets need no rag_app or judge
    curators_own = {"golden_release", "regression_eval"}  # as rag_loop_job: not part of the loop
    assets = [a for a in defs.assets if isinstance(a, AssetsDefinition)
              and not {k.to_user_string() for k in a.keys} & curators_own
              and a.partitions_def is None]  # drift is daily: tested per partition
    result = materialize(assets, resources=resources, run_config=demo_config("loop"))
    assert result.success
    return result, root / "rag.duckdb", paths


@pytest.fixture(scope="session")
def drift_days(demo_run, tmp_path_factory):
    """Every drift check's verdicts for the 14 demo days, computed day by day in order on a
    copy of the loop's database: ({day: {check: severity}}, days stored per table, database)."""
    import shutil
    from datetime import date, timedelta

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
    _, database, _ = demo_run
    copy = tmp_path_factory.mktemp("drift") / "rag.duckdb"
    shutil.copy(database, copy)
    router = fake_embedder().router()
    fired: dict[str, dict[str, str]] = {}
    with duckdb.connect(str(copy)) as con:
        for offset in range(14):
            day = date(2026, 11, 1) + timedelta(days=offset)
            verdicts = (query_mix_day(con, day, router, QueryMixSettings())
                        + freshness_day(con, day, FreshnessSettings())
                        + retrieval_day(con, day, RetrievalSettings())
                        + quality_day(con, day, QualitySettings()))
            fired[day.strftime("%m-%d")] = {v.name: v.severity for v in verdicts if v.fired}
        tables = {t: con.execute(f"SELECT count(DISTINCT day) FROM {t}").fetchall()[0][0]
                  for t in ("query_mix", "freshness_daily", "retrieval_scores", "quality_slis")}
    return fired, tables, copy


def metadata_of(result, asset: str) -> dict:
    return {k: v.value for k, v in result.asset_materializations_for_node(asset)[0].metadata.items()}


def undeclared_tables(database) -> set[str]:
    """Tables and views in the database that no asset declares: the lineage graph would lie."""
    from definitions import defs
    declared = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    stored = {name for (name,) in query(database, "SELECT table_name FROM duckdb_tables() UNION "
                                                  "SELECT view_name FROM duckdb_views() "
                                                  "WHERE NOT internal")}
    return stored - declared


def query(database, sql: str) -> list[tuple]:
    with duckdb.connect(str(database), read_only=True) as connection:
        return connection.execute(sql).fetchall()
