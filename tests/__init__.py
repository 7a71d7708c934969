"""rag-loop's tests. Imported before any test module or conftest of this package."""

import os

# two workers on two cores: one OpenMP thread per process (torch, numba, scikit-learn), set
# before any of them loads and inherited by the subprocesses; two processes each spinning two
# OpenMP threads on two cores once made one eval test take 101 s instead of 12. NUMBA_NUM_THREADS
# too: Numba's OpenMP layer shares torch's libgomp and, after its first parallel loop (fast_hdbscan's
# clustering), sets that thread's OpenMP count to its own (the core count), whatever OMP_NUM_THREADS
# says; torch then embeds on two spinning threads (own traces: 32 -> 24 CPU-s under load)
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
