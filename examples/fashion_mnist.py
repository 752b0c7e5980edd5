"""Train an MLP on Fashion-MNIST from Python (Debian's dataset-fashion-mnist).

    PYTHONPATH=build/python .venv/bin/python examples/fashion_mnist.py --epochs 2

(or with the package installed: `pip install .`, then `python examples/fashion_mnist.py`).
The whole training step (forward, backward, AdamW update) is one GPU submission; the evaluation
graph is a second program of the same session, sharing the weights by name.
"""

import argparse
import time

import numpy as np

import meganeura as mn


class Mlp(mn.nn.Module):
    def __init__(self, hidden):
        super().__init__("Mlp")
        self.fc1 = mn.nn.Linear(784, hidden)
        self.fc2 = mn.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(mn.relu(self.fc1(x)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--limit", type=int, default=None, help="samples read from each file")
    parser.add_argument("--device", default="")
    args = parser.parse_args()

    train_x, train_y = mn.data.load_fashion_mnist("train", max_samples=args.limit)
    test_x, test_y = mn.data.load_fashion_mnist("test", max_samples=args.limit)
    net = Mlp(args.hidden).seed(0)

    train = mn.Graph()
    x = train.input("x", [args.batch, 784])
    y = train.input("y", [args.batch], mn.i32)
    opt = mn.optim.AdamW(lr=args.lr, schedule=mn.optim.LrSchedule("cosine"))
    mn.add_training_step(mn.cross_entropy(net(x), y), opt)

    evaluate = mn.Graph()
    eval_batch = 1000 if len(test_y) >= 1000 else len(test_y)
    ex = evaluate.input("images", [eval_batch, 784])
    evaluate.output("predicted", mn.argmax(net.eval()(ex), axis=1))
    net.train()

    session = mn.Session({"train": train, "eval": evaluate}, device=args.device)
    steps_per_epoch = len(train_y) // args.batch
    stepper = mn.optim.Stepper(opt, total_updates=args.epochs * steps_per_epoch)
    rng = np.random.default_rng(0)
    print(f"device: {session.device_name}")
    for epoch in range(args.epochs):
        order = rng.permutation(len(train_y))
        start, losses = time.perf_counter(), []
        for i in range(steps_per_epoch):
            rows = order[i * args.batch:(i + 1) * args.batch]
            session.set("x", train_x[rows])
            session.set("y", train_y[rows])
            stepper.set_inputs(session)
            session.step("train")
            stepper.advance()
            losses.append(float(session.get("loss")))
        seconds = time.perf_counter() - start
        correct = 0
        for i in range(len(test_y) // eval_batch):
            session.set("images", test_x[i * eval_batch:(i + 1) * eval_batch])
            session.step("eval")
            correct += int((session.get("predicted") == test_y[i * eval_batch:(i + 1) * eval_batch]).sum())
        accuracy = correct / (len(test_y) // eval_batch * eval_batch)
        print(f"epoch {epoch + 1}: loss {np.mean(losses):.4f}, test accuracy {accuracy:.4f}, "
              f"{steps_per_epoch * args.batch / seconds:.0f} samples/s")


if __name__ == "__main__":
    main()
