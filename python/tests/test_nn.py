"""nn modules from Python: PyTorch's state_dict keys, a PyTorch-saved checkpoint loaded into a
Python-defined network (tests/fixtures/nn, made by make_nn_fixtures.py), strict loading."""

import numpy as np
import pytest

import meganeura as mn
from conftest import FIXTURES, relative_error

NN = FIXTURES / "nn"


class SmallCnn(mn.nn.Module):
    """make_nn_fixtures.py's SmallCnn, written with our modules."""

    def __init__(self):
        super().__init__("SmallCnn")
        self.conv = mn.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = mn.nn.BatchNorm2d(4)
        self.fc = mn.nn.Linear(4 * 4 * 4, 5)

    def forward(self, x):
        h = mn.max_pool2d(mn.relu(self.bn(self.conv(x))), 2)
        return self.fc(h.flatten(1))


class Scale(mn.nn.Module):
    """A module with a parameter of its own."""

    def __init__(self, n):
        super().__init__("Scale")
        self.register_parameter("gain", [n], mn.Init.ones())

    def forward(self, x):
        return x * self.tensor(x.graph, "gain")


def test_pytorch_checkpoint_gives_pytorch_outputs():
    io = mn.data.load_safetensors(NN / "cnn_io.safetensors")
    net = SmallCnn().eval()
    g = mn.Graph()
    g.output("y", net(g.input("x", io["x"].shape)))
    s = mn.Session(g)
    net.load_state_dict(s, NN / "cnn.safetensors")
    s["x"] = io["x"]
    s.step()
    assert relative_error(s["y"], io["eval0"]) < 1e-4


def test_conv1d_stem_gives_pytorch_outputs():
    """Whisper's encoder stem (make_nn_fixtures.py's conv1d case) from PyTorch's state_dict, and
    mn.conv1d with groups against a direct computation."""
    io = mn.data.load_safetensors(NN / "conv1d_io.safetensors")
    stem = mn.nn.Sequential(mn.nn.Conv1d(4, 6, 3, padding=1), mn.nn.GELU(),
                            mn.nn.Conv1d(6, 6, 3, stride=2, padding=1), mn.nn.GELU())
    g = mn.Graph()
    x = g.input("x", io["x"].shape)
    g.output("y", stem(x))
    g.output("z", mn.conv1d(x, g.input("w", [4, 2, 2]), padding=1, groups=2))
    bad = mn.Graph()
    with pytest.raises(mn.ShapeError, match="divisible by groups"):
        mn.conv1d(bad.input("x", [2, 4, 10]), bad.input("w", [5, 2, 2]), groups=2)
    s = mn.Session(g)
    stem.load_state_dict(s, NN / "conv1d.safetensors")
    xs = np.asarray(io["x"], dtype=np.float64)
    w = np.linspace(-1, 1, 16).reshape(4, 2, 2)
    s["x"] = io["x"]
    s["w"] = w
    s.step()
    assert relative_error(s["y"], io["eval0"]) < 1e-4
    padded = np.pad(xs, ((0, 0), (0, 0), (1, 1)))
    want = np.zeros((2, 4, 11))
    for o in range(4):
        group = o // 2
        for c in range(2):
            for j in range(2):
                want[:, o, :] += w[o, c, j] * padded[:, group * 2 + c, j:j + 11]
    assert relative_error(s["z"], want) < 1e-5


def test_keys_follow_pytorch():
    net = mn.nn.Sequential(mn.nn.Linear(6, 8), mn.nn.ReLU(), Scale(8), mn.nn.BatchNorm2d(3))
    keys = net.state_keys()
    assert keys == ["0.weight", "0.bias", "2.gain", "3.weight", "3.bias", "3.running_mean",
                    "3.running_var", "3.num_batches_tracked"]
    assert [k for k, _, _ in net.named_parameters()] == keys[:5]
    assert net.named_parameters()[0][1] == (8, 6)
    assert isinstance(net[0], mn.nn.Linear) and net[0].out_features == 8
    cnn = SmallCnn()
    assert isinstance(cnn.conv, mn.nn.Conv2d)
    assert cnn.fc.path == "fc"


def test_python_children_survive_without_python_references():
    net = mn.nn.Sequential(Scale(3), Scale(3))
    import gc

    gc.collect()
    g = mn.Graph()
    g.output("y", net(g.input("x", [2, 3])))
    s = mn.Session(g)
    s["x"] = np.ones((2, 3))
    s["0.gain"] = np.full(3, 2.0)
    s["1.gain"] = np.full(3, 3.0)
    s.step()
    assert np.array_equal(s["y"], np.full((2, 3), 6.0))


def test_state_dict_round_trip_and_strict_errors(scratch):
    net = mn.nn.Sequential(mn.nn.Linear(3, 2), mn.nn.LayerNorm(2))
    g = mn.Graph()
    g.output("y", net(g.input("x", [1, 3])))
    s = mn.Session(g)
    state = net.state_dict(s)
    assert sorted(state) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    path = scratch / "net.safetensors"
    net.save_state_dict(s, path)
    state["0.weight"] = state["0.weight"] * 3
    net.load_state_dict(s, state)
    assert relative_error(net.state_dict(s)["0.weight"], state["0.weight"]) < 1e-7
    net.load_state_dict(s, path)
    assert relative_error(net.state_dict(s)["0.weight"], state["0.weight"] / 3) < 1e-6
    missing = dict(state)
    del missing["1.bias"]
    missing["extra"] = np.zeros(2)
    with pytest.raises(mn.Error, match="1.bias") as e:
        net.load_state_dict(s, missing)
    assert "extra" in str(e.value)
    wrong = dict(state)
    wrong["0.weight"] = np.zeros((3, 2))
    with pytest.raises(mn.Error, match="0.weight"):
        net.load_state_dict(s, wrong)
    with pytest.raises(mn.FormatError, match="missing.safetensors"):
        net.load_state_dict(s, scratch / "missing.safetensors")


def test_module_arguments_are_checked():
    with pytest.raises(mn.Error, match="approximate='fast'"):
        mn.nn.GELU("fast")
    with pytest.raises(mn.Error, match="activation='swish'"):
        mn.nn.TransformerBlock(8, 2, activation="swish")
    with pytest.raises(mn.Error, match="kernel_size"):
        mn.nn.Conv2d(1, 2, [3, 3, 3])


def test_padding_idx_and_key_padding_mask_follow_pytorch():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    # Embedding: a loaded, nonzero padding row is read as it is and gets no gradient.
    ref = torch.nn.Embedding(7, 4, padding_idx=-5)
    with torch.no_grad():
        ref.weight[2] = 0.5
    idx = np.array([[2, 0, 5], [2, 2, 6]], np.int32)
    w = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    emb = mn.nn.Embedding(7, 4, padding_idx=-5)
    assert emb.padding_idx == 2
    g = mn.Graph()
    out = emb(g.input("i", [2, 3], mn.i32))
    g.output("out", out)
    mn.add_training_step(mn.sum(out * w), mn.optim.SGD(0.1), output_gradients=True)
    s = mn.Session(g)
    emb.load_state_dict(s, {"weight": ref.weight.detach()})
    s["i"] = idx
    mn.optim.Stepper(mn.optim.SGD(0.1)).step(s)
    theirs = ref(torch.from_numpy(idx).long())
    (theirs * torch.from_numpy(w)).sum().backward()
    assert relative_error(s["out"], theirs.detach().numpy()) < 1e-6
    np.testing.assert_array_equal(s["grad/weight"][2], np.zeros(4, np.float32))
    assert relative_error(s["grad/weight"], ref.weight.grad.numpy()) < 1e-6

    # MultiheadAttention: PyTorch's bool key_padding_mask as integers.
    mha_ref = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(2, 3, 8)
    y = torch.randn(2, 5, 8)
    pad = np.array([[0, 0, 0, 1, 1], [1, 0, 0, 0, 0]], np.int32)
    expected = mha_ref(x, y, y, key_padding_mask=torch.from_numpy(pad).bool(),
                       need_weights=False)[0]
    mha = mn.nn.MultiheadAttention(8, 2)
    g = mn.Graph()
    q, kv = g.input("x", [2, 3, 8]), g.input("y", [2, 5, 8])
    g.output("o", mha(q, kv, kv, key_padding_mask=g.input("pad", [2, 5], mn.i32)))
    s = mn.Session(g)
    mha.load_state_dict(s, mha_ref.state_dict())
    s["x"], s["y"], s["pad"] = x.numpy(), y.numpy(), pad
    s.step()
    assert relative_error(s["o"], expected.detach().numpy()) < 1e-5


def test_whisper_features_from_python():
    """read_wav and log_mel_spectrogram give the C++ results (tests/fixtures/audio)."""
    samples, rate, channels = mn.data.read_wav(FIXTURES / "audio" / "speech_16k.wav")
    assert (rate, channels, samples.shape, samples.dtype) == (16000, 1, (32869,), np.float32)
    mel = mn.data.log_mel_spectrogram(samples, rate, n_mels=128, pad_to_samples=0)
    want = np.load(FIXTURES / "audio" / "mel128.npy")
    assert mel.shape == want.shape and np.abs(mel - want).max() < 1e-4
    with pytest.raises(mn.Error, match="44100 Hz"):
        mn.data.log_mel_spectrogram(samples, 44100)
    positions = mn.Init.sinusoids().values([4, 8])
    assert np.allclose(positions[:, 0], np.sin(np.arange(4)))
    assert np.allclose(positions[:, 4], np.cos(np.arange(4)))
