"""ONNX inference: torchvision ResNets exported by torch.onnx (opset 17, symbolic batch) and run
by `mn run` (meganeura), onnxruntime (its CUDA provider where it has one, else the CPU) and
PyTorch eager on the same random images; median ms per batch, and the largest difference of
meganeura's outputs from onnxruntime's. One JSON line per (model, batch, framework).

    python3 bench/onnx_inference.py --mn build/bin/mn [--depth 18,50] [--batch 1,32] [--runs 30]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import torch
import torchvision


def export(depth, path):
    torch.manual_seed(depth)
    model = getattr(torchvision.models, f"resnet{depth}")().eval()
    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    torch.onnx.export(model, torch.randn(1, 3, 224, 224), path, opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, **kwargs)
    return model


def timed(fn, runs):
    for _ in range(3):
        fn()
    ms = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - start) * 1e3)
    return statistics.median(ms)


def run_torch(model, x, runs):
    model = model.cuda()
    xc = torch.from_numpy(x).cuda()

    def step():
        with torch.no_grad():
            out = model(xc)
        torch.cuda.synchronize()
        return out

    torch.cuda.reset_peak_memory_stats()
    ms = timed(step, runs)
    return ms, torch.cuda.max_memory_allocated() / 2**20


def run_ort(path, x, runs):
    import onnxruntime as ort
    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                 if p in ort.get_available_providers()]
    session = ort.InferenceSession(path, providers=providers)
    out = session.run(None, {"input": x})[0]
    return timed(lambda: session.run(None, {"input": x}), runs), session.get_providers()[0], out


def run_mn(mn, path, x, runs, directory):
    np.save(os.path.join(directory, "x.npy"), x)
    out_dir = os.path.join(directory, "out")
    run = subprocess.run([mn, "run", path, "--input", "input=" + os.path.join(directory, "x.npy"),
                          "--runs", str(runs), "--output-dir", out_dir, "--json"],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(run.stderr)
    return json.loads(run.stdout), np.load(os.path.join(out_dir, "logits.npy"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mn", required=True, help="the mn binary")
    parser.add_argument("--depth", default="18,50")
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        for depth in map(int, args.depth.split(",")):
            path = os.path.join(directory, f"resnet{depth}.onnx")
            model = export(depth, path)
            for batch in map(int, args.batch.split(",")):
                x = np.random.default_rng(batch).standard_normal((batch, 3, 224, 224)).astype(np.float32)
                base = {"bench": "onnx_inference", "model": f"resnet{depth}", "batch": batch}
                ort_ms, provider, ort_out = run_ort(path, x, args.runs)
                print(json.dumps({**base, "framework": "onnxruntime", "provider": provider,
                                  "ms_median": ort_ms}), flush=True)
                report, ours = run_mn(args.mn, path, x, args.runs, directory)
                print(json.dumps({**base, "framework": "meganeura", "ms_median": report["run_ms"],
                                  "build_ms": report["build_ms"], "arena_mib": report["arena_mib"],
                                  "dispatches": report["dispatches"], "device": report["device"],
                                  "max_abs_diff_vs_onnxruntime": float(np.abs(ours - ort_out).max()),
                                  "max_abs_onnxruntime": float(np.abs(ort_out).max())}), flush=True)
                torch_ms, peak = run_torch(model, x, args.runs)
                print(json.dumps({**base, "framework": "pytorch", "mode": "eager",
                                  "ms_median": torch_ms, "peak_mib": peak}), flush=True)


if __name__ == "__main__":
    main()
