"""Shared setup of the Python package's tests (python/README.md says how they run).

The package under test is the one on sys.path: the build tree's (build/<preset>/python, which
the test command puts first) or an installed one. ATTNBENCH_CLI names the attnbench command for
the tests that compare with it (skipped where it is not set).
"""
import os
import shutil
import sys

import pytest

# Triton runs its interpreter on the CPU; on a GPU machine it compiles (ATTN_TRITON_COMPILE=1).
if os.environ.get("ATTN_TRITON_COMPILE") != "1":
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
