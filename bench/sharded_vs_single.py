#!/usr/bin/env python3
"""Sharded step vs one device: the cost of partitioning on this machine.

Trains the same model (compiled CPU backend, synthetic reused batch, the same global batch)
on one device and on N virtual devices with the given mesh and prints the median step time
of each and their ratio, with the collective time the run reports (`collective_wait`, the
seconds a device spent blocked in collectives). The step times come from --rounds timed
runs of every variant without the profiler (steps 3 to --steps of each; the order rotates
between rounds so no variant always runs first or last); one profiled run per variant then
gives each device's compute time (the attribution table, collectives and host time left
out) beside the one-device step's, row by row, with the exposed collective time by kind.
The sharded step runs four ways: with collectives as async start/done pairs moved apart by the
latency-hiding scheduler (the default), the same without progress between kernels
(KILN_COLLECTIVE_PROGRESS=0: a device does its part of a started collective only in a
start or done), the default without the all-gather and reduce-scatter combiners
(KILN_COMBINE_THRESHOLD_KB=0) and with KILN_ASYNC_COLLECTIVES=0 (each collective one blocking kernel);
with an expert axis in the mesh, also the default with the token exchanges blocking
(KILN_ASYNC_RAGGED=0).
Virtual devices share the machine's cores (each gets cores / N threads), so on a 2-core
machine the ideal ratio is 1.0: the same work split in two, run on half the cores each.

Usage: /usr/bin/python3 bench/sharded_vs_single.py [--kiln build/kiln] [--model gpt-oss-tiny]
       [--mesh "ici_fsdp_parallelism=2"] [--devices 2] [--steps 12] [--rounds 3] [--profile-steps 6]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile


# Attribution rows that are not a device's own compute.
NOT_COMPUTE = ("collective", "data wait", "checkpoint stall", "host overhead", "total")


def attribution(text):
    """Seconds per step by row of the profiler's attribution table (the mean over the devices)."""
    rows = {}
    table = text[text.find("where the step time went"):]
    for m in re.finditer(r"^  (\S.*?)\s{2,}([0-9.]+)\s+[0-9.]+%", table, re.M):
        rows[m.group(1).strip()] = float(m.group(2))
    return rows


def run(kiln, model, extra, steps, out, env=None, profile=False):
    args = [kiln, "train", "model_name=" + model, "steps=%d" % steps, "reuse_example_batch=1", "log_period=1",
            "enable_checkpointing=false", "dataset_type=synthetic", "base_output_directory=" + out,
            "run_name=bench"] + extra
    if profile:  # every step after the first, for the per-device attribution table
        args += ["profiler=trace", "skip_first_n_steps_for_profiler=1", "profiler_steps=%d" % (steps - 1)]
    text = subprocess.run(args, check=True, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {}))).stdout
    times = [float(m) for m in re.findall(r"completed step: \d+, seconds: ([0-9.]+)", text)]
    waits = [float(m) for m in re.findall(r"collective_wait: ([0-9.]+)", text)]
    losses = [float(m) for m in re.findall(r" loss: ([0-9.]+)", text)]
    return times, waits, losses, attribution(text) if profile else {}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default="build/kiln")
    p.add_argument("--model", default="gpt-oss-tiny")
    p.add_argument("--mesh", default="ici_fsdp_parallelism=2")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--batch", type=int, default=2, help="global batch (sequences)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=12, help="steps per timed run (the first 2 are not timed)")
    p.add_argument("--rounds", type=int, default=3, help="timed runs of every variant, in rotated order")
    p.add_argument("--profile-steps", type=int, default=6, help="steps of the one profiled run per variant")
    a = p.parse_args()
    common = ["override_model_config=true", "max_target_length=%d" % a.seq]
    sharded = common + ["local_devices=%d" % a.devices, "per_device_batch_size=%g" % (a.batch / a.devices)] + a.mesh.split()
    single = common + ["local_devices=1", "ici_fsdp_parallelism=1", "per_device_batch_size=%d" % a.batch]
    variants = [("1 device", single, {}),
                ("sync", sharded, {"KILN_ASYNC_COLLECTIVES": "0"}),
                ("async, no progress", sharded, {"KILN_ASYNC_COLLECTIVES": "1", "KILN_COLLECTIVE_PROGRESS": "0"}),
                ("async", sharded, {"KILN_ASYNC_COLLECTIVES": "1", "KILN_COLLECTIVE_PROGRESS": "1"}),
                ("async, not combined", sharded, {"KILN_ASYNC_COLLECTIVES": "1", "KILN_COLLECTIVE_PROGRESS": "1",
                                                  "KILN_COMBINE_THRESHOLD_KB": "0"})]
    if "expert" in a.mesh:
        variants.append(("async, ragged blocking", sharded, {"KILN_ASYNC_COLLECTIVES": "1",
                                                             "KILN_COLLECTIVE_PROGRESS": "1", "KILN_ASYNC_RAGGED": "0"}))
    # Timed runs without the profiler (its per-kernel clock reads and trace are not part of a
    # step), every variant once per round, the order rotated from round to round so that
    # none always runs first or last; then one profiled run each for the attribution table.
    timed = {name: [] for name, _, _ in variants}
    waited = {name: [] for name, _, _ in variants}
    loads = []
    with tempfile.TemporaryDirectory() as out:
        for r in range(a.rounds):
            for name, extra, env in variants[r % len(variants):] + variants[:r % len(variants)]:
                times, waits, _, _ = run(a.kiln, a.model, extra, a.steps, out, env)
                timed[name].append(statistics.median(times[2:]))
                if waits:
                    waited[name].append(statistics.median(waits[2:]))
            loads.append(os.getloadavg()[0])
        profiled = {name: run(a.kiln, a.model, extra, a.profile_steps, out, env, profile=True)
                    for name, extra, env in variants}
    print("load average after each round: %s" % " ".join("%.2f" % x for x in loads))
    t1 = statistics.median(timed["1 device"])
    print("%-62s %9s %8s %9s   %s" % ("run (median of %d rounds, steps 3-%d)" % (a.rounds, a.steps), "step (s)",
                                      "ratio", "wait (s)", "each round"))
    for name, _, _ in variants:
        tn = statistics.median(timed[name])
        label = name if name == "1 device" else "%d devices, %s, %s" % (a.devices, a.mesh, name)
        wait = "%.3f" % statistics.median(waited[name]) if waited[name] else "-"
        print("%-62s %9.4f %8.3f %9s   %s" % (label, tn, tn / t1, wait, " ".join("%.4f" % x for x in timed[name])))
    one, _, l1, a1 = profiled["1 device"]
    runs = {name: v for name, v in profiled.items() if name != "1 device"}
    print("ratio target: <= 1.15 for fsdp=2 on 2 devices; wait = collective_wait, the median seconds per step a "
          "device spent blocked in collectives")
    print("first/last loss: 1 device %.4f -> %.4f, %s" % (l1[0], l1[-1], ", ".join(
        "%s %.4f -> %.4f" % (name, r[2][0], r[2][-1]) for name, r in runs.items())))
    # Per-device compute vs the one-device step's, from the attribution tables: on a loaded
    # machine the wall-clock ratio mostly measures descheduling, this one the work each device
    # does. Ideal: 1/devices of the work on threads/devices threads each (linear thread
    # scaling assumed); OMP_NUM_THREADS=1 gives every run one thread per device (ideal 1/N).
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
    ideal = (1.0 / a.devices) * threads / max(1, threads // a.devices)
    c1 = sum(v for k, v in a1.items() if not k.startswith(NOT_COMPUTE))
    for name, (_, _, _, an) in runs.items():
        cn = sum(v for k, v in an.items() if not k.startswith(NOT_COMPUTE))
        if c1 > 0 and cn > 0:
            print("compute per device / one-device compute, %s: %.2f (%.3f s vs %.3f s per step; ideal %.2f)"
                  % (name, cn / c1, cn, c1, ideal))
    keys = sorted(set(a1).union(*(set(r[3]) for r in runs.values())))
    short = {"sync": "sync", "async, no progress": "no prog", "async": "async", "async, not combined": "no comb",
             "async, ragged blocking": "rag sync"}
    print("  %-38s %8s %s" % ("seconds per step (device mean)", "1 dev", " ".join("%8s" % short[n] for n in runs)))
    for k in keys:
        if k.startswith(NOT_COMPUTE[1:]) or k == "total":
            continue
        print("  %-38s %8.4f %s" % (k, a1.get(k, 0.0), " ".join("%8.4f" % r[3].get(k, 0.0) for r in runs.values())))


if __name__ == "__main__":
    sys.exit(main())
