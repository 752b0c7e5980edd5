"""What calling from Python adds to a step: the loop of bench_session_step (set an input, step,
read the output of one 16 x 16 Linear) through the Python package, beside the C++ binary's
figure measured in the same run.

    PYTHONPATH=build/python .venv/bin/python bench/session_step.py [--cxx build/bin/bench_session_step]
"""

import argparse
import json
import statistics
import subprocess
import time

import numpy as np

import meganeura as mn


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="")
    parser.add_argument("--cxx", default="build/bin/bench_session_step",
                        help="the C++ benchmark to run beside (empty: none)")
    args = parser.parse_args()

    g = mn.Graph()
    g.output("y", mn.nn.Linear(16, 16)(g.input("x", [1, 16])))
    session = mn.Session(g, device=args.device)
    x = np.full((1, 16), 0.5, dtype=np.float32)

    def loop(n):
        sink = 0.0
        for _ in range(n):
            session.set("x", x)
            session.step()
            sink += float(session.get("y")[0, 0])
        return sink

    loop(50)
    us = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        loop(args.steps)
        us.append((time.perf_counter() - start) / args.steps * 1e6)
    ours = {"bench": "session_step", "caller": "python", "device": session.device_name,
            "steps": args.steps, "rounds": args.rounds,
            "us_per_step_median": statistics.median(us), "us_per_step_min": min(us)}
    result = {"python": ours}
    if args.cxx:
        cxx = json.loads(subprocess.run(
            [args.cxx, "--steps", str(args.steps), "--rounds", str(args.rounds)] +
            (["--device", args.device] if args.device else []),
            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        result["cxx"] = cxx
        result["python_overhead_us"] = ours["us_per_step_median"] - cxx["us_per_step_median"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
