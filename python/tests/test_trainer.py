"""The Trainer from Python: PyTorch's trajectory for a Python-defined model fed from a
TensorDataset, metrics (built-in and Python functions), callbacks that stop the run, progress as
JSON lines, exact resume from a checkpoint, and refusals raised as Python exceptions."""

import json

import numpy as np
import pytest

import meganeura as mn
from conftest import relative_error


class Mlp(mn.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = mn.nn.Linear(6, 8)
        self.fc2 = mn.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(mn.relu(self.fc1(x)))


def classes_data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 6)).astype(np.float32)
    return x, np.argmax(x[:, :3], axis=1).astype(np.int64)


def model(batch, net=None):
    net = net or Mlp().seed(5)
    g = mn.Graph()
    logits = net(g.input("x", [batch, 6]))
    g.output("logits", logits)
    return net, g, mn.cross_entropy(logits, g.input("y", [batch], mn.i32))


def test_trainer_follows_pytorch_on_the_same_batches():
    torch = pytest.importorskip("torch")
    x, y = classes_data(24, 1)
    data = mn.data.TensorDataset({"x": x, "y": y})
    net, g, loss = model(6)
    losses = []
    trainer = mn.Trainer(loss, optimizer=mn.optim.SGD(0.2, momentum=0.9, nesterov=True),
                         epochs=3, shuffle=False, progress="none",
                         callbacks=[lambda e: e.kind == "step" and losses.append(e.loss)])
    torch.manual_seed(0)
    reference = torch.nn.Sequential()
    reference.add_module("fc1", torch.nn.Linear(6, 8))
    reference.add_module("relu", torch.nn.ReLU())
    reference.add_module("fc2", torch.nn.Linear(8, 3))
    net.load_state_dict(trainer.session, reference.state_dict())
    history = trainer.fit(data)
    opt = torch.optim.SGD(reference.parameters(), lr=0.2, momentum=0.9, nesterov=True)
    theirs = []
    for _ in range(3):
        for i in range(0, 24, 6):
            opt.zero_grad()
            out = torch.nn.functional.cross_entropy(reference(torch.from_numpy(x[i:i + 6])),
                                                    torch.from_numpy(y[i:i + 6]))
            out.backward()
            opt.step()
            theirs.append(out.item())
    assert relative_error(losses, theirs) < 1e-4
    assert history.steps == 12
    assert [e.epoch for e in history.epochs] == [0, 1, 2]
    assert history.epochs[2].metrics["loss"] == pytest.approx(np.mean(losses[8:]), rel=1e-12)
    assert losses[-1] < losses[0]


def test_metrics_callbacks_and_json_progress(capfd):
    x, y = classes_data(16, 2)
    tx, ty = classes_data(10, 3)
    train = mn.data.TensorDataset({"x": x, "y": y})
    test = mn.data.TensorDataset({"x": tx, "y": ty})
    net, g, loss = model(4)
    _, eval_graph, eval_loss = model(4, net.eval())
    eval_graph.output("loss", eval_loss)
    net.train()

    def logit_mean(rows, batch_size, outputs, columns):
        return float(outputs["logits"][:rows].sum()), rows * 3

    seen = []

    def stop_at_six(event):
        seen.append((event.kind, event.global_step))
        event.stop = event.global_step == 6

    trainer = mn.Trainer(loss, optimizer=mn.optim.AdamW(0.05), epochs=3, eval_graph=eval_graph,
                         pad_values={"y": -100},
                         metrics=[mn.Metric.accuracy("logits", "y")],
                         eval_metrics=[mn.Metric.accuracy("logits", "y"),
                                       mn.Metric("logit_mean", ["logits"], logit_mean)],
                         progress="json", log_every=2, callbacks=[stop_at_six])
    history = trainer.fit(train, test)
    assert history.stopped and history.steps == 6
    assert seen[:6] == [("step", 1), ("step", 2), ("step", 3), ("step", 4), ("evaluation", 4),
                        ("epoch_end", 4)]
    assert seen[-1] == ("step", 6)
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines()]
    assert [(j["event"], j["global_step"]) for j in lines] == [
        ("step", 2), ("step", 4), ("evaluation", 4), ("epoch_end", 4), ("step", 6)]
    # The evaluation equals NumPy's over the 10 test samples (3 batches, the last padded).
    w = {name: trainer.session.get(name) for name in trainer.session.parameter_names}
    logits = np.maximum(tx @ w["fc1.weight"].T + w["fc1.bias"], 0) @ w["fc2.weight"].T + w["fc2.bias"]
    metrics = trainer.evaluate(test)
    assert metrics["accuracy"] == np.mean(np.argmax(logits, axis=1) == ty)
    assert metrics["logit_mean"] == pytest.approx(logits.mean(), rel=1e-5)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    assert metrics["loss"] == pytest.approx(-log_p[np.arange(10), ty].mean(), rel=1e-5)


def test_checkpoints_resume_exactly(tmp_path):
    x, y = classes_data(20, 4)
    data = mn.data.TensorDataset({"x": x, "y": y})
    _, _, loss = model(5)
    whole = mn.Trainer(loss, optimizer=mn.optim.Adam(0.05), epochs=2, progress="none")
    whole.fit(data)
    _, _, loss = model(5)
    path = str(tmp_path / "run.safetensors")
    mn.Trainer(loss, optimizer=mn.optim.Adam(0.05), epochs=2, progress="none", max_steps=5,
               checkpoint=path).fit(data)
    _, _, loss = model(5)
    resumed = mn.Trainer(loss, optimizer=mn.optim.Adam(0.05), epochs=2, progress="none",
                         resume=path)
    assert resumed.fit(data).steps == 8
    for name in whole.session.parameter_names:
        np.testing.assert_array_equal(resumed.session.get(name), whole.session.get(name))


def test_data_and_refusals(tmp_path):
    x = np.arange(12, dtype=np.float64).reshape(6, 2)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.arange(6, dtype=np.int64))
    d = mn.data.TensorDataset.from_npy({"x": str(tmp_path / "x.npy"), "y": str(tmp_path / "y.npy")})
    assert len(d) == 6 and d.names == ["x", "y"]
    assert d.column("x").dtype == np.float32 and d.column("y").dtype == np.int32
    np.testing.assert_array_equal(d.slice(2, 2).column("x"), x[2:4])
    with pytest.raises(mn.ShapeError, match="'z' has 5 samples"):
        d.add("z", np.zeros(5, np.float32))
    with pytest.raises(mn.Error, match="outside the range of i32"):
        mn.data.TensorDataset({"y": np.array([2**40])})

    _, _, loss = model(4)
    with pytest.raises(mn.Error, match="epochs is 0"):
        mn.Trainer(loss, optimizer=mn.optim.SGD(0.1), epochs=0)
    with pytest.raises(mn.Error, match="progress='fancy'"):
        mn.Trainer(loss, optimizer=mn.optim.SGD(0.1), progress="fancy")
    trainer = mn.Trainer(loss, optimizer=mn.optim.SGD(0.1), progress="none")
    with pytest.raises(mn.Error, match="input 'x' has no column"):
        trainer.fit(mn.data.TensorDataset({"inputs": np.zeros((8, 6), np.float32),
                                           "y": np.zeros(8, np.int32)}))
    with pytest.raises(mn.Error, match="drop_last"):
        trainer.fit(mn.data.TensorDataset({"x": np.zeros((6, 6), np.float32),
                                           "y": np.zeros(6, np.int32)}))
