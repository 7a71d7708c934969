"""Clustering leaves torch's OpenMP thread count as the user configured it.

Numba's OpenMP layer shares torch's libgomp and, when it starts (fast_hdbscan's first parallel
loop), sets the thread's OpenMP count to NUMBA_NUM_THREADS; torch loaded after it binds to the
libgomp Numba loaded. Each case runs in a fresh process: the layer starts once per process, and
tests/__init__.py sets NUMBA_NUM_THREADS=1 here."""

import os
import subprocess
import sys

import pytest

from tests.helpers import PROJECT

CLUSTER = """
import numpy as np
from rag_loop.vectors.clustering import ClusterSettings, hdbscan_labels
points = np.random.default_rng(0).normal(size=(200, 30))
for method in ("leaf", "eom"):
    hdbscan_labels(points, ClusterSettings(selection_method=method))
"""


@pytest.mark.slow
@pytest.mark.parametrize("torch_first", [True, False], ids=["torch-loaded-before", "torch-loaded-after"])
def test_clustering_leaves_the_omp_num_threads_torch_embeds_with(torch_first):
    script = ("import torch; assert torch.get_num_threads() == 1\n" if torch_first else "") + CLUSTER + \
        "import torch; print(torch.get_num_threads())"
    # torch re-applies MKL_NUM_THREADS when it loads: left out, it would hide the loaded-after case
    env = {**{k: v for k, v in os.environ.items() if k not in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
           "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=PROJECT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1"]
