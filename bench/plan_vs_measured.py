#!/usr/bin/env python3
"""kiln plan's prediction against the measured step, on this machine.

First `kiln plan --calibrate` measures this CPU on a calibration workload (gpt-oss-small's
widths with 2 layers and 4 experts at batch 2 x 384: between the cases below in kernel
sizes, and none of them) for one device (2 threads) and for 2 virtual devices (1 thread
each). Then for every case (model shape x dtype x mesh):

  measured    `kiln train ... reuse_example_batch=1 report=true` for --steps steps: the
              median step time after the first (metrics.jsonl's step_time_s) and the
              attribution table (profile/attribution.txt: seconds per step by kernel class,
              exposed collectives, host overhead)
  predicted   `kiln plan --json ... target=<the calibration for that mesh>`

and prints, per case, the two step times with the error, then the split by category
(gemm, grouped matmul, attention, fused elementwise, other kernels, collectives, host) with
the error of each category that holds at least 5% of the step. Goals (issue 22): the step
within 15%, each category within 25%. Last, the calibration workload runs again and the
change of its step time says how far the machine itself drifted during the run (a shared
machine's speed can move by half within minutes, and every prediction by as much).

With --calibrate-each the mesh's calibration runs again right before every case and that
case is predicted on it, so a drift of the machine between the first calibration and the
case no longer shows up as the model's error; each case's line then says how far the
calibration workload had moved since the first calibration.

The attribution's host row is the step's wall time not inside any kernel, data or
checkpoint span (train/observability/attribution.h), and its remat row is taken out of the kernel rows;
the plan counts recomputed kernels in their class, so remat_policy=none here.

Usage: /usr/bin/python3 bench/plan_vs_measured.py [--kiln build/kiln] [--steps 6]
                                                  [--shapes tiny,small,moe] [--dtypes float32,bfloat16]
                                                  [--meshes 1,fsdp2] [--calibrate-each]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

SHAPES = {
    "tiny": ["model_name=gpt-oss-tiny"],
    "small": ["model_name=gpt-oss-small"],
    # bench/peers.py's MoE shape: 4 layers, d 512, 8 experts top-2 of width 1024, batch 8 x 256.
    "moe": ["model_name=gpt-oss-small", "override_model_config=true", "base_num_decoder_layers=4",
            "base_emb_dim=512", "base_num_query_heads=8", "base_num_kv_heads=2", "head_dim=64", "num_experts=8",
            "num_experts_per_tok=2", "base_mlp_dim=1024", "base_moe_mlp_dim=1024", "vocab_size=32000",
            "max_target_length=256", "per_device_batch_size=8"],
}
MESHES = {"1": [], "fsdp2": ["local_devices=2", "ici_fsdp_parallelism=2"]}
# Between the shapes below in kernel sizes, and none of them: gpt-oss-small's widths with
# 2 layers, 4 experts, batch 2 x 384.
CALIBRATION = ["model_name=gpt-oss-small", "override_model_config=true", "base_num_decoder_layers=2",
               "num_experts=4", "max_target_length=384", "per_device_batch_size=2"]
COMMON = ["reuse_example_batch=1", "remat_policy=none", "enable_checkpointing=false", "learning_rate=1e-4"]
# Attribution rows -> plan categories.
CATEGORIES = ["gemm", "grouped_matmul", "attention", "fused", "other", "collectives", "host"]
ROW = re.compile(r"^\s{2}(\S.*?)\s{2,}([0-9.]+)\s+([0-9.]+)%")


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit("plan_vs_measured: failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), open(log).read()[-3000:]))
    return open(log).read()


def calibration_step_s(text):
    """The f32 step time `kiln plan --calibrate` printed."""
    return float(re.search(r"float32 step: ([0-9.]+) s per step", text).group(1))


def calibrate(a, mesh, output, log):
    """`kiln plan --calibrate` of the calibration workload on `mesh`, written to `output`;
    returns (its printed report, its f32 step time)."""
    text = run([a.kiln, "plan", "--calibrate"] + CALIBRATION + MESHES[mesh] + ["--output", output], log)
    return text, calibration_step_s(text)


def measured(a, args, work, name):
    out = os.path.join(work, "runs")
    run([a.kiln, "train"] + args + COMMON + ["steps=%d" % a.steps, "report=true", "run_name=" + name,
                                             "base_output_directory=" + out], os.path.join(work, name + ".log"))
    run_dir = os.path.join(out, name)
    times = [json.loads(l)["step_time_s"] for l in open(os.path.join(run_dir, "metrics.jsonl"))
             if '"step_time_s"' in l]
    split = dict.fromkeys(CATEGORIES, 0.0)
    for line in open(os.path.join(run_dir, "profile", "attribution.txt")).read().splitlines()[2:]:
        m = ROW.match(line)
        if not m:
            continue
        row, seconds = m.group(1).strip(), float(m.group(2))
        key = {"gemm": "gemm", "grouped matmul": "grouped_matmul", "attention": "attention",
               "fused elementwise": "fused", "other kernels": "other", "host overhead": "host",
               "outside the program": "host",
               "rematerialization": "other"}.get(row)
        if row.startswith("collective"):
            key = "collectives"
        if key:
            split[key] += seconds
    return statistics.median(times[1:]), split


def predicted(a, args, target, work, name):
    text = run([a.kiln, "plan", "--json"] + args + COMMON + ["target=" + target], os.path.join(work, name + ".plan"))
    j = json.loads(text[text.index("{"):])
    split = {k: j["compute"][k]["seconds"] for k in ["gemm", "grouped_matmul", "attention", "fused", "other"]}
    split["collectives"] = j["exposed_s"]
    split["host"] = j["host_s"]
    return j["step_s"], split


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--shapes", default="tiny,small,moe")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--meshes", default="1,fsdp2")
    ap.add_argument("--calibrate-each", action="store_true",
                    help="calibrate again right before every case and predict the case on that calibration")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln_plan_bench_")
    targets, calibration_steps = {}, {}
    for mesh in a.meshes.split(","):
        targets[mesh] = os.path.join(work, "cpu-%s.yml" % mesh)
        text, calibration_steps[mesh] = calibrate(a, mesh, targets[mesh], os.path.join(work, "calibrate-%s.log" % mesh))
        print("calibration, mesh %s:\n%s" % (mesh, text.rstrip()))
    rows, within = [], 0
    for shape in a.shapes.split(","):
        for dtype in a.dtypes.split(","):
            for mesh in a.meshes.split(","):
                name = "%s-%s-%s" % (shape, dtype, mesh)
                args = SHAPES[shape] + ["dtype=" + dtype] + MESHES[mesh]
                target, moved = targets[mesh], ""
                if a.calibrate_each:
                    target = os.path.join(work, "cpu-%s-%s.yml" % (mesh, name))
                    _, now = calibrate(a, mesh, target, os.path.join(work, "calibrate-%s.log" % name))
                    moved = "  (calibrated again: the workload's f32 step %.3f s, %+.0f%% from the first)" % (
                        now, 100.0 * (now - calibration_steps[mesh]) / calibration_steps[mesh])
                m_step, m_split = measured(a, args, work, name)
                p_step, p_split = predicted(a, args, target, work, name)
                err = 100.0 * (p_step - m_step) / m_step
                within += abs(err) <= 15
                cats = []
                for c in CATEGORIES:
                    share = m_split[c] / m_step
                    cerr = 100.0 * (p_split[c] - m_split[c]) / m_split[c] if m_split[c] > 0 else float("nan")
                    mark = "" if share < 0.05 else (" (%+.0f%%)" % cerr)
                    cats.append("%s %.3f/%.3f%s" % (c, m_split[c], p_split[c], mark))
                rows.append((name, m_step, p_step, err, cats))
                print("%-24s measured %.4f s  predicted %.4f s  error %+.1f%%%s" % (name, m_step, p_step, err, moved),
                      flush=True)
    # The machine's own drift over the run: the calibration workload again, timed as before.
    for mesh in a.meshes.split(","):
        _, after = calibrate(a, mesh, os.path.join(work, "again-%s.yml" % mesh), os.path.join(work, "again-%s.log" % mesh))
        before = calibration_steps[mesh]
        print("drift, mesh %s: the calibration workload's f32 step took %.3f s before the cases and %.3f s after "
              "(%+.0f%%)" % (mesh, before, after, 100.0 * (after - before) / before))
    print("\n| case | measured s/step | predicted | error | by category, measured/predicted s (error where >= 5% of the step) |")
    print("|---|---:|---:|---:|---|")
    for name, m, p, err, cats in rows:
        print("| %s | %.4f | %.4f | %+.1f%% | %s |" % (name, m, p, err, "; ".join(cats)))
    print("\n%d of %d cases within 15%%. Reproduce: /usr/bin/python3 bench/plan_vs_measured.py --kiln %s --steps %d "
          "--shapes %s --dtypes %s --meshes %s%s" % (within, len(rows), a.kiln, a.steps, a.shapes, a.dtypes, a.meshes,
                                                    " --calibrate-each" if a.calibrate_each else ""))


if __name__ == "__main__":
    main()
