"""Sessions from Python: values against the reference, NumPy in and out, errors by name."""

import numpy as np
import pytest

import meganeura as mn
from conftest import relative_error


def small_graph():
    g = mn.Graph()
    x = g.input("x", [4, 3])
    w = g.parameter("w", [3, 5], mn.Init.normal(0.0, 1.0, seed=2))
    b = g.parameter("b", [5], mn.Init.uniform(-1.0, 1.0, seed=3))
    h = mn.relu(x @ w + b)
    g.output("h", h)
    g.output("best", mn.argmax(h, axis=1))
    return g


def test_outputs_equal_the_reference():
    g = small_graph()
    s = mn.Session(g)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    s.set("x", x)
    s.step()
    expected = mn.reference.evaluate(g, {"x": x})
    h = s.get("h")
    assert h.dtype == np.float32 and h.shape == (4, 5)
    assert relative_error(h, expected["h"]) < 1e-5
    best = s["best"]
    assert best.dtype == np.int32
    assert np.array_equal(best, expected["best"])
    assert s.device_name
    assert s.input_names == ["x"] and sorted(s.parameter_names) == ["b", "w"]
    assert s.type_of("w") == ((3, 5), mn.f32)
    assert s.memory().arena_bytes > 0


def test_parameters_set_and_read_back():
    s = mn.Session(small_graph())
    w = np.arange(15, dtype=np.float64).reshape(3, 5) / 7
    s["w"] = w  # float64 converted to the parameter's f32
    assert relative_error(s["w"], w) < 1e-7
    s.set("x", np.ones((4, 3), dtype=np.float32))
    s.set("b", np.zeros(5))
    s.step()
    assert relative_error(s["h"], np.ones((4, 3)) @ w) < 1e-6


def test_bad_values_are_named_errors():
    s = mn.Session(small_graph())
    with pytest.raises(mn.ShapeError, match=r"'x'.*expected shape \(4, 3\).*got \(3, 4\)"):
        s.set("x", np.zeros((3, 4), dtype=np.float32))
    with pytest.raises(mn.Error, match="nope"):
        s.set("nope", np.zeros(3))
    with pytest.raises(mn.Error, match="nope"):
        s.get("nope")
    with pytest.raises(mn.Error, match="expected numbers"):
        s.set("x", np.full((4, 3), "a"))


def test_integer_inputs_are_checked_not_truncated():
    g = mn.Graph()
    labels = g.input("labels", [3], mn.i32)
    g.output("twice", labels + labels)
    s = mn.Session(g)
    s.set("labels", np.array([1, 2, 3], dtype=np.int64))
    s.step()
    assert s["twice"].tolist() == [2, 4, 6]
    with pytest.raises(mn.Error, match="non-integral value 1.5"):
        s.set("labels", np.array([1.5, 2, 3]))
    with pytest.raises(mn.Error, match="outside the range of i32"):
        s.set("labels", np.array([1, 2, 2**40]))


def test_a_bad_index_on_the_device_raises_index_error():
    g = mn.Graph()
    table = g.parameter("table", [4, 2], mn.Init.ones())
    ids = g.input("ids", [3], mn.i32)
    g.output("rows", mn.take(table, ids))
    s = mn.Session(g)
    s.set("ids", np.array([0, 7, 1], dtype=np.int32))
    with pytest.raises(mn.IndexError, match="7") as e:
        s.step()
    assert isinstance(e.value, IndexError)
    s.set("ids", np.array([0, 3, 1], dtype=np.int32))
    s.submit()
    s.wait()
    assert np.array_equal(s["rows"], np.ones((3, 2)))


def test_programs_share_parameters():
    counter = mn.Graph()
    c = counter.state("count", [2], mn.Init.zeros())
    counter.assign(c, c + 1.0)
    counter.output("before", c * 1.0)
    reader = mn.Graph()
    r = reader.state("count", [2], mn.Init.zeros())
    reader.output("scaled", r * 10.0)
    s = mn.Session({"count": counter, "read": reader})
    assert sorted(s.program_names) == ["count", "read"]
    s.step("count")
    s.step("count")
    s.step("read")
    assert s.get("scaled").tolist() == [20.0, 20.0]
    assert s.get("count").tolist() == [2.0, 2.0]


def test_bad_session_options_are_errors():
    with pytest.raises(mn.Error, match="precision"):
        mn.Session(small_graph(), precision="i32")
    with pytest.raises(mn.Error, match="expected a Graph"):
        mn.Session(42)


def test_dlpack_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    g = mn.Graph()
    g.output("y", g.input("x", [2, 3]) * 2.0)
    s = mn.Session(g)
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    s.set("x", t)  # read through DLPack, in place
    s.step()
    y = s.get("y")
    back = torch.from_dlpack(y)  # NumPy's __dlpack__: the same memory
    assert back.data_ptr() == y.ctypes.data
    assert torch.equal(back, t * 2)
    s.set("x", torch.ones(2, 3, dtype=torch.float64))  # converted like any float64 array
    s.step()
    np.testing.assert_array_equal(s.get("y"), np.full((2, 3), 2, np.float32))
    with pytest.raises(mn.Error, match="DLPack"):
        s.set("x", torch.ones(2, 3, requires_grad=True))


def test_memory_budget_refuses_a_larger_arena_saying_what_fills_it():
    g = small_graph()
    with pytest.raises(mn.Error, match="over its memory budget.*parameters and states"):
        mn.Session(g, memory_budget_bytes=16)
    s = mn.Session(g, memory_budget_bytes=1 << 30)
    assert s.memory().arena_bytes <= 1 << 30
    with pytest.raises(mn.Error, match="must be positive"):
        mn.Session(g, memory_budget_bytes=0)
