#!/usr/bin/env python3
"""Compile time from 4 to 16 layers (issue 5 target: < 10% growth of the first compile).

Runs `kiln compile model_name=gpt-oss-small override_model_config=true
base_num_decoder_layers=L` for L = 4 and 16, interleaved so both see the same machine load:
a first compile (empty KILN_CACHE_DIR: the kernel build runs) and a cached compile (the
same directory again: graph work alone). Prints per depth the median of the backend's
`compile:` seconds, the process's wall and CPU seconds, the median pass-pipeline time
(KILN_PASS_TIMING), and the 16/4 ratios, with the load average before and after.

Usage: /usr/bin/python3 bench/compile_growth.py [--kiln build/kiln] [--runs 3]
"""
import argparse
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time


def run(kiln, layers, cache_dir):
    cmd = [kiln, "compile", "model_name=gpt-oss-small", "override_model_config=true",
           f"base_num_decoder_layers={layers}"]
    env = dict(os.environ, KILN_CACHE_DIR=cache_dir, KILN_PASS_TIMING="1", OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = out.stdout + out.stderr
    compile_s = float(re.search(r"compile: ([0-9.]+) s", text).group(1))
    passes = re.findall(r"pass timing: ([0-9.]+) ms", text)
    passes_ms = sum(float(p) for p in passes)
    return {"compile": compile_s, "wall": wall, "cpu": cpu, "passes": passes_ms / 1000}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    results = {(kind, layers): [] for kind in ("first", "cached") for layers in (4, 16)}
    for _ in range(args.runs):
        for layers in (4, 16):
            with tempfile.TemporaryDirectory() as cache:
                results[("first", layers)].append(run(args.kiln, layers, cache))
                results[("cached", layers)].append(run(args.kiln, layers, cache))
    load1 = os.getloadavg()[0]
    print(f"kiln compile gpt-oss-small, 4 vs 16 layers, {args.runs} runs each, interleaved; "
          f"load average {load0:.1f} before, {load1:.1f} after (2-core machine)")
    print(f"{'':8} {'layers':>6} {'compile s':>10} {'wall s':>8} {'cpu s':>7} {'passes s':>9}")
    for kind in ("first", "cached"):
        med = {}
        for layers in (4, 16):
            rows = results[(kind, layers)]
            med[layers] = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            m = med[layers]
            print(f"{kind:8} {layers:6d} {m['compile']:10.3f} {m['wall']:8.3f} {m['cpu']:7.3f} {m['passes']:9.3f}")
        ratio = {k: med[16][k] / med[4][k] for k in med[4]}
        print(f"{kind:8} {'16/4':>6} {ratio['compile']:10.2f} {ratio['wall']:8.2f} {ratio['cpu']:7.2f} "
              f"{ratio['passes']:9.2f}")
    print("target: first-compile `compile s` ratio < 1.10 (measure on an idle machine)")
    print(f"reproduce: /usr/bin/python3 bench/compile_growth.py --kiln {args.kiln} --runs {args.runs}")


if __name__ == "__main__":
    main()
