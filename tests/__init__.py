"""rag-loop's tests. Imported before any test module or conftest of this package."""

import os

# two workers on two cores: one OpenMP thread per process (torch, numba, scikit-learn), set
# before any of them loads and inherited by the subprocesses; two processes each spinning two
# OpenMP threads on two cores once made one eval test take 101 s instead of 12. NUMBA_NUM_THREADS
# too: one clustering thread per worker (since 18963c6 clustering no longer resets torch's
# OpenMP count to Numba's; tests/vectors/test_openmp_threads.py)
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
