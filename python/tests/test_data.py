"""Data sets and tensor files from Python."""

import numpy as np
import pytest

import meganeura as mn


def test_fashion_mnist_loads_as_arrays():
    try:
        images, labels = mn.data.load_fashion_mnist("test", layout="nchw", max_samples=100)
    except mn.FormatError as e:  # the Debian package is part of scripts/setup.sh
        pytest.fail(str(e))
    assert images.shape == (100, 1, 28, 28) and images.dtype == np.float32
    assert labels.shape == (100,) and labels.dtype == np.int32
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert set(labels.tolist()) <= set(range(10))
    assert len(mn.data.fashion_mnist_classes()) == 10
    with pytest.raises(mn.Error, match="split='validation'"):
        mn.data.load_fashion_mnist("validation")


def test_safetensors_round_trip(tmp_path):
    path = tmp_path / "t.safetensors"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -2, 3], dtype=np.int32)
    mn.data.save_safetensors(path, {"a": a, "b": b}, {"format": "pt"})
    back = mn.data.load_safetensors(path)
    assert np.array_equal(back["a"], a) and back["a"].dtype == np.float32
    assert np.array_equal(back["b"], b) and back["b"].dtype == np.int32
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(mn.FormatError, match="t.safetensors"):
        mn.data.load_safetensors(path)
