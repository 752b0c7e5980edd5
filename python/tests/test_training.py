"""Models defined in Python train to PyTorch's losses (Debian's CPU PyTorch as the reference):
the same initial weights (copied from torch into the session by state_dict key), the same
batch, the same optimizer."""

import numpy as np
import pytest

import meganeura as mn
from conftest import relative_error

torch = pytest.importorskip("torch")


class Mlp(mn.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = mn.nn.Linear(20, 16)
        self.fc2 = mn.nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(mn.relu(self.fc1(x)))


class TorchMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 16)
        self.fc2 = torch.nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Cnn(mn.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = mn.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = mn.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = mn.max_pool2d(mn.relu(self.conv(x)), 2)
        return self.fc(h.flatten(1))


class TorchCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(h.flatten(1))


def trajectories(net, make_reference, optimizer, torch_optimizer, input_shape, classes, steps):
    """Losses of `steps` training steps of ours and of torch's, from the same weights, on one
    fixed batch (so that the loss must fall)."""
    torch.manual_seed(0)
    reference = make_reference()
    batch = input_shape[0]
    g = mn.Graph()
    x = g.input("x", input_shape)
    y = g.input("y", [batch], mn.i32)
    loss = mn.cross_entropy(net(x), y)
    mn.add_training_step(loss, optimizer)
    session = mn.Session(g)
    net.load_state_dict(session, reference.state_dict())
    stepper = mn.optim.Stepper(optimizer)
    opt = torch_optimizer(reference.parameters())
    rng = np.random.default_rng(1)
    xb = rng.standard_normal(input_shape).astype(np.float32)
    yb = rng.integers(0, classes, size=batch)
    ours, theirs = [], []
    for _ in range(steps):
        session["x"] = xb
        session["y"] = yb
        stepper.step(session)
        ours.append(float(session["loss"]))
        opt.zero_grad()
        torch_loss = torch.nn.functional.cross_entropy(reference(torch.from_numpy(xb)),
                                                       torch.from_numpy(yb))
        torch_loss.backward()
        opt.step()
        theirs.append(torch_loss.item())
    params = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
    return np.array(ours), np.array(theirs), net.state_dict(session), params


def test_mlp_trains_as_pytorch_with_adamw():
    opt = mn.optim.AdamW(lr=1e-2, weight_decay=0.1)
    ours, theirs, ours_params, torch_params = trajectories(
        Mlp(), TorchMlp, opt,
        lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1), [8, 20], 5, steps=12)
    assert relative_error(ours, theirs) < 1e-4, (ours, theirs)
    assert ours[-1] < ours[0]
    for key, value in torch_params.items():
        assert relative_error(ours_params[key], value, floor=1e-2) < 1e-3, key


def test_cnn_trains_as_pytorch_with_sgd_momentum():
    opt = mn.optim.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)
    ours, theirs, ours_params, torch_params = trajectories(
        Cnn(), TorchCnn, opt,
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True),
        [6, 1, 8, 8], 3, steps=10)
    assert relative_error(ours, theirs) < 1e-4, (ours, theirs)
    assert ours[-1] < ours[0]
    for key, value in torch_params.items():
        assert relative_error(ours_params[key], value, floor=1e-2) < 1e-3, key


def test_schedule_and_accumulation_follow_the_stepper():
    sched = mn.optim.LrSchedule("cosine", warmup=2)
    opt = mn.optim.Adam(lr=0.1, schedule=sched, accumulate=2)
    stepper = mn.optim.Stepper(opt, total_updates=10)
    assert stepper.lr == pytest.approx(sched.lr_at(0.1, 0, 10))
    g = mn.Graph()
    w = g.parameter("w", [3], mn.Init.ones())
    mn.add_training_step(mn.sum(w * w), opt)
    s = mn.Session(g)
    stepper.step(s)  # first micro-batch: accumulated, no update
    assert np.array_equal(s["w"], np.ones(3))
    stepper.step(s)
    assert stepper.updates == 1 and stepper.micro_batches == 2
    assert (s["w"] < 1).all()


def test_bad_hyperparameters_name_the_field():
    with pytest.raises(mn.Error, match="beta1"):
        mn.optim.Adam(beta1=1.0)
    with pytest.raises(mn.Error, match="lr"):
        mn.optim.SGD(lr=float("nan"))
    with pytest.raises(mn.Error, match="'warm'"):
        mn.optim.LrSchedule("warm")
