"""Shared helpers of the Python package's tests (run by ctest, see python/CMakeLists.txt)."""

import os
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def relative_error(got, expected, floor=1e-3):
    """Each element's error relative to itself, elements far below the largest measured
    against `floor` of it (values that cancelled)."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    scale = np.maximum(np.abs(expected), floor * max(np.abs(expected).max(initial=0.0), 1e-30))
    return float((np.abs(got - expected) / scale).max(initial=0.0))


@pytest.fixture
def scratch(tmp_path):
    return tmp_path


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    # Compiled shaders go to a cache shared by the tests of one run, never the user's.
    if "MN_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("MN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
