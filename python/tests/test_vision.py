"""ResNets in torchvision's layout against torchvision itself (Debian's python3-torchvision,
random weights made at test time): the same state_dict keys and shapes, and a torchvision
state_dict loaded by name gives torchvision's logits in evaluation, and in training its logits,
gradients and updated batch-norm statistics."""

import numpy as np
import pytest

import meganeura as mn
from conftest import relative_error

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")


def torchvision_resnet(depth, seed, **kwargs):
    """A torchvision ResNet with every batch norm moved off its defaults, so that loading (and
    its running statistics) is visible."""
    torch.manual_seed(seed)
    ref = getattr(torchvision.models, f"resnet{depth}")(**kwargs)
    with torch.no_grad():
        for m in ref.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return ref


@pytest.mark.parametrize("depth", [18, 34, 50, 101])
def test_keys_and_shapes_are_torchvisions(depth):
    ref = getattr(torchvision.models, f"resnet{depth}")(num_classes=7)
    net = mn.vision.resnet(depth, num_classes=7)
    assert net.state_keys() == list(ref.state_dict().keys())
    ours = {k: tuple(shape) for k, shape, _ in net.named_parameters()}
    assert ours == {k: tuple(p.shape) for k, p in ref.named_parameters()}
    assert mn.vision.resnet("resnet50").state_keys() == list(
        torchvision.models.resnet50().state_dict().keys())


@pytest.mark.parametrize("depth", [18, 50])
def test_evaluation_gives_torchvisions_logits(depth):
    ref = torchvision_resnet(depth, depth, num_classes=10).eval()
    x = np.random.default_rng(depth).standard_normal((2, 3, 64, 64)).astype(np.float32)
    expected = ref(torch.from_numpy(x)).detach().numpy()
    net = mn.vision.resnet(depth, num_classes=10).eval()
    g = mn.Graph()
    g.output("logits", net(g.input("x", [2, 3, 64, 64])))
    s = mn.Session(g)
    net.load_state_dict(s, ref.state_dict())
    s["x"] = x
    s.step()
    assert relative_error(s["logits"], expected) < 1e-3


def test_training_gives_torchvisions_gradients_and_statistics():
    ref = torchvision_resnet(18, 3, num_classes=5)
    # The small-image stem: a 3x3 stride-1 conv1 and no max pool, as mn's small_input_stem.
    ref.conv1 = torch.nn.Conv2d(1, 64, 3, 1, 1, bias=False)
    ref.maxpool = torch.nn.Identity()
    ref.train()
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 1, 12, 12)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    net = mn.vision.resnet(18, num_classes=5, in_channels=1, small_input_stem=True)
    g = mn.Graph()
    logits = net(g.input("x", [4, 1, 12, 12]))
    g.output("logits", logits)
    mn.add_training_step(mn.sum(logits * w), mn.optim.SGD(0.1), output_gradients=True)
    s = mn.Session(g)
    net.load_state_dict(s, ref.state_dict())
    s["x"] = x
    mn.optim.Stepper(mn.optim.SGD(0.1)).step(s)
    out = ref(torch.from_numpy(x))
    (out * torch.from_numpy(w)).sum().backward()
    assert relative_error(s["logits"], out.detach().numpy()) < 1e-3
    for name in ("fc.weight", "layer4.1.bn2.weight", "layer2.0.downsample.0.weight", "conv1.weight"):
        grad = dict(ref.named_parameters())[name].grad.numpy()
        assert relative_error(s[f"grad/{name}"], grad, floor=1e-2) < 2e-3, name
    buffers = dict(ref.named_buffers())
    for name in ("bn1.running_mean", "layer3.1.bn1.running_var"):
        assert relative_error(s[name], buffers[name].numpy()) < 1e-4, name
    assert int(s["bn1.num_batches_tracked"]) == 1


def test_bad_configurations_are_errors():
    with pytest.raises(mn.Error, match="depth 20"):
        mn.vision.resnet(20)
    with pytest.raises(mn.Error, match="resnet18, resnet34"):
        mn.vision.resnet("resnet20")
    with pytest.raises(mn.Error, match="num_classes 0"):
        mn.vision.resnet(18, num_classes=0)
    net = mn.vision.resnet(18)
    with pytest.raises(mn.ShapeError, match=r"images \[N, C, H, W\]"):
        net(mn.Graph().input("x", [3, 224, 224]))
