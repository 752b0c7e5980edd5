"""meganeura: train and run neural networks on any Vulkan GPU.

Describe a model as a graph, and meganeura differentiates it, optimizes it by e-graph equality
saturation, generates its GPU kernels and runs a whole training step as one GPU submission::

    import numpy as np
    import meganeura as mn

    g = mn.Graph()
    x = g.input("x", [64, 784])
    y = g.input("y", [64], mn.i32)
    net = mn.nn.Sequential(mn.nn.Linear(784, 128), mn.nn.ReLU(), mn.nn.Linear(128, 10))
    loss = mn.cross_entropy(net(x), y)
    opt = mn.optim.AdamW(lr=1e-3)
    mn.add_training_step(loss, opt)

    session = mn.Session(g)
    steps = mn.optim.Stepper(opt)
    session.set("x", images)      # NumPy arrays in, float32 read in place
    session.set("y", labels)
    steps.step(session)           # one submission: forward, backward, update
    print(session.get("loss"))
"""

import sys as _sys

from . import _core
from ._core import *  # noqa: F401,F403  the graph language, ops, Session

# `from meganeura import *` leaves the built-ins alone (mn.sum, mn.max... stay reachable).
_BUILTIN_NAMES = {"abs", "max", "min", "pow", "slice", "sum", "IndexError"}
__all__ = [n for n in dir(_core) if not n.startswith("_") and n not in _BUILTIN_NAMES]

nn = _core.nn
optim = _core.optim
data = _core.data
reference = _core.reference
lm = _core.lm
vision = _core.vision
onnx = _core.onnx
distributed = _core.distributed
for _name in ("nn", "optim", "data", "reference", "lm", "vision", "onnx", "distributed"):
    _sys.modules[__name__ + "." + _name] = getattr(_core, _name)

__version__ = "0.1.0"
