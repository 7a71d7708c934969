"""Clustering leaves torch's OpenMP thread count as the user configured it.

Numba's OpenMP layer shares torch's libgomp and, when it starts (fast_hdbscan's first parallel
loop), sets the thread's OpenMP count to NUMBA_NUM_THREADS; torch loaded after it binds to the
libgomp Numba loaded. Each case runs in a process of its own, as fresh as torch and Numba's layer
go: the layer starts once per process, and tests/__init__.py sets NUMBA_NUM_THREADS=1 here. One
Python imports what both cases load first (scikit-learn, SciPy, Numba: neither torch nor the
layer nor any OpenMP thread) and forks a child per case, so the imports are paid once."""

import os
import subprocess
import sys

import pytest

from tests.helpers import PROJECT

# what each child loads before its first clustering: torch (it binds to the libgomp torch
# loaded), nothing (torch binds to the one Numba loads), or fast_hdbscan itself, whose import
# starts Numba's layer before rag-loop's first clustering could look at the counts
CASES = ("torch-loaded-before", "torch-loaded-after", "fast-hdbscan-imported-first")
SCRIPT = """
import os, sys, traceback
import numpy as np, numba, scipy.stats, sklearn.utils
from numba.np.ufunc import parallel
assert "torch" not in sys.modules and not parallel._is_initialized

def case(name):
    if name != "torch-loaded-after":
        import torch
        assert torch.get_num_threads() == 1
    if name == "fast-hdbscan-imported-first":
        import fast_hdbscan
    from rag_loop.vectors.clustering import ClusterSettings, hdbscan_labels
    points = np.random.default_rng(0).normal(size=(200, 30))
    for method in ("leaf", "eom"):
        hdbscan_labels(points, ClusterSettings(selection_method=method))
    import torch
    print(name, torch.get_num_threads(), flush=True)

for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            case(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(name, "exit", os.waitstatus_to_exitcode(status), flush=True)
"""


@pytest.fixture(scope="module")
def thread_counts() -> dict:
    """Per case, what its child printed: torch's thread count after clustering, and its exit code."""
    # torch re-applies MKL_NUM_THREADS when it loads: left out, it would hide the loaded-after case
    env = {**{k: v for k, v in os.environ.items() if k not in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
           "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, *CASES], env=env, cwd=PROJECT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    counts: dict = {name: [] for name in CASES}
    for line in done.stdout.splitlines():
        name, *rest = line.split()
        counts[name].extend(rest)
    return counts | {"stderr": done.stderr[-3000:]}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_clustering_leaves_the_omp_num_threads_torch_embeds_with(thread_counts, case):
    assert thread_counts[case] == ["1", "exit", "0"], thread_counts["stderr"]
