"""Python-defined classifiers train to the losses of the C++ API: the MLP and the CNN of
`mn train` (nn modules named fc1, fc2, conv1, conv2, so the same seed gives the same initial
weights), fed the same batches by mn.data.DataLoader (the order the C++ trainer draws), with
the same optimizer, against the final loss `mn train --json` prints."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import meganeura as mn
from conftest import REPO, relative_error

SAMPLES = 640  # ten full batches of 64: no padded batch


def cli():
    path = pathlib.Path(os.environ.get("MN_CLI", REPO / "build" / "bin" / "mn"))
    assert path.exists(), f"the mn command is not at {path} (set MN_CLI)"
    return path


class Mlp(mn.nn.Module):
    def __init__(self):
        super().__init__("Mlp")
        self.fc1 = mn.nn.Linear(784, 128)
        self.fc2 = mn.nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(mn.relu(self.fc1(x)))


class Cnn(mn.nn.Module):
    def __init__(self):
        super().__init__("Cnn")
        self.conv1 = mn.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = mn.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = mn.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = mn.nn.Linear(128, 10)

    def forward(self, x):
        h = mn.max_pool2d(mn.relu(self.conv1(x)), 2)
        h = mn.max_pool2d(mn.relu(self.conv2(h)), 2)
        return self.fc2(mn.relu(self.fc1(h.flatten(1))))


def python_losses(net, layout, lr):
    images, labels = mn.data.load_fashion_mnist("train", layout=layout, max_samples=SAMPLES)
    loader = mn.data.DataLoader(images, labels, batch_size=64, seed=0, classes=10)
    g = mn.Graph()
    x = g.input("x", [64] + list(images.shape[1:]))
    y = g.input("y", [64], mn.i32)
    opt = mn.optim.Adam(lr=lr)
    mn.add_training_step(mn.cross_entropy(net.seed(0)(x), y), opt)
    session = mn.Session(g)
    stepper = mn.optim.Stepper(opt)
    losses = []
    for _ in range(loader.batches_per_epoch):
        batch = loader.next()
        session["x"], session["y"] = batch["inputs"], batch["labels"]
        stepper.step(session)
        losses.append(float(session["loss"]))
    return losses


@pytest.mark.parametrize("model,net,layout,lr", [("mlp", Mlp, "flat", 1e-3),
                                                ("cnn", Cnn, "nchw", 2e-3)])
def test_python_training_equals_mn_train(model, net, layout, lr):
    out = subprocess.run([str(cli()), "train", "--model", model, "--limit", str(SAMPLES),
                          "--epochs", "1", "--json"], check=True, capture_output=True, text=True)
    cxx = json.loads(out.stdout.strip().splitlines()[-1])
    assert cxx["steps"] == SAMPLES // 64
    ours = python_losses(net(), layout, lr)
    assert relative_error(np.mean(ours), cxx["final_loss"]) < 1e-5, (np.mean(ours), cxx)


def test_loader_order_is_the_seeds():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10) % 3
    a = mn.data.DataLoader(x, y, batch_size=4, seed=5)
    b = mn.data.DataLoader(x, y, batch_size=4, seed=5)
    assert a.batches_per_epoch == 3
    first = [a.next() for _ in range(3)]
    assert [len(f["labels"]) for f in first] == [4, 4, 2]
    assert sorted(np.concatenate([f["indices"] for f in first]).tolist()) == list(range(10))
    assert np.array_equal(first[0]["inputs"][:, 0], np.array(first[0]["indices"], np.float32))
    assert a.position == (1, 0)
    assert b.epoch_order(0) == a.epoch_order(0) != a.epoch_order(1)
    with pytest.raises(mn.ShapeError, match="labels"):
        mn.data.DataLoader(x, y[:5])
    with pytest.raises(mn.Error, match="outside the range"):
        mn.data.DataLoader(x, y + 2**40)
