"""How far f16 operands move a deep network's gradients, in PyTorch on the CPU.

The counterpart of `bench_matmul --train`: the same 30-layer MLP (width 1024, batch 256, ReLU,
cross-entropy; PyTorch's default Linear initialization, inputs uniform in [-1, 1]), its first
gradients computed three ways:
  f64: float64 throughout (the reference),
  f32: float32 throughout (what the scalar kernels compute),
  f16: every matmul operand (forward x·Wᵀ, backward dY·W and dYᵀ·X) scaled by a power of two
       from its largest magnitude, rounded to f16, multiplied with f32 accumulation, unscaled
       (what the cooperative-matrix kernels compute); everything else float32.
Prints one JSON line: the largest relative Frobenius difference over the parameters' gradients
of f16 against f32 (the quantity bench_matmul --train reports) and of each against f64.

Usage: python3 bench/mlp30_f16_operands.py [--layers 30] [--width 1024] [--batch 256] [--seed 7]
"""
import argparse
import json
import math

import torch


def f16_operand(t):
    """t scaled by 2^e (its largest magnitude near 2^15), rounded to f16, back in f32."""
    m = t.abs().max().item()
    e = 0
    if m > 0 and math.isfinite(m):
        e = max(-100, min(100, 15 - math.frexp(m)[1]))
    return (t * 2.0**e).half().float(), e


def mm16(a, b):
    qa, ea = f16_operand(a)
    qb, eb = f16_operand(b)
    return (qa @ qb) * 2.0 ** (-(ea + eb))


class Linear16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return mm16(x, w.t()) + b

    @staticmethod
    def backward(ctx, gy):
        x, w = ctx.saved_tensors
        return mm16(gy, w), mm16(gy.t(), x), gy.sum(0)


def gradients(params, x, y, mode):
    dtype = torch.float64 if mode == "f64" else torch.float32
    ps = [(w.detach().to(dtype).requires_grad_(), b.detach().to(dtype).requires_grad_())
          for w, b in params]
    h = x.to(dtype)
    for i, (w, b) in enumerate(ps):
        h = Linear16.apply(h, w, b) if mode == "f16" else h @ w.t() + b
        if i + 1 < len(ps):
            h = torch.relu(h)
    loss = torch.nn.functional.cross_entropy(h, y)
    loss.backward()
    out = {}
    for i, (w, b) in enumerate(ps):
        out[f"fc{i + 1}.weight"] = w.grad.double()
        out[f"fc{i + 1}.bias"] = b.grad.double()
    return loss.item(), out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    layers = [torch.nn.Linear(a.width, a.width if i + 1 < a.layers else 10) for i in range(a.layers)]
    params = [(l.weight, l.bias) for l in layers]
    x = torch.rand(a.batch, a.width) * 2 - 1
    y = torch.randint(0, 10, (a.batch,))
    runs = {m: gradients(params, x, y, m) for m in ("f64", "f32", "f16")}

    def worst(m, ref):
        best, name = 0.0, ""
        for k, g in runs[m][1].items():
            r = runs[ref][1][k]
            d = ((g - r).norm() / max(r.norm().item(), 1e-300)).item()
            if d > best:
                best, name = d, k
        return best, name

    d16, n16 = worst("f16", "f32")
    d16r, n16r = worst("f16", "f64")
    d32r, n32r = worst("f32", "f64")
    print(json.dumps({"bench": "mlp30_f16_operands", "framework": "pytorch", "torch": torch.__version__,
                      "layers": a.layers, "width": a.width, "batch": a.batch,
                      "loss": {m: runs[m][0] for m in runs},
                      "grad_rel_diff_max_f16_vs_f32": d16, "worst_f16_vs_f32": n16,
                      "grad_rel_diff_max_f16_vs_f64": d16r, "worst_f16_vs_f64": n16r,
                      "grad_rel_diff_max_f32_vs_f64": d32r, "worst_f32_vs_f64": n32r}))


if __name__ == "__main__":
    main()
