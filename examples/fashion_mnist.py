"""Train an MLP on Fashion-MNIST from Python (Debian's dataset-fashion-mnist) with mn.Trainer.

    PYTHONPATH=build/python .venv/bin/python examples/fashion_mnist.py --epochs 2

(or with the package installed: `pip install .`, then `python examples/fashion_mnist.py`).
The whole training step (forward, backward, AdamW update) is one GPU submission; the evaluation
graph is a second program of the same session, sharing the weights by name. Progress is a bar
on a terminal and JSON lines otherwise; --checkpoint keeps a checkpoint that --resume continues
from exactly.
"""

import argparse

import meganeura as mn


class Mlp(mn.nn.Module):
    def __init__(self, hidden):
        super().__init__("Mlp")
        self.fc1 = mn.nn.Linear(784, hidden)
        self.fc2 = mn.nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(mn.relu(self.fc1(x)))


def classifier_graph(net, batch):
    """x [batch, 784] and y [batch] in, logits out; returns (graph, loss)."""
    g = mn.Graph()
    logits = net(g.input("x", [batch, 784]))
    g.output("logits", logits)
    loss = mn.cross_entropy(logits, g.input("y", [batch], mn.i32))
    return g, loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--limit", type=int, default=None, help="samples read from each file")
    parser.add_argument("--device", default="")
    parser.add_argument("--checkpoint", default="")
    parser.add_argument("--resume", default="")
    args = parser.parse_args()

    train_x, train_y = mn.data.load_fashion_mnist("train", max_samples=args.limit)
    test_x, test_y = mn.data.load_fashion_mnist("test", max_samples=args.limit)
    train = mn.data.TensorDataset({"x": train_x, "y": train_y})
    test = mn.data.TensorDataset({"x": test_x, "y": test_y})

    net = Mlp(args.hidden).seed(0)
    _, loss = classifier_graph(net, args.batch)
    eval_graph, eval_loss = classifier_graph(net.eval(), 1000 if len(test_y) >= 1000 else len(test_y))
    eval_graph.output("loss", eval_loss)
    net.train()

    accuracy = mn.Metric.accuracy("logits", "y")
    trainer = mn.Trainer(loss, optimizer=mn.optim.AdamW(args.lr, schedule="cosine"),
                         epochs=args.epochs, eval_graph=eval_graph,
                         pad_values={"y": -100},  # a short last batch: padding rows ignored
                         metrics=[accuracy], eval_metrics=[accuracy],
                         checkpoint=args.checkpoint, resume=args.resume, device=args.device)
    print(f"device: {trainer.session.device_name}")
    history = trainer.fit(train, test)
    for epoch in history.epochs:
        print(f"epoch {epoch.epoch + 1}: loss {epoch.metrics['loss']:.4f}, "
              f"test accuracy {epoch.eval_metrics['accuracy']:.4f}")
    print(f"{history.samples_per_second:.0f} samples/s")


if __name__ == "__main__":
    main()
