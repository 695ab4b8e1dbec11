#!/usr/bin/env python3
"""Compile time of two kiln binaries, A/B: the step of gpt-oss-small and of the reference
3.5 B config (configs/gpt-oss-3.5b-v6e4.yml, fsdp 2 x expert 2 on 4 virtual devices),
compiled with a warm kernel cache (graph work alone: tracing, autodiff, partitioning, the
pass pipeline, scheduling, buffer assignment), runs interleaved A, B, A, B, ... so both see
the same machine load. Prints the median `kiln compile` wall time per config and binary and
the ratio B/A. Each binary runs from its own checkout (the folder above it with
configs/base.yml), so each reads its own configs. For a compiler change: build the old
commit's kiln in another checkout (git worktree), then
  /usr/bin/python3 bench/compile_ab.py --a OLD/kiln --b build/kiln [--runs 5]
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

CONFIGS = {
    "gpt-oss-small": ["model_name=gpt-oss-small"],
    "reference 3.5B fsdp2xexpert2": ["configs/gpt-oss-3.5b-v6e4.yml", "local_devices=4"],
}


def checkout_of(kiln):
    """The checkout a kiln binary was built from: the nearest folder above it that holds
    configs/base.yml. Each binary runs there, so a config path means that checkout's file and
    its base_config reaches that checkout's base.yml (another checkout's differing base.yml
    is refused, see docs/configs.md)."""
    d = os.path.dirname(os.path.abspath(kiln))
    while d != os.path.dirname(d):
        if os.path.isfile(os.path.join(d, "configs", "base.yml")):
            return d
        d = os.path.dirname(d)
    return os.getcwd()


def compile_once(kiln, args, cache_dir):
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, KILN_PROGRESS="off")
    t0 = time.monotonic()
    subprocess.run([os.path.abspath(kiln), "compile", *args], env=env, check=True, capture_output=True, text=True,
                   cwd=checkout_of(kiln))
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the reference kiln binary")
    ap.add_argument("--b", required=True, help="the kiln binary measured against it")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for name, cfg in CONFIGS.items():
            compile_once(args.a, cfg, cache)  # fills the kernel cache for both
            compile_once(args.b, cfg, cache)
            times = {"A": [], "B": []}
            for _ in range(args.runs):
                times["A"].append(compile_once(args.a, cfg, cache))
                times["B"].append(compile_once(args.b, cfg, cache))
            a, b = statistics.median(times["A"]), statistics.median(times["B"])
            print(f"{name:32s} A {a:7.2f} s  B {b:7.2f} s  B/A {b / a:.3f}  "
                  f"(A runs {', '.join(f'{t:.2f}' for t in times['A'])}; B runs {', '.join(f'{t:.2f}' for t in times['B'])})")
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
