#!/usr/bin/env python3
"""kiln plan's prediction against the measured step, on this machine.

For every model shape and mesh, `kiln plan --calibrate` first measures this CPU on a
calibration workload (gpt-oss-small's widths with 2 layers and 4 experts at batch 2 x 384:
between the cases below in kernel sizes, and none of them), for that mesh (one device on 2
threads, or 2 virtual devices of 1 thread each). Then, for the shape in each dtype:

  measured    `kiln train ... reuse_example_batch=1 report=true` for --steps steps: the
              median step time after the first (metrics.jsonl's step_time_s) and the
              attribution table (profile/attribution.txt: seconds per step by kernel class,
              collectives, host overhead measured between kernels)
  predicted   `kiln plan --json ... target=<that calibration>`

All of it runs --repeats times (calibration, measurement, prediction each time: a shared
machine's speed moves by a third within minutes, so the calibration right before the
measurement takes the drift between them out, and the repeats the noise of one run). The
table gives per case the median measurement, the median prediction and the error between
them (goal, issue 22: within 15%), each run's own error, and the split by category (gemm,
grouped matmul, attention, fused elementwise, other kernels, collectives, host) with the
error of each category that holds at least 5% of the step (goal: within 25%). It also prints
how far the calibration workload's own step moved over the calibrations.

The attribution's host row is the step's wall time not inside any kernel, data or
checkpoint span (train/observability/attribution.h), and its remat row is taken out of the
kernel rows; the plan counts recomputed kernels in their class, so remat_policy=none here.
Every row is the mean over the run's devices; its collective rows are their time in
collective instructions (async starts and dones, synchronous collectives), which on 2
virtual devices is mostly the wait for the one behind; the plan's are its exposed time.

Usage: /usr/bin/python3 bench/plan_vs_measured.py [--kiln build/kiln] [--steps 6] [--repeats 3]
                                                  [--shapes tiny,small,moe] [--dtypes float32,bfloat16]
                                                  [--meshes 1,fsdp2]
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


def calibrate(a, args, output, log):
    """`kiln plan --calibrate` of the calibration workload on the mesh in `args`, written to
    `output` (the link between MPI ranks is not measured: no case crosses one); returns its
    f32 step time."""
    env = dict(os.environ, KILN_MPIEXEC="none")
    with open(log, "w") as f:
        r = subprocess.run([a.kiln, "plan", "--calibrate"] + CALIBRATION + args + ["--output", output], stdout=f,
                           stderr=subprocess.STDOUT, env=env)
    text = open(log).read()
    if r.returncode != 0:
        sys.exit("plan_vs_measured: calibration failed (%d):\n%s" % (r.returncode, text[-3000:]))
    return calibration_step_s(text)


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


def error(p, m):
    return 100.0 * (p - m) / m if m > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3, help="runs of every case (calibration, measurement, prediction)")
    ap.add_argument("--shapes", default="tiny,small,moe")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--meshes", default="1,fsdp2")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln_plan_bench_")
    results = {}       # case -> [(measured step, measured split, predicted step, predicted split)]
    calibrations = {}  # mesh -> the calibration workload's f32 step, every time it ran
    for r in range(a.repeats):
        for shape in a.shapes.split(","):
            for mesh in a.meshes.split(","):
                # Calibrated right before the shape's cases on this mesh, so the machine's drift
                # between calibration and measurement is a minute's, not the run's.
                target = os.path.join(work, "cpu-%s-%s-%d.yml" % (shape, mesh, r))
                calibrations.setdefault(mesh, []).append(calibrate(a, MESHES[mesh], target,
                                              os.path.join(work, "calibrate-%s-%s-%d.log" % (shape, mesh, r))))
                for dtype in a.dtypes.split(","):
                    case = "%s-%s-%s" % (shape, dtype, mesh)
                    name = "%s-%d" % (case, r)
                    args = SHAPES[shape] + ["dtype=" + dtype] + MESHES[mesh]
                    m_step, m_split = measured(a, args, work, name)
                    p_step, p_split = predicted(a, args, target, work, name)
                    results.setdefault(case, []).append((m_step, m_split, p_step, p_split))
                    print("run %d  %-24s measured %.4f s  predicted %.4f s  error %+.1f%%" %
                          (r + 1, case, m_step, p_step, error(p_step, m_step)), flush=True)
    for mesh, steps in calibrations.items():
        print("\nThe calibration workload's f32 step on mesh %s over its %d calibrations: min %.3f s, median %.3f s, "
              "max %.3f s (how much the machine itself moved during the run)" %
              (mesh, len(steps), min(steps), statistics.median(steps), max(steps)))
    print("\nMedians over %d runs; the error is the median prediction's against the median measurement." % a.repeats)
    print("| case | measured s/step | predicted | error | runs' errors | by category, measured/predicted s "
          "(error where >= 5% of the step) |")
    print("|---|---:|---:|---:|---|---|")
    within, cats_within, cats_total = 0, 0, 0
    for case, runs in results.items():
        m = statistics.median(x[0] for x in runs)
        p = statistics.median(x[2] for x in runs)
        err = error(p, m)
        within += abs(err) <= 15
        cats = []
        for c in CATEGORIES:
            mc = statistics.median(x[1][c] for x in runs)
            pc = statistics.median(x[3][c] for x in runs)
            mark = ""
            if mc / m >= 0.05:
                cerr = error(pc, mc)
                cats_total += 1
                cats_within += abs(cerr) <= 25
                mark = " (%+.0f%%)" % cerr
            cats.append("%s %.3f/%.3f%s" % (c, mc, pc, mark))
        spread = ", ".join("%+.0f%%" % error(x[2], x[0]) for x in runs)
        print("| %s | %.4f | %.4f | %+.1f%% | %s | %s |" % (case, m, p, err, spread, "; ".join(cats)))
    print("\n%d of %d cases within 15%%; %d of %d categories (those holding 5%% of a step or more) within 25%%. "
          "Reproduce: /usr/bin/python3 bench/plan_vs_measured.py --kiln %s --steps %d --repeats %d --shapes %s "
          "--dtypes %s --meshes %s" % (within, len(results), cats_within, cats_total, a.kiln, a.steps, a.repeats,
                                       a.shapes, a.dtypes, a.meshes))


if __name__ == "__main__":
    main()
