#!/usr/bin/env python3
"""Whole-step throughput of Kiln in bf16 mixed precision vs float32, side by side.

Trains `model_name` (default gpt-oss-small: batch 2 x 512 tokens) for --steps steps with
dtype=float32 and with dtype=bfloat16 (weight_dtype=float32), alternating the two --rounds
times (the machine is shared: alternating spreads the other jobs' load over both), and
prints the median steady-state step time of each, tokens/s, TFLOP/s (MaxText's formula, as
Kiln logs it), MFU against the f32 and the bf16 peak, and the bf16/f32 throughput ratio.

Usage: /usr/bin/python3 bench/step_bf16_vs_f32.py [--kiln build/kiln] [--model gpt-oss-small]
         [--steps 6] [--rounds 2] [--f32-peak 0.231] [--bf16-peak 0.461]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def step_times(kiln, model, dtype, steps, extra):
    out = tempfile.mkdtemp(prefix="kiln_bf16_step_")
    subprocess.run([kiln, "train", "model_name=" + model, "steps=%d" % steps, "reuse_example_batch=1",
                    "run_name=bench", "base_output_directory=" + out, "learning_rate=1e-4",
                    "enable_checkpointing=false", "dtype=" + dtype, "weight_dtype=float32"] + extra,
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "bench", "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    steady = records[2:] if len(records) > 3 else records[1:]
    flops = steady[0]["tflops_per_s_per_device"] * steady[0]["step_time_s"]  # TFLOP per step
    return [r["step_time_s"] for r in steady], flops, steady[0]["tokens_per_s_per_device"] * steady[0]["step_time_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--model", default="gpt-oss-small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--f32-peak", type=float, default=0.231)
    ap.add_argument("--bf16-peak", type=float, default=0.461)
    ap.add_argument("extra", nargs="*", help="more key=value settings for both runs")
    a = ap.parse_args()
    times = {"float32": [], "bfloat16": []}
    for _ in range(a.rounds):
        for dtype in times:
            t, flops, tokens = step_times(a.kiln, a.model, dtype, a.steps, a.extra)
            times[dtype] += t
    med = {d: statistics.median(t) for d, t in times.items()}
    print("step_bf16_vs_f32: %s, %d tokens per step, %.4f TFLOP per step, %d rounds x %d steps, medians" %
          (a.model, tokens, flops, a.rounds, a.steps))
    print("%-9s %9s %10s %9s %11s %12s" % ("dtype", "step (s)", "tokens/s", "TFLOP/s", "MFU vs f32", "MFU vs bf16"))
    for d, t in med.items():
        print("%-9s %9.3f %10.1f %9.4f %10.1f%% %11.1f%%" % (d, t, tokens / t, flops / t, 100 * flops / t / a.f32_peak,
                                                           100 * flops / t / a.bf16_peak))
    print("bf16 throughput / f32 throughput = %.2fx (target >= 1.6x; bf16 MFU target >= 45%%)" %
          (med["float32"] / med["bfloat16"]))
    print("reproduce: /usr/bin/python3 bench/step_bf16_vs_f32.py --kiln %s --model %s --steps %d --rounds %d" %
          (a.kiln, a.model, a.steps, a.rounds))


if __name__ == "__main__":
    main()
