"""Shared setup of the Python package's tests (python/README.md says how they run).

The package under test is the one on sys.path: the build tree's (build/<preset>/python, which
the test command puts first) or an installed one. ATTNBENCH_CLI names the attnbench command for
the tests that compare with it (skipped where it is not set).
"""
import os
import shutil
import sys

import pytest



def cuda_available():
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch, or a torch that cannot see a GPU
        return False


# Triton compiles its kernels on a GPU machine and runs its interpreter on the CPU otherwise (set
# before anything imports triton).
CUDA = cuda_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))  # numpy_kernels


@pytest.fixture(scope="session")
def attnbench_cli():
    path = os.environ.get("ATTNBENCH_CLI") or shutil.which("attnbench")
    if not path:
        pytest.skip("ATTNBENCH_CLI is not set and attnbench is not on PATH")
    return path


def have(module):
    try:
        __import__(module)
        return True
    except Exception:  # noqa: BLE001 - any failure to import means it is not usable here
        return False
