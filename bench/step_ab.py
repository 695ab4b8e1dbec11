#!/usr/bin/env python3
"""Step time of two kiln binaries, A/B, on the CPU: gpt-oss-small and the `moe` shape of
docs/peers.md, each in float32 and bf16, on one device and on fsdp 2 (two virtual devices),
trained for --steps steps with a fixed batch, runs interleaved A, B, A, B, ... so both see the
same machine load. Prints the median steady-state step time (steps 3 on) per case and binary
and the ratio B/A, and the geometric mean of the ratios. Each binary runs from its own
checkout (the folder above it with configs/base.yml), so each reads its own configs. For a
change to the compiler or the runtime: build the old commit's kiln in another checkout (git
worktree), then
  /usr/bin/python3 bench/step_ab.py --a OLD/build/kiln --b build/kiln [--steps 6] [--rounds 2]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compile_ab import checkout_of  # noqa: E402
from peers import SHAPES as PEER_SHAPES  # noqa: E402

SHAPES = {"gpt-oss-small": PEER_SHAPES["small"], "moe": PEER_SHAPES["moe"]}
DTYPES = {"f32": ["dtype=float32"], "bf16": ["dtype=bfloat16"]}
MESHES = {"1 device": ["local_devices=1"], "fsdp 2": ["local_devices=2", "ici_fsdp_parallelism=2"]}


def step_times(kiln, settings, steps, cache):
    out = tempfile.mkdtemp(prefix="kiln_step_ab_")
    env = dict(os.environ, KILN_CACHE_DIR=cache, KILN_PROGRESS="off")
    subprocess.run([os.path.abspath(kiln), "train", *settings, "steps=%d" % steps, "reuse_example_batch=1",
                    "run_name=ab", "base_output_directory=" + out, "enable_checkpointing=false"],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=checkout_of(kiln))
    with open(os.path.join(out, "ab", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["step_time_s"] for r in records[2:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the reference kiln binary")
    ap.add_argument("--b", required=True, help="the kiln binary measured against it")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as cache:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for shape, s in SHAPES.items():
            for dtype, d in DTYPES.items():
                for mesh, m in MESHES.items():
                    settings = s + d + m
                    times = {"A": [], "B": []}
                    for _ in range(args.rounds):
                        times["A"] += step_times(args.a, settings, args.steps, cache)
                        times["B"] += step_times(args.b, settings, args.steps, cache)
                    a, b = statistics.median(times["A"]), statistics.median(times["B"])
                    ratios.append(b / a)
                    print(f"{shape:14s} {dtype:5s} {mesh:9s} A {a:7.3f} s  B {b:7.3f} s  B/A {b / a:.3f}", flush=True)
        print(f"geometric mean B/A: {math.exp(sum(math.log(r) for r in ratios) / len(ratios)):.3f}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
