"""PyTorch counterpart of bench_mlp_train: the same MLP training steps (batch upload, forward,
backward, optimizer step, loss readback), timed the same way. Prints one JSON line per workload.
Usage: python3 bench/mlp_train.py [eager|compile] [--device cuda|cpu]"""
import json, statistics, sys, time
import torch, torch.nn as nn, torch.nn.functional as F

mode = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "eager"
dev = torch.device("cuda" if torch.cuda.is_available() and "--device=cpu" not in sys.argv else "cpu")

def sync():
    if dev.type == "cuda": torch.cuda.synchronize()

def bench(name, model, batch, inputs, opt_cls, lr, steps=200):
    torch.manual_seed(0)
    model = model.to(dev)
    fwd = torch.compile(model) if mode == "compile" else model
    opt = opt_cls(model.parameters(), lr=lr)
    xh = torch.rand(batch, inputs); yh = torch.randint(0, 10, (batch,))
    times = []
    for i in range(steps + 20):
        t0 = time.perf_counter()
        x = xh.to(dev, non_blocking=True); y = yh.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(fwd(x), y)
        loss.backward(); opt.step()
        l = loss.item()
        if i >= 20: times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps(dict(name=name, impl="pytorch-" + mode, device=str(dev), step_ms_median=round(statistics.median(times), 4),
                          step_ms_min=round(min(times), 4), steps=steps, final_loss=l)), flush=True)

bench("mlp_ci_b16", nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10, bias=False)), 16, 128, torch.optim.SGD, 0.01)
for b in (64, 1024):
    bench(f"mlp_mnist_b{b}", nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)), b, 784, torch.optim.Adam, 1e-3)
