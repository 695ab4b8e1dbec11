#!/usr/bin/env python3
"""Where 2 virtual devices wait for each other at collectives, from step traces.

The plan's collective rows on a calibrated CPU are mostly the wait for the slower device
(docs/plan.md, "How close"). This traces an fsdp 2 run of each workload (`kiln train ...
profiler=trace`, both devices of one process on one clock) and prints, per workload:

  step        the mean over the traced steps of: compute (kernel time per device), time in
              collectives, of it the transfer (per collective the least either device spent)
              and the wait (the rest); and the `collective_wait` that `kiln plan --calibrate`
              would fit on this run (the wait over the wait law's sum over the compute spans
              before each collective's issue, target.h)
  by span     the waits at blocking collectives (dones, synchronous collectives) grouped by
              the compute since the device's previous blocking collective: per group, how
              many per step, the wait as a share of that compute, and its seconds per step;
              and the waits at async starts (a start blocks while it does its part of
              earlier collectives whose members have all arrived)
  asymmetry   per kernel class, the two devices' kernel time per step and the mean absolute
              difference between them, kernel by kernel, as a share of it: how unevenly the
              class runs on the two devices

The workloads are plan_vs_measured.py's shapes and its calibration workload, f32 and bf16.

Usage: /usr/bin/python3 bench/collective_waits.py [--kiln build/kiln] [--steps 5]
                                                  [--shapes calibration,tiny,small,moe]
                                                  [--dtypes float32,bfloat16] [--traces DIR]
  --traces DIR reads DIR/<shape>-<dtype>/profile/trace.json from an earlier run instead.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

from plan_vs_measured import CALIBRATION, COMMON, MESHES, SHAPES

WORKLOADS = dict(SHAPES, calibration=CALIBRATION)
SPAN_BINS_S = [0, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, float("inf")]


def trace(a, shape, dtype, out):
    name = "%s-%s" % (shape, dtype)
    cmd = [a.kiln, "train"] + WORKLOADS[shape] + MESHES["fsdp2"] + COMMON + [
        "dtype=" + dtype, "steps=%d" % (a.steps + 1), "profiler=trace", "profiler_steps=%d" % a.steps,
        "run_name=" + name, "base_output_directory=" + out]
    with open(os.path.join(out, name + ".log"), "w") as f:
        if subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode != 0:
            sys.exit("collective_waits: failed: " + " ".join(cmd))
    return os.path.join(out, name, "profile", "trace.json")


def wait_basis(compute_s):
    """target.h's wait law for collective_wait = 1 (kWaitReferenceS 0.010, kWaitExponent 0.8)."""
    return 0.010 * (compute_s / 0.010) ** 0.8 if compute_s > 0 else 0.0


def per_device(events):
    """Each device's kernel and collective events in time order, and the step starts."""
    steps = sorted(e["ts"] for e in events if e.get("cat") == "step")
    devices = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("pid", 0) > 0:
            devices[e["pid"]].append(e)
    ordered = [sorted(devices[pid], key=lambda e: e["ts"]) for pid in sorted(devices)]
    if not steps:
        sys.exit("collective_waits: the trace has no step spans")
    if len(ordered) != 2 or len(ordered[0]) != len(ordered[1]):
        sys.exit("collective_waits: expected 2 devices running the same instructions")
    return steps, ordered


def analyse(path):
    if not os.path.isfile(path):
        sys.exit("collective_waits: no trace at %s (a run with profiler=trace writes one)" % path)
    events = json.load(open(path))["traceEvents"]
    steps, (a, b) = per_device(events)
    n_steps = len(steps)
    bounds = steps[1:] + [float("inf")]
    r = {"compute": 0.0, "collectives": 0.0, "transfer": 0.0, "start_wait": 0.0, "wait_basis": 0.0,
         "bins": [[0, 0.0, 0.0] for _ in SPAN_BINS_S[:-1]],
         "classes": collections.defaultdict(lambda: [0.0, 0.0])}
    since = [0.0, 0.0]  # per device: compute since its previous blocking collective
    since_issue = [0.0, 0.0]  # per device: compute since its previous collective's issue
    step = 0
    for x, y in zip(a, b):
        while x["ts"] >= bounds[step]:  # a step starts with the devices together
            step += 1
            since = [0.0, 0.0]
            since_issue = [0.0, 0.0]
        dx, dy = x["dur"] * 1e-6, y["dur"] * 1e-6
        if x["cat"] != "collective":
            since[0] += dx
            since[1] += dy
            since_issue[0] += dx
            since_issue[1] += dy
            r["compute"] += (dx + dy) / 2
            c = r["classes"][x["cat"]]
            c[0] += (dx + dy) / 2
            c[1] += abs(dx - dy)
            continue
        mean, least = (dx + dy) / 2, min(dx, dy)
        r["collectives"] += mean
        r["transfer"] += least
        op = x.get("args", {}).get("op", x["name"].split()[0])
        if not op.endswith("_done"):  # an issue: a start or a synchronous collective
            r["wait_basis"] += sum(wait_basis(s) for s in since_issue) / 2
            since_issue = [0.0, 0.0]
        if op.endswith("_start"):
            r["start_wait"] += mean - least
            continue
        span = sum(since) / 2
        i = max(k for k in range(len(SPAN_BINS_S) - 1) if span >= SPAN_BINS_S[k])
        r["bins"][i][0] += 1
        r["bins"][i][1] += mean - least
        r["bins"][i][2] += span
        since = [0.0, 0.0]
    return r, n_steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--steps", type=int, default=5, help="traced steps (after one untraced)")
    ap.add_argument("--shapes", default="calibration,tiny,small,moe")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--traces", help="read DIR/<shape>-<dtype>/profile/trace.json instead of running")
    a = ap.parse_args()
    for shape in a.shapes.split(","):
        if shape not in WORKLOADS:
            sys.exit("collective_waits: unknown shape %r; accepted: %s" % (shape, ", ".join(sorted(WORKLOADS))))
    for dtype in a.dtypes.split(","):
        if dtype not in ("float32", "bfloat16"):
            sys.exit("collective_waits: unknown dtype %r; accepted: float32, bfloat16" % dtype)
    out = a.traces or tempfile.mkdtemp(prefix="kiln_collective_waits_")
    print("traces in " + out)
    labels = ["%g-%g ms" % (lo * 1e3, hi * 1e3) if hi != float("inf") else ">= %g ms" % (lo * 1e3)
              for lo, hi in zip(SPAN_BINS_S, SPAN_BINS_S[1:])]
    for shape in a.shapes.split(","):
        for dtype in a.dtypes.split(","):
            path = (os.path.join(out, "%s-%s" % (shape, dtype), "profile", "trace.json") if a.traces
                    else trace(a, shape, dtype, out))
            r, n = analyse(path)
            wait = r["collectives"] - r["transfer"]
            print("\n%s %s (%d steps): compute %.3f s, collectives %.4f s = transfer %.4f + wait %.4f "
                  "(%.1f%% of compute)" % (shape, dtype, n, r["compute"] / n, r["collectives"] / n,
                                           r["transfer"] / n, wait / n, 100 * wait / r["compute"]))
            print("  collective_wait fitted on this run: %.3f" % (wait / r["wait_basis"] if r["wait_basis"] else 0))
            print("  waits at starts: %.4f s" % (r["start_wait"] / n))
            print("  waits at blocking collectives by the compute since the previous one:")
            for label, (count, w, span) in zip(labels, r["bins"]):
                if count:
                    print("    %-11s %5.1f per step  wait %6.1f%% of it  %.4f s" % (label, count / n,
                                                                                  100 * w / span if span else 0, w / n))
            print("  kernel time per step and how unevenly the devices ran it:")
            for cls, (t, diff) in sorted(r["classes"].items(), key=lambda kv: -kv[1][0]):
                print("    %-15s %.3f s  devices differ by %4.1f%%" % (cls, t / n, 100 * diff / t if t else 0))
    print("\ncommand: /usr/bin/python3 " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
