import gc
import os
import pickle
import shutil
from pathlib import Path

import duckdb
import pytest
from filelock import FileLock

from rag_loop.store.tables import create_tables
from tests.helpers import DEMO, RecordedRun, demo_config, fake_embedder, metadata_of
from tests.helpers.ramdisk import MEMORY, has_room

# The session's tmp_path folders in memory where there is room: each DuckDB commit and Dagster
# event syncs its file to disk, 2-3 ms on these machines and none in /dev/shm, and a worker waiting
# for the disk leaves its core idle (3,300 syncs, 9 s of waiting in tests/selection, online and
# goldens alone). What the tests prove does not depend on where the files are; pyproject's
# retention policy removes a green session's folders.
if has_room(4 << 30):
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", str(MEMORY))

SPARK_MODULES = "tests/engines/test_spark"
# Scheduling hints, longest first: a wrong hint costs time, never a result. The Spark modules
# (one worker's work for most of the run) start first, their tests that need no demo run
# first; the long modules that need no demo run start on the other worker while it builds it.
LONG_WITHOUT_DEMO = ("tests/e2e/test_own_traces.py", "tests/ingest/test_native_hostile.py",
                     "tests/ingest/otlp/test_frameworks.py", "tests/demo/test_generate.py",
                     "tests/ingest/test_native.py", "tests/selection/test_sampling.py")
LONG_WITH_DEMO = ("tests/e2e/test_webserver.py", "tests/evaluation/test_regression.py")
EARLY_BUILDER = "gw0"  # without Spark tests; with them, the worker that did not get them
BUILT_ONCE = pytest.StashKey[list]()  # the session's shared builds its tests need, largest first
WITH_SPARK = pytest.StashKey[bool]()  # whether the session has Spark tests (the first scope)


# the modules that embed with the bundled models in their worker's process: on one worker, one
# import of sentence-transformers and torch and one load of each model (models are kept per process)
MODEL_MODULES = ("tests/evaluation/test_regression.py", "tests/vectors/test_embedding.py",
                 "tests/vectors/test_clustering.py")


def _scope(nodeid: str) -> str:
    module = nodeid.split("::")[0]
    if module.startswith(SPARK_MODULES):
        return SPARK_MODULES
    return MODEL_MODULES[0] if module in MODEL_MODULES else module


def pytest_xdist_make_scheduler(config, log):
    """A module per worker (`--dist loadfile`, in the order `pytest_collection_modifyitems`
    gives), but the Spark modules together (one worker starts one JVM, not one per module on
    both cores) and the bundled models' (`MODEL_MODULES`)."""
    from xdist.scheduler import LoadFileScheduling

    class SparkModulesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)
    return SparkModulesTogether(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Collection without the garbage collector, then what it loaded frozen out of its sight:
    importing every test module (both workers collect the whole suite) creates ~650k long-lived
    objects, which the collector's full passes walked again and again while they loaded (10.0 ->
    5.9 CPU-s a collection) and in every full pass after. rag_loop_dagster/definitions.py does
    the same for a deployment's processes."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """After a module's last test (its module fixtures torn down), its garbage collected and
    what outlives it (imports, session fixtures, caches) frozen too: the collector's full
    passes would otherwise walk torch's, Dagster's and Spark's objects again and again."""
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Every worker collects the same order: the Spark modules (xdist gives this first scope
    to the first worker at once), those of their tests that need no demo run first; the long
    modules that need no demo run (the other worker builds it meanwhile, `_built_early`), then
    the long ones that need it, then the rest by number of tests, as xdist would order them."""
    sizes: dict[str, int] = {}
    for item in items:
        sizes[_scope(item.nodeid)] = sizes.get(_scope(item.nodeid), 0) + 1
    hinted = [SPARK_MODULES, *LONG_WITHOUT_DEMO, *LONG_WITH_DEMO]

    def rank(item) -> tuple:
        scope = _scope(item.nodeid)
        if scope == SPARK_MODULES:
            return 0, "demo_run" in item.fixturenames
        return (hinted.index(scope),) if scope in hinted else (len(hinted), -sizes[scope], scope)
    items.sort(key=rank)
    config.stash[BUILT_ONCE] = [f for f in ("drift_days", "demo_run") if any(f in i.fixturenames for i in items)]
    config.stash[WITH_SPARK] = any(_scope(i.nodeid) == SPARK_MODULES for i in items)


@pytest.fixture(scope="session", autouse=True)
def _session_sql_cache(tmp_path_factory, worker_id):
    """The DuckDB engine's SQL kept across processes (rag_loop.engines.sql_cache) in the test
    session's folder: shared by the workers and the subprocesses they start, never the user's."""
    shared = tmp_path_factory.getbasetemp()
    folder = (shared if worker_id == "master" else shared.parent) / "sql_cache"
    os.environ.setdefault("RAG_LOOP_SQL_CACHE", str(folder))


@pytest.fixture(scope="session", autouse=True)
def _built_early(request, worker_id, _session_sql_cache):
    """With several workers, one builds the demo run (and its drift days) before its first
    test, while the others run tests that need neither, instead of one waiting for the other:
    the worker whose first test is not a Spark test (the other starts the Spark modules at
    once, which need the demo run last), or the first worker in a session without them."""
    needed = request.config.stash.get(BUILT_ONCE, [])
    if worker_id == "master" or not needed:
        return
    first = getattr(request, "_pyfuncitem", None)  # the test this fixture is set up for
    on_spark = first is not None and _scope(first.nodeid) == SPARK_MODULES
    if (not on_spark) if request.config.stash.get(WITH_SPARK, False) else worker_id == EARLY_BUILDER:
        request.getfixturevalue(needed[0])  # drift_days builds on the demo run

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_DISABLE_DOTENV", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# two workers on two cores: a library's second OpenMP thread (torch, BLAS) only spins between
# batches (a test of own traces: 4-5 CPU-s of ~34)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def con(tmp_path_factory):
    connection = duckdb.connect(str(tmp_path_factory.mktemp("db") / "test.duckdb"))
    yield connection
    connection.close()


def _demo_paths(root):
    from rag_loop_dagster.assets.resources import RagLoopPaths
    return RagLoopPaths(traces_dir=str(DEMO / "traces"), knowledge_dir=str(DEMO / "kb"),
                        curation_dir=str(root / "curation"), goldens_dir=str(root / "goldens"),
                        reports_dir=str(root / "reports"))


def _build_demo_run(root) -> None:
    """The loop's assets materialized on the demo data into `root`, with each step's metadata."""
    from dagster import AssetsDefinition, materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop_dagster.assets.resources import DuckDBEngineResource, EmbeddedStorageResource, OfflineJudgeResource
    from rag_loop_dagster.definitions import defs
    root.mkdir(parents=True, exist_ok=True)
    resources = {"duckdb": DuckDBResource(database=str(root / "rag.duckdb")), "paths": _demo_paths(root),
                 "embedder": fake_embedder(), "judge": OfflineJudgeResource(),
                 "engine": DuckDBEngineResource(), "storage": EmbeddedStorageResource()}  # no rag_app needed
    curators_own = {"golden_release", "regression_eval"}  # as rag_loop_job: not part of the loop
    assets = [a for a in defs.assets if isinstance(a, AssetsDefinition)
              and not {k.to_user_string() for k in a.keys} & curators_own
              and a.partitions_def is None]  # drift is daily: tested per partition
    result = materialize(assets, resources=resources, run_config=demo_config("loop"))
    assert result.success
    recorded = {a.node_def.name: metadata_of(result, a.node_def.name) for a in assets}
    (root / "metadata.pickle").write_bytes(pickle.dumps(recorded))


def _built_once(tmp_path_factory, worker_id, name: str, build) -> Path:
    """`build(folder)` once per test session, by the first worker that needs it (the others
    wait): the folder, shared by every worker, to copy from."""
    shared = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        shared = shared.parent  # the session's folder, above every worker's
    built = shared / f"{name}_built"
    with FileLock(str(shared / f"{name}.lock")):
        if not (built / "done").exists():
            build(built)
            (built / "done").touch()
    return built


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, worker_id):
    """The whole loop materialized once per test session on the demo data (the first worker to
    need it builds it, the others wait), and copied for each worker: (run, database, paths)."""
    built = _built_once(tmp_path_factory, worker_id, "demo_run", _build_demo_run)
    root = tmp_path_factory.mktemp("demo_run")
    shutil.copytree(built, root, dirs_exist_ok=True)
    run = RecordedRun(pickle.loads((root / "metadata.pickle").read_bytes()))
    return run, root / "rag.duckdb", _demo_paths(root)


def _release_paths(root, demo_paths):
    from rag_loop_dagster.assets.resources import RagLoopPaths
    return RagLoopPaths(traces_dir=demo_paths.traces_dir, knowledge_dir=demo_paths.knowledge_dir,
                        curation_dir=str(root / "curation"), goldens_dir=str(root / "goldens"),
                        reports_dir=str(root / "reports"))


def _build_demo_releases(root, database, queue, demo_paths) -> None:
    """The demo curator's two rounds on a copy of the loop's database in `root`, each labelled
    and released as the demo does it: goldens v0001, then v0002."""
    from dagster import materialize
    from dagster_duckdb import DuckDBResource

    from rag_loop.demo.curator import curate
    from rag_loop_dagster.assets.curation import curated_labels
    from rag_loop_dagster.assets.goldens import golden_release, golden_releases
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(database, root / "rag.duckdb")
    resources = {"duckdb": DuckDBResource(database=str(root / "rag.duckdb")), "paths": _release_paths(root, demo_paths)}
    for round_number in (1, 2):
        curate(queue, root / "curation" / "labels", round_number)
        assert materialize([curated_labels, golden_release, golden_releases], resources=resources,
                           run_config=demo_config(f"release/round-{round_number}")).success


@pytest.fixture
def demo_releases(demo_run, tmp_path_factory, worker_id):
    """The demo curator's two rounds released (v0001, v0002) on the demo run, built once per test
    session and copied for each test: (root, paths), the database at root / "rag.duckdb"."""
    _, database, paths = demo_run
    queue = next((Path(paths.curation_dir) / "queue").glob("*.jsonl"))
    built = _built_once(tmp_path_factory, worker_id, "demo_releases",
                        lambda root: _build_demo_releases(root, database, queue, paths))
    root = tmp_path_factory.mktemp("demo_releases")
    shutil.copytree(built, root, dirs_exist_ok=True)
    (root / "done").unlink()
    return root, _release_paths(root, paths)


def _build_drift_days(root, database) -> None:
    """Every drift check's verdicts for the 14 demo days, day by day in order, on a copy of the
    loop's database in `root`: `fired.pickle` ({day: {check: severity}}, days stored per table)."""
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
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(database, root / "rag.duckdb")
    router = fake_embedder().router()
    fired: dict[str, dict[str, str]] = {}
    with duckdb.connect(str(root / "rag.duckdb")) as con:
        for offset in range(14):
            day = date(2026, 11, 1) + timedelta(days=offset)
            verdicts = (query_mix_day(con, day, router, QueryMixSettings())
                        + freshness_day(con, day, FreshnessSettings())
                        + retrieval_day(con, day, RetrievalSettings())
                        + quality_day(con, day, QualitySettings()))
            fired[day.strftime("%m-%d")] = {v.name: v.severity for v in verdicts if v.fired}
        tables = {t: con.execute(f"SELECT count(DISTINCT day) FROM {t}").fetchall()[0][0]
                  for t in ("query_mix", "freshness_daily", "retrieval_scores", "quality_slis")}
    (root / "fired.pickle").write_bytes(pickle.dumps((fired, tables)))


@pytest.fixture(scope="session")
def drift_days(demo_run, tmp_path_factory, worker_id):
    """Every drift check's verdicts for the 14 demo days, computed day by day in order on a
    copy of the loop's database (once per test session, copied for each worker):
    ({day: {check: severity}}, days stored per table, database)."""
    _, database, _ = demo_run
    built = _built_once(tmp_path_factory, worker_id, "drift_days", lambda root: _build_drift_days(root, database))
    copy = tmp_path_factory.mktemp("drift") / "rag.duckdb"
    shutil.copy(built / "rag.duckdb", copy)
    fired, tables = pickle.loads((built / "fired.pickle").read_bytes())
    return fired, tables, copy


@pytest.fixture
def db(tmp_path):
    """A database with one document version, three traces and t1's retrieved chunk: what
    label and release tests need."""
    con = duckdb.connect(str(tmp_path / "db.duckdb"))
    create_tables(con)
    con.execute("""INSERT INTO documents (doc_id, version, title, language, source_updated_at, indexed_at)
                   VALUES ('leave', '2026', 'Leave', 'en', '2026-11-03 09:00:00+00', '2026-11-03 09:10:00+00')""")
    con.execute("INSERT INTO document_chunks VALUES ('leave@2026#annual-en', 'leave', '2026', "
                "'Full-time employees get 15 days of paid annual leave per year.')")
    for trace in ("t1", "t2", "t3"):
        con.execute("INSERT INTO raw_traces (trace_id, \"timestamp\", original_query, language, answer) "
                    "VALUES (?, '2026-11-05 10:00:00+00', ?, 'en', '12 days')",
                    [trace, f"how many leave days? ({trace})"])
    con.execute("INSERT INTO trace_chunks (trace_id, doc_id, chunk_id, doc_version, rank, selected, day) "
                "VALUES ('t1', 'leave', 'leave@2026#annual-en', '2026', 1, true, '2026-11-05')")
    yield con
    con.close()
