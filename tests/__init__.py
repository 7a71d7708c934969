"""rag-loop's tests. Imported before any test module or conftest of this package."""

import os

import duckdb

# two workers on two cores: one OpenMP thread per process (torch, numba, scikit-learn), set
# before any of them loads and inherited by the subprocesses; two processes each spinning two
# OpenMP threads on two cores once made one eval test take 101 s instead of 12. NUMBA_NUM_THREADS
# too: one clustering thread per worker (since 18963c6 clustering no longer resets torch's
# OpenMP count to Numba's; tests/vectors/test_openmp_threads.py)
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# DuckDB likewise: a database opened in a test process runs its queries on one thread (DuckDB's
# default is one per core), whose second thread mostly waits on the first and on the other
# worker. tests/ingest, selection, online, curation and goldens on both workers, nine interleaved
# pairs: 152 -> 142 CPU-s and 79.9 -> 73.8 s (means; eight pairs of nine faster), 173k -> 17k
# voluntary context switches. The processes the tests start (the end-to-end ones, the CLI's) keep
# DuckDB's default, as a deployment runs it.
_connect = duckdb.connect


def _connect_on_one_thread(database=":memory:", read_only: bool = False, config: dict | None = None):
    return _connect(database, read_only, {"threads": 1, **(config or {})})


duckdb.connect = _connect_on_one_thread
