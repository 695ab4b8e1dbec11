#!/usr/bin/env python3
"""backend=pjrt (XLA's CPU plugin) beside backend=cpu (Kiln's own CPU compiler), same machine.

Trains the same model, config and batch on both backends and prints, per backend, the compile
time of the step, the init time, the median step time (steps 3 to --steps of each timed run,
--rounds runs in rotated order so neither always runs first) and the ratio pjrt / cpu, with the
first and last losses (they agree within a tolerance, not bitwise: XLA sums in its own order).
Adam's default epsilon (1e-8) turns the two backends' different rounding of near-zero gradients
into different whole updates, so over many steps on one reused batch their losses drift apart
(gpt-oss-small: 4e-2 by step 20); `--set adam_eps=1e-4` keeps them together, which is what the
`--check` of `make e2e` measures.
There is no speed goal for XLA:CPU: the PJRT backend is the path to GPUs and TPUs, and the CPU
plugin is how it is tested without them. The ratio says what XLA:CPU makes of Kiln's program.

Usage: /usr/bin/python3 bench/pjrt_vs_cpu.py [--kiln build/kiln] [--model gpt-oss-small]
       [--dtype bfloat16] [--batch 1] [--seq 256] [--steps 8] [--rounds 2] [--set KEY=VALUE ...] [--check 1e-3]
"""
import argparse
import re
import statistics
import subprocess
import tempfile


def run(kiln, backend, a, out):
    args = [kiln, "train", "model_name=" + a.model, "override_model_config=true", "steps=%d" % a.steps,
            "reuse_example_batch=1", "log_period=1", "enable_checkpointing=false", "dataset_type=synthetic",
            "per_device_batch_size=%d" % a.batch, "max_target_length=%d" % a.seq, "dtype=" + a.dtype,
            "base_output_directory=" + out, "run_name=bench_" + backend, "backend=" + backend] + a.set
    text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    times = [float(m) for m in re.findall(r"completed step: \d+, seconds: ([0-9.]+)", text)]
    losses = [float(m) for m in re.findall(r" loss: ([0-9.]+)", text)]
    compile_s = float(re.search(r"compile ([0-9.]+) s, init ([0-9.]+) s", text).group(1))
    init_s = float(re.search(r"compile ([0-9.]+) s, init ([0-9.]+) s", text).group(2))
    return times[2:], losses, compile_s, init_s


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln", default="build/kiln")
    p.add_argument("--model", default="gpt-oss-small")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another config key, for both")
    p.add_argument("--check", type=float, default=0,
                   help="fail when a step's loss differs between the backends by more than this, relative (make e2e)")
    a = p.parse_args()
    backends = ["cpu", "pjrt"]
    results = {b: {"times": [], "losses": None, "compile": [], "init": []} for b in backends}
    with tempfile.TemporaryDirectory() as out:
        for r in range(a.rounds):
            for b in backends[r % 2:] + backends[:r % 2]:
                times, losses, compile_s, init_s = run(a.kiln, b, a, out)
                results[b]["times"] += times
                results[b]["losses"] = losses
                results[b]["compile"].append(compile_s)
                results[b]["init"].append(init_s)
    print("%s, %s, batch %d x %d tokens%s, steps 3..%d of %d runs each" % (
        a.model, a.dtype, a.batch, a.seq, "".join(" " + kv for kv in a.set), a.steps, a.rounds))
    print("%-6s %10s %10s %12s %10s %10s" % ("backend", "compile s", "init s", "step s (med)", "loss 1", "loss last"))
    med = {}
    for b in backends:
        r = results[b]
        med[b] = statistics.median(r["times"])
        print("%-6s %10.2f %10.2f %12.3f %10.4f %10.4f" % (b, statistics.median(r["compile"]),
                                                           statistics.median(r["init"]), med[b], r["losses"][0],
                                                           r["losses"][-1]))
    print("step time pjrt / cpu: %.2f" % (med["pjrt"] / med["cpu"]))
    worst = max(abs(x - y) / abs(y) for x, y in zip(results["pjrt"]["losses"], results["cpu"]["losses"]))
    print("largest relative loss difference over %d steps: %.2e" % (len(results["cpu"]["losses"]), worst))
    if a.check > 0 and worst > a.check:
        raise SystemExit("pjrt's losses left the cpu backend's by %.2e > %.2e" % (worst, a.check))
    print("reproduce: /usr/bin/python3 bench/pjrt_vs_cpu.py --model %s --dtype %s --batch %d --seq %d --steps %d "
          "--rounds %d%s" % (a.model, a.dtype, a.batch, a.seq, a.steps, a.rounds, "".join(" --set " + kv for kv in a.set)))


if __name__ == "__main__":
    main()
