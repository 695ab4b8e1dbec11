#!/usr/bin/env python3
"""Whole-step throughput of Kiln in bf16 mixed precision vs float32, side by side.

Trains `model_name` (default gpt-oss-small: batch 2 x 512 tokens) for --steps steps with
dtype=float32, with dtype=bfloat16 (weight_dtype=float32; the bf16 weight copies as step
state, bf16_weight_copy=true, the default) and with dtype=bfloat16 bf16_weight_copy=false (the
weights cast inside the step), alternating the runs --rounds times (the machine is shared:
alternating spreads the other jobs' load over all of them), and prints the median
steady-state step time of each, tokens/s, TFLOP/s (MaxText's formula, as Kiln logs it), MFU
against the f32 and the bf16 peak, and the bf16/f32 throughput ratio.

--cpu-time measures CPU seconds per step instead of wall-clock time, for a loaded machine:
each run at OMP_NUM_THREADS=1, user + system time of a --steps run minus a 2-step run (the
start-up, compilation from the kernel cache and the first steps cancel; an unmeasured 2-step
run before them fills the kernel cache), divided by --steps - 2. It is not the 2-thread wall
clock the targets are stated in.

Usage: /usr/bin/python3 bench/step_bf16_vs_f32.py [--kiln build/kiln] [--model gpt-oss-small]
         [--steps 6] [--rounds 2] [--f32-peak T] [--bf16-peak T] [--cpu-time]
(peaks default to this CPU's, measured by build/bench/cpu_peak_bench as kiln train does)
         [key=value ...]   (e.g. remat_policy=none, for every run)
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile

import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_peaks  # noqa: E402

VARIANTS = [("float32", ["dtype=float32"]),
            ("bfloat16", ["dtype=bfloat16", "bf16_weight_copy=true"]),
            ("bf16 cast", ["dtype=bfloat16", "bf16_weight_copy=false"])]


def train(kiln, model, steps, settings, env=None):
    out = tempfile.mkdtemp(prefix="kiln_bf16_step_")
    subprocess.run([kiln, "train", "model_name=" + model, "steps=%d" % steps, "reuse_example_batch=1",
                    "run_name=bench", "base_output_directory=" + out, "learning_rate=1e-4",
                    "enable_checkpointing=false", "weight_dtype=float32"] + settings,
                   check=True, stdout=subprocess.DEVNULL, env=env)
    with open(os.path.join(out, "bench", "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def step_times(kiln, model, steps, settings):
    records = train(kiln, model, steps, settings)
    steady = records[2:] if len(records) > 3 else records[1:]
    flops = steady[0]["tflops_per_s_per_device"] * steady[0]["step_time_s"]  # TFLOP per step
    return [r["step_time_s"] for r in steady], flops, steady[0]["tokens_per_s_per_device"] * steady[0]["step_time_s"]


def cpu_seconds(kiln, model, steps, settings, schedule_steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # One learning-rate schedule for the long and the short run: its constants are in the
    # kernels, so a schedule of its own would make one run compile kernels the other does not.
    train(kiln, model, steps, settings + ["learning_rate_schedule_steps=%d" % schedule_steps], env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--model", default="gpt-oss-small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--f32-peak", type=float, help="TFLOP/s (default: measured)")
    ap.add_argument("--bf16-peak", type=float, help="TFLOP/s (default: measured)")
    ap.add_argument("--cpu-time", action="store_true", help="CPU seconds per step at 1 thread (loaded machine)")
    ap.add_argument("extra", nargs="*", help="more key=value settings for every run")
    a = ap.parse_args()
    if a.f32_peak is None or a.bf16_peak is None:
        peaks = cpu_peaks.measure(os.path.join(os.path.dirname(os.path.abspath(a.kiln)), "bench"))
        a.f32_peak = a.f32_peak or peaks["f32"]
        a.bf16_peak = a.bf16_peak or peaks["bf16"]
        print("peaks measured on %d threads: %.3f TFLOP/s f32, %.3f bf16 (build/bench/cpu_peak_bench)" %
              (peaks["threads"], a.f32_peak, a.bf16_peak))
    times = {name: [] for name, _ in VARIANTS}
    flops = tokens = 0
    for _ in range(a.rounds):
        for name, settings in VARIANTS:
            if a.cpu_time:
                # A first short run builds any kernel missing from the cache, whose compiler
                # time would otherwise land in one of the measured runs.
                cpu_seconds(a.kiln, a.model, 2, settings + a.extra, a.steps)
                long_run = cpu_seconds(a.kiln, a.model, a.steps, settings + a.extra, a.steps)
                short_run = cpu_seconds(a.kiln, a.model, 2, settings + a.extra, a.steps)
                times[name].append((long_run - short_run) / (a.steps - 2))
            else:
                t, flops, tokens = step_times(a.kiln, a.model, a.steps, settings + a.extra)
                times[name] += t
    med = {d: statistics.median(t) for d, t in times.items()}
    settings = " ".join(a.extra) or "defaults"
    if a.cpu_time:
        print("step_bf16_vs_f32 --cpu-time: %s (%s), %d rounds, CPU s per step at OMP_NUM_THREADS=1 "
              "((%d steps - 2 steps) / %d), medians" % (a.model, settings, a.rounds, a.steps, a.steps - 2))
        print("%-9s %12s %s" % ("run", "CPU s/step", "all rounds"))
        for d, t in med.items():
            print("%-9s %12.3f %s" % (d, t, " ".join("%.3f" % x for x in times[d])))
    else:
        print("step_bf16_vs_f32: %s (%s), %d tokens per step, %.4f TFLOP per step, %d rounds x %d steps, medians" %
              (a.model, settings, tokens, flops, a.rounds, a.steps))
        print("%-9s %9s %10s %9s %11s %12s" % ("run", "step (s)", "tokens/s", "TFLOP/s", "MFU vs f32",
                                               "MFU vs bf16"))
        for d, t in med.items():
            print("%-9s %9.3f %10.1f %9.4f %10.1f%% %11.1f%%" % (d, t, tokens / t, flops / t,
                                                               100 * flops / t / a.f32_peak,
                                                               100 * flops / t / a.bf16_peak))
    print("bf16 throughput / f32 throughput = %.2fx (target >= 1.6x; bf16 MFU target >= 45%%)" %
          (med["float32"] / med["bfloat16"]))
    print("bf16 weight copies as state vs cast in the step: %.2fx (bf16_weight_copy=true / false)" %
          (med["bf16 cast"] / med["bfloat16"]))
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    print("reproduce: /usr/bin/python3 bench/step_bf16_vs_f32.py --kiln %s --model %s --steps %d --rounds %d%s%s" %
          (a.kiln, a.model, a.steps, a.rounds, " --cpu-time" if a.cpu_time else "",
           "".join(" " + e for e in a.extra)))


if __name__ == "__main__":
    main()
