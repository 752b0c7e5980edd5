"""The graph language from Python: building, shapes, operators, the reference, gradients."""

import numpy as np
import pytest

import meganeura as mn
from conftest import relative_error


def test_inputs_parameters_and_shapes():
    g = mn.Graph()
    x = g.input("x", [4, 3])
    w = g.parameter("w", (3, 2), mn.Init.xavier_uniform(seed=1))
    y = (x @ w).relu()
    assert y.shape == (4, 2)
    assert y.dtype == mn.f32
    assert g.input("labels", [4], "i32").dtype == mn.i32
    assert g.inputs == ["x", "labels"]
    assert g.parameters == ["w"]
    assert "relu" in repr(y)
    g.output("y", y)
    assert g.outputs == ["y"]
    assert g.tensor("w") == w


def test_operators_with_numbers_and_arrays():
    g = mn.Graph()
    x = g.input("x", [2, 3])
    c = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    g.output("y", 2.0 - x * 3 + c / (x + 10.0))
    g.output("z", (x ** 2).sum(axis=1, keepdims=True) / x.shape[1])
    xv = np.arange(6, dtype=np.float64).reshape(2, 3) - 2.5
    out = mn.reference.evaluate(g, {"x": xv})
    assert relative_error(out["y"], 2.0 - xv * 3 + c.astype(np.float64) / (xv + 10.0)) < 1e-12
    assert relative_error(out["z"], (xv**2).sum(1, keepdims=True) / 3) < 1e-12


def test_reference_matches_numpy_on_composites():
    g = mn.Graph()
    x = g.input("x", [2, 4, 5])
    w = g.input("w", [5, 3])
    g.output("softmax", mn.softmax(x @ w, axis=-1))
    g.output("reshaped", x.reshape(2, -1).T)
    g.output("parts", mn.concat(mn.split(x, [2, 3], axis=2)[::-1], axis=2))
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 4, 5)).astype(np.float32)
    wv = rng.standard_normal((5, 3)).astype(np.float32)
    out = mn.reference.evaluate(g, {"x": xv, "w": wv})
    s = xv.astype(np.float64) @ wv
    e = np.exp(s - s.max(-1, keepdims=True))
    assert relative_error(out["softmax"], e / e.sum(-1, keepdims=True)) < 1e-12
    assert np.array_equal(out["reshaped"], xv.reshape(2, -1).T)
    assert np.array_equal(out["parts"], np.concatenate([xv[..., 2:], xv[..., :2]], axis=2))


def test_gradients_against_finite_differences():
    g = mn.Graph()
    x = g.input("x", [3, 4])
    w = g.parameter("w", [4, 2], mn.Init.normal(0.0, 1.0, seed=3))
    loss = mn.sum(mn.tanh(x @ w) ** 2)
    (dw,) = mn.gradients(loss, [w])
    g.output("loss", loss)
    g.output("dw", dw)
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((3, 4))
    wv = mn.reference.initial_parameters(g)["w"]
    dw_value = mn.reference.evaluate(g, {"x": xv, "w": wv})["dw"]
    h = 1e-6
    numeric = np.zeros_like(wv)
    for i in np.ndindex(wv.shape):
        up, down = wv.copy(), wv.copy()
        up[i] += h
        down[i] -= h
        numeric[i] = (mn.reference.evaluate(g, {"x": xv, "w": up})["loss"] -
                      mn.reference.evaluate(g, {"x": xv, "w": down})["loss"]) / (2 * h)
    assert relative_error(dw_value, numeric) < 1e-6


def test_initializers_are_deterministic():
    a = mn.Init.kaiming_uniform(seed=7).values([16, 8])
    b = mn.Init.kaiming_uniform(seed=7).values([16, 8])
    c = mn.Init.kaiming_uniform(seed=8).values([16, 8])
    assert a.shape == (16, 8) and a.dtype == np.float32
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    bound = np.sqrt(6.0 / 16)  # fan_in = shape[0] for [in, out] weights
    assert np.abs(a).max() <= bound


def test_bad_shapes_name_the_op_and_inputs():
    g = mn.Graph()
    a = g.input("a", [2, 3])
    b = g.input("b", [4, 5])
    with pytest.raises(mn.ShapeError, match="matmul") as e:
        a @ b
    assert isinstance(e.value, ValueError) and isinstance(e.value, mn.Error)
    with pytest.raises(mn.ShapeError, match="add"):
        a + b


def test_bad_dtypes_and_arguments_are_errors():
    g = mn.Graph()
    with pytest.raises(mn.Error, match="unknown dtype 'f64'"):
        g.input("x", [2], "f64")
    x = g.input("x", [2, 3])
    with pytest.raises(mn.Error, match="reduction 'avg'"):
        mn.mse_loss(x, x, reduction="avg")
    with pytest.raises(mn.Error, match="approximate='fast'"):
        mn.gelu(x, approximate="fast")
    with pytest.raises(mn.Error, match="no value until a session runs it"):
        if x > 0:
            pass
    with pytest.raises(mn.Error, match="'x'"):
        g.input("x", [1])


def test_a_graph_lives_as_long_as_its_tensors():
    def make():
        g = mn.Graph()
        return g.input("x", [2]) * 2.0

    y = make()
    import gc

    gc.collect()
    assert y.shape == (2,)
    assert "mul" in str(y.graph)


def test_indexing_follows_numpy():
    g = mn.Graph()
    x = g.input("x", [4, 5, 6])
    picks = {
        "a": (x[1], lambda v: v[1]),
        "b": (x[:, 1:4], lambda v: v[:, 1:4]),
        "c": (x[..., ::2], lambda v: v[..., ::2]),
        "d": (x[-1, :, None, 2], lambda v: v[-1, :, None, 2]),
        "e": (x[1:, -3:-1, 5], lambda v: v[1:, -3:-1, 5]),
    }
    for name, (t, _) in picks.items():
        g.output(name, t)
    xv = np.arange(120, dtype=np.float64).reshape(4, 5, 6)
    out = mn.reference.evaluate(g, {"x": xv})
    for name, (t, f) in picks.items():
        assert t.shape == f(xv).shape, name
        assert np.array_equal(out[name], f(xv)), name
    with pytest.raises(mn.IndexError, match="out of range for axis 0"):
        x[4]
    with pytest.raises(mn.Error, match="negative step"):
        x[::-1]
    with pytest.raises(mn.Error, match="4 indices for a tensor of rank 3"):
        x[0, 0, 0, 0]
