"""Whole models exported by torch.onnx (Debian's python3-torch and python3-torchvision) run by
`mn run` against onnxruntime (pinned in scripts/python-requirements.txt) on the same inputs:
torchvision's ResNet-18 and MobileNetV2 and a PyTorch TransformerEncoder, exported with
symbolic batch (and sequence) axes and run at other sizes than they were exported with; and
grid_sample against PyTorch itself."""

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
ort = pytest.importorskip("onnxruntime")

OPSET = 17


def mn_run(*args):
    return subprocess.run([os.environ["MN_CLI"], "run", *map(str, args)], capture_output=True, text=True)


def fixture_script():
    """tests/fixtures/onnx/make_onnx_fixtures.py, for its randomize()."""
    path = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "onnx" / "make_onnx_fixtures.py"
    spec = importlib.util.spec_from_file_location("onnx_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


randomize = fixture_script().randomize


def export(model, example, path, names, dynamic_axes):
    torch.onnx.export(model, example, str(path), opset_version=OPSET, input_names=[names[0]],
                      output_names=[names[1]], dynamic_axes=dynamic_axes)


def compare(tmp_path, model_path, input_name, x, output_name):
    np.save(tmp_path / "x.npy", x)
    run = mn_run(model_path, "--input", f"{input_name}=" + str(tmp_path / "x.npy"),
                 "--output-dir", tmp_path / "out", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    ours = np.load(tmp_path / "out" / f"{output_name}.npy")
    want = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"]).run(
        None, {input_name: x})[0]
    assert ours.shape == want.shape
    scale = np.abs(want).max()
    assert scale > 1e-2, "the model's output is too small to compare"
    np.testing.assert_allclose(ours, want, rtol=1e-3, atol=1e-4 * scale)
    return report


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_models_match_onnxruntime(tmp_path, name):
    torch.manual_seed(0)
    model = randomize(getattr(torchvision.models, name)(), 1)
    path = tmp_path / f"{name}.onnx"
    export(model, torch.randn(2, 3, 64, 64), path, ("input", "logits"),
           {"input": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}})
    x = np.random.default_rng(2).standard_normal((3, 3, 48, 48)).astype(np.float32)
    report = compare(tmp_path, path, "input", x, "logits")
    assert report["opset"] == OPSET
    assert report["outputs"]["logits"]["shape"] == [3, 1000]
    assert report["nodes"]["Conv"] > 10


def test_transformer_encoder_matches_onnxruntime(tmp_path):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, activation="gelu")
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    path = tmp_path / "encoder.onnx"
    export(model, torch.randn(2, 10, 64), path, ("tokens", "out"),
           {"tokens": {0: "batch", 1: "sequence"}, "out": {0: "batch", 1: "sequence"}})
    x = np.random.default_rng(3).standard_normal((3, 7, 64)).astype(np.float32)
    report = compare(tmp_path, path, "tokens", x, "out")
    # The shape arithmetic of the attention heads was evaluated while importing.
    assert report["nodes"]["Shape"] > 0 and report["specialized_inputs"] == []


def test_mn_run_refusals(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    path = tmp_path / "mlp.onnx"
    export(model, torch.randn(2, 4), path, ("x", "y"), {"x": {0: "n"}})
    np.save(tmp_path / "x.npy", np.ones((5, 4), np.float32))
    np.save(tmp_path / "ints.npy", np.ones((5, 4), np.int64))
    np.save(tmp_path / "wide.npy", np.ones((5, 6), np.float32))
    run = mn_run(path)
    assert run.returncode == 1 and "the model's input 'x' is not given" in run.stderr
    run = mn_run(path, "--input", "z=" + str(tmp_path / "x.npy"))
    assert run.returncode == 1 and "--input 'z': the model has no such input (its inputs: x)" in run.stderr
    run = mn_run(path, "--input", "x=" + str(tmp_path / "ints.npy"))
    assert run.returncode == 1 and "the file holds I64, the model input is F32" in run.stderr
    run = mn_run(path, "--input", "x=" + str(tmp_path / "wide.npy"))
    assert run.returncode == 1 and "input 'x' axis 1 is 4 in the model, not 6" in run.stderr
    run = mn_run(tmp_path / "x.npy", "--input", "x=" + str(tmp_path / "x.npy"))
    assert run.returncode == 1 and "not an ONNX model" in run.stderr
    run = mn_run(tmp_path, "--input", "x=" + str(tmp_path / "x.npy"))
    assert run.returncode == 1 and "is a directory, not an ONNX file" in run.stderr
    run = mn_run(path, "--input", "x")
    assert run.returncode == 1 and "--input 'x': expected NAME=FILE.npy" in run.stderr
    run = mn_run(path, "--input", "x=" + str(tmp_path / "x.npy"), "--input", "x=" + str(tmp_path / "x.npy"))
    assert run.returncode == 1 and "--input 'x' is given twice" in run.stderr
    run = mn_run(path, "--input", "x=" + str(tmp_path / "x.npy"), "--runs", "0")
    assert run.returncode == 1 and "--runs 0: expected an integer >= 1" in run.stderr
    run = mn_run(path, "--input", "x=" + str(tmp_path / "x.npy"), "--precision", "f64")
    assert run.returncode == 1 and "f64" in run.stderr
    # A float64 file for a FLOAT input is converted; the run succeeds.
    np.save(tmp_path / "x64.npy", np.ones((5, 4)))
    run = mn_run(path, "--input", "x=" + str(tmp_path / "x64.npy"), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["outputs"]["y"]["shape"] == [5, 3]


def test_an_imported_model_fine_tunes_as_pytorch_does(tmp_path):
    """Initializers are parameters: three SGD steps on the imported graph move the weights as
    PyTorch's three steps move the model it came from."""
    mn = pytest.importorskip("meganeura")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    path = tmp_path / "mlp.onnx"
    export(model, torch.randn(5, 4), path, ("x", "y"), None)
    imported = mn.onnx.load(path)
    assert set(imported.weights) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    g = imported.graph
    target = g.input("target", [5, 3])
    loss = mn.mse_loss(g.tensor("y"), target)
    opt = mn.optim.SGD(lr=0.1)
    mn.add_training_step(loss, opt)
    session = mn.Session(g)
    imported.load_weights(session)
    steps = mn.optim.Stepper(opt)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 4)).astype(np.float32)
    t = rng.standard_normal((5, 3)).astype(np.float32)
    torch_opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        session.set("x", x)
        session.set("target", t)
        steps.step(session)
        torch_opt.zero_grad()
        torch.nn.functional.mse_loss(model(torch.from_numpy(x)), torch.from_numpy(t)).backward()
        torch_opt.step()
    for name, p in model.state_dict().items():
        np.testing.assert_allclose(session.get(name), p.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_load_refusals(tmp_path):
    mn = pytest.importorskip("meganeura")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    path = tmp_path / "m.onnx"
    export(model, torch.randn(2, 4), path, ("x", "y"), {"x": {0: "n"}})
    with pytest.raises(mn.ShapeError, match="input 'x' axis 0 is symbolic"):
        mn.onnx.load(path)
    assert mn.onnx.load(path, input_shapes={"x": [7, 4]}).outputs[0]["shape"] == (7, 3)
    with pytest.raises(mn.Error, match="input_values names 'z'"):
        mn.onnx.load(path, input_shapes={"x": [7, 4]}, input_values={"z": np.zeros(2)})
    assert "Conv" in mn.onnx.supported_ops()


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_bidirectional_recurrent_layers_match_onnxruntime(tmp_path, kind):
    """torch's LSTM and GRU (two layers, bidirectional, batch first) export as ONNX LSTM/GRU
    nodes with both directions."""
    torch.manual_seed(5)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(6, 8, num_layers=2, batch_first=True, bidirectional=True)

        def forward(self, x):
            return self.rnn(x)[0]

    path = tmp_path / f"{kind}.onnx"
    export(Net().eval(), torch.randn(2, 5, 6), path, ("x", "y"), None)
    x = np.random.default_rng(6).standard_normal((2, 5, 6)).astype(np.float32)
    report = compare(tmp_path, path, "x", x, "y")
    assert report["nodes"][kind] == 2


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [False, True])
def test_grid_sample_matches_pytorch(tmp_path, mode, padding, align):
    """torch's grid_sample (exported as GridSample, opset 16) against torch itself, with grid
    points inside and outside [-1, 1] (the node suite covers a few of these combinations)."""

    class Net(torch.nn.Module):
        def forward(self, x, grid):
            return torch.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=padding,
                                                   align_corners=align)

    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 6, 2)).astype(np.float32)
    path = tmp_path / "grid_sample.onnx"
    torch.onnx.export(Net(), (torch.from_numpy(x), torch.from_numpy(grid)), str(path),
                      opset_version=16, input_names=["x", "grid"], output_names=["y"])
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "grid.npy", grid)
    run = mn_run(path, "--input", f"x={tmp_path / 'x.npy'}", "--input",
                 f"grid={tmp_path / 'grid.npy'}", "--output-dir", tmp_path / "out")
    assert run.returncode == 0, run.stderr
    want = Net()(torch.from_numpy(x), torch.from_numpy(grid)).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-4, atol=1e-5)
