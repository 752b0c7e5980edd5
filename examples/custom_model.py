"""A model and training loop of your own: fit y = sin(3x) with a small network whose output
layer is a Python module declaring its own parameters, trained with Adam; gradients are read
back as outputs, and the result is saved as a PyTorch-loadable state_dict.

    PYTHONPATH=build/python .venv/bin/python examples/custom_model.py [--steps 300]
"""

import argparse

import numpy as np

import meganeura as mn


class ScaledTanh(mn.nn.Module):
    """y = gain * tanh(x) + offset, per feature."""

    def __init__(self, features):
        super().__init__("ScaledTanh")
        self.register_parameter("gain", [features], mn.Init.ones())
        self.register_parameter("offset", [features], mn.Init.zeros())

    def forward(self, x):
        g = x.graph
        return self.tensor(g, "gain") * mn.tanh(x) + self.tensor(g, "offset")


class Net(mn.nn.Module):
    def __init__(self, hidden):
        super().__init__("Net")
        self.inner = mn.nn.Linear(1, hidden)
        self.outer = mn.nn.Linear(hidden, 1)
        self.head = ScaledTanh(1)

    def forward(self, x):
        return self.head(self.outer(mn.silu(self.inner(x))))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--save", default="", help="write the trained state_dict here")
    args = parser.parse_args()

    net = Net(32).seed(1)
    g = mn.Graph()
    x = g.input("x", [args.batch, 1])
    y = g.input("y", [args.batch, 1])
    opt = mn.optim.Adam(lr=1e-2)
    mn.add_training_step(mn.mse_loss(net(x), y), opt, output_gradients=True)
    session = mn.Session(g)
    stepper = mn.optim.Stepper(opt)
    print("parameters:", ", ".join(k for k, _, _ in net.named_parameters()))

    rng = np.random.default_rng(0)
    for i in range(args.steps):
        xb = rng.uniform(-1, 1, size=(args.batch, 1)).astype(np.float32)
        session.set("x", xb)
        session.set("y", np.sin(3 * xb))
        stepper.step(session)
        if i % 50 == 0 or i == args.steps - 1:
            grad = session.get("grad/head.gain")
            print(f"step {i:4d}  loss {float(session.get('loss')):.5f}  "
                  f"d loss/d head.gain {grad[0]:+.4f}")
    if args.save:
        net.save_state_dict(session, args.save)
        print("saved", args.save)


if __name__ == "__main__":
    main()
