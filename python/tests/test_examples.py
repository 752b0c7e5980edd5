"""examples/fashion_mnist.py runs end to end on a slice of Fashion-MNIST (Debian's
dataset-fashion-mnist), prints JSON progress when not on a terminal, and learns."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(os.environ.get("MN_FASHION_MNIST_DIR", FASHION)),
                    reason="dataset-fashion-mnist is not installed")
def test_fashion_mnist_example_trains(tmp_path):
    run = subprocess.run([sys.executable, str(REPO / "examples" / "fashion_mnist.py"),
                          "--limit", "1200", "--epochs", "2",
                          "--checkpoint", str(tmp_path / "run.safetensors")],
                         capture_output=True, text=True, timeout=600, env=os.environ)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events if e["event"] != "step"] == [
        "evaluation", "epoch_end", "evaluation", "epoch_end"]
    accuracies = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", run.stdout)]
    assert len(accuracies) == 2 and accuracies[1] > 0.5, run.stdout
    assert (tmp_path / "run.safetensors").exists()
