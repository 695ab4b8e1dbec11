#!/usr/bin/python3
"""The attribution table's gemm row checked against a separate GEMM benchmark of the same
shapes (issue: "its GEMM row agrees with a separate GEMM benchmark of the same shapes").

1. `kiln train ... report=true` on gpt-oss-small writes profile/attribution.txt and
   profile/gemm_shapes.jsonl (every distinct GEMM shape with its calls and time per step).
2. The gemm row must be the sum of those shapes: the same seconds per step and the same
   GFLOP/s (FLOPs of the shapes = FLOPs of the kernels timed). Exact up to print rounding.
3. bench/gemm_shapes_bench times the same shapes with dnnl_sgemm alone; the ratio of the
   run's f32 GEMM time to the benchmark's must lie within [1/TOL, TOL], TOL = 1.5 by default.
   Why not tighter: in the run a GEMM reads operands other kernels just wrote (cold or
   evicted caches), some operands need a strided copy first (not modelled by the bench), and
   the OpenMP pool wakes up after single-threaded kernels; the bench repeats one GEMM on
   warm operands. Why not looser: a missing or double-counted GEMM, or time of other kernels
   attributed to GEMMs, moves the ratio by far more than 1.5x on this model.
   Both sides run on the same cores one after the other: on a loaded machine both slow
   down, but not equally; measure on an idle machine before reading much into the ratio.

Usage: gemm_row_vs_bench.py --kiln build/kiln --bench build/bench/gemm_shapes_bench
       [--steps 6] [--tolerance 1.5] [--keep DIR] [key=value ...]   (extra kiln train flags)
Exit status 1 when a check fails.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def gemm_row(table):
    m = re.search(r"^  gemm\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+) GFLOP/s = (\d+)% of peak", table, re.M)
    if not m:
        sys.exit(f"no gemm row with a rate in the table:\n{table}")
    return float(m.group(1)), float(m.group(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--bench", required=True, help="build/bench/gemm_shapes_bench")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tolerance", type=float, default=1.5)
    ap.add_argument("--keep", help="run in this directory and keep it")
    ap.add_argument("overrides", nargs="*", help="extra kiln train key=value flags")
    args = ap.parse_args()
    workdir = args.keep or tempfile.mkdtemp(prefix="kiln_gemm_row_")
    cmd = [args.kiln, "train", "model_name=gpt-oss-small", f"steps={args.steps}", "remat_policy=none",
           "dataset_type=synthetic", "reuse_example_batch=1", "enable_checkpointing=false", "report=true",
           "enable_tensorboard=false", f"base_output_directory={workdir}", "run_name=gemm_row"] + args.overrides
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"kiln train failed ({run.returncode}): {' '.join(cmd)}\n{run.stdout}\n{run.stderr}")
    profile = os.path.join(workdir, "gemm_row", "profile")
    table = open(os.path.join(profile, "attribution.txt")).read()
    row_s, row_gflops = gemm_row(table)
    shapes = [json.loads(l) for l in open(os.path.join(profile, "gemm_shapes.jsonl")) if l.strip()]
    shape_s = sum(s["seconds_per_step"] for s in shapes)
    shape_flops = sum(2.0 * s["batch"] * s["m"] * s["n"] * s["k"] * s["count_per_step"] for s in shapes)
    failures = []
    # Print rounding: s/step has 4 decimals, GFLOP/s one.
    if abs(row_s - shape_s) > 6e-5 + 1e-6 * shape_s:
        failures.append(f"gemm row {row_s} s/step != sum over its shapes {shape_s:.6f}")
    if abs(row_gflops - shape_flops / shape_s / 1e9) > 0.06:
        failures.append(f"gemm row {row_gflops} GFLOP/s != FLOPs of its shapes / their time "
                        f"{shape_flops / shape_s / 1e9:.2f}")
    bench = subprocess.run([args.bench, os.path.join(profile, "gemm_shapes.jsonl")], capture_output=True, text=True)
    if bench.returncode != 0:
        sys.exit(f"gemm_shapes_bench failed ({bench.returncode}):\n{bench.stdout}\n{bench.stderr}")
    m = re.search(r"total f32: run ([\d.]+) s/step, oneDNN alone ([\d.]+) s/step, ratio ([\d.]+); "
                  r"([\d.]+) vs ([\d.]+) GFLOP/s", bench.stdout)
    if not m:
        sys.exit(f"cannot read gemm_shapes_bench's total:\n{bench.stdout}")
    run_f32, bench_f32, ratio = float(m.group(1)), float(m.group(2)), float(m.group(3))
    print(table)
    print(bench.stdout.rstrip())
    print(f"\ngemm row vs the benchmark of its {len(shapes)} shapes ({args.steps} steps of gpt-oss-small):")
    print(f"  row {row_s:.4f} s/step = sum of its shapes {shape_s:.4f} s/step; "
          f"{row_gflops:.1f} GFLOP/s = shapes' FLOPs / time {shape_flops / shape_s / 1e9:.1f}")
    print(f"  f32 GEMMs: run {run_f32:.4f} s/step, dnnl_sgemm alone {bench_f32:.4f} s/step: "
          f"ratio {ratio:.2f} (tolerance {1 / args.tolerance:.2f} .. {args.tolerance:.2f})")
    if not (1 / args.tolerance <= ratio <= args.tolerance):
        failures.append(f"run / benchmark ratio {ratio:.2f} outside [{1 / args.tolerance:.2f}, {args.tolerance:.2f}]")
    print("reproduce: /usr/bin/python3 bench/gemm_row_vs_bench.py --kiln build/kiln "
          "--bench build/bench/gemm_shapes_bench")
    if not args.keep:
        shutil.rmtree(workdir)
    if failures:
        print("FAILED: " + "; ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
