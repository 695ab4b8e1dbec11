#!/usr/bin/env python3
"""Start-up: the compiled, sharded init program vs the whole init program on the interpreter.

A run's initial parameters come from the init program (every parameter's initialiser:
truncated normals scaled by fan-in, normals, zeros and ones). Before the state was born
sharded, every process ran the whole program on the reference interpreter; now each device
runs its own shard of it, compiled (train/step/state_init.h). This script runs `kiln train ...
steps=0` (trace, compile, init, nothing else) three ways and reads the start-up line:

  interpreted   backend=interpreter, one device: the whole program on the interpreter
  compiled      the compiled init program, one device
  compiled x2   local_devices=2 ici_fsdp_parallelism=2: each device makes its half

for gpt-oss-small (60 M parameters) and for a model about ten times larger (gpt-oss-small
widened: 629 M parameters, 7 GiB of state), --rounds runs of each (median; the order
rotates between rounds), and prints the init time, the process's peak resident memory after
the init, and the speed-up over the interpreted init (the goal: 20x).

With --before OTHER_KILN (a build of an earlier commit), its interpreted init is timed too
and the speed-ups are also given against it ("interpreted before"): the interpreter shares
the generator with the compiled kernel, so making the generator faster made this build's
interpreted init faster as well.

Usage: /usr/bin/python3 bench/init_vs_interpreted.py [--kiln build/kiln] [--rounds 3] [--models small,large]
                                                     [--before OTHER_KILN]
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile

MODELS = {
    "small": ("gpt-oss-small", []),
    "large": ("gpt-oss-small x10.5", ["override_model_config=true", "base_emb_dim=1024", "base_mlp_dim=1024",
                                      "base_moe_mlp_dim=1024", "num_experts=16", "base_num_decoder_layers=12"]),
}
VARIANTS = [
    ("interpreted", ["backend=interpreter"]),
    ("compiled", []),
    ("compiled x2", ["local_devices=2", "ici_fsdp_parallelism=2"]),
]
INIT_LINE = re.compile(r"initialised (\d+) parameter tensors in ([0-9.]+) s .*?: ([0-9.]+) GiB of state on this "
                       r"process's (\d+) device\(s\), peak resident memory ([0-9.]+) GiB")
PARAMS_LINE = re.compile(r"\(([0-9,]+) total")


def init_once(kiln, extra, out):
    args = [kiln, "train", "model_name=gpt-oss-small", "steps=0", "enable_checkpointing=false",
            "base_output_directory=" + out, "run_name=init_bench"] + extra
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("kiln failed: %s\n%s" % (" ".join(args), proc.stderr.strip()[-2000:]))
    m = INIT_LINE.search(proc.stdout)
    p = PARAMS_LINE.search(proc.stdout)
    if not m or not p:
        sys.exit("no start-up line in the output of: " + " ".join(args))
    return float(m.group(2)), float(m.group(3)), float(m.group(5)), int(p.group(1).replace(",", ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kiln", default="build/kiln")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="small,large")
    parser.add_argument("--before", default="", help="another kiln binary whose interpreted init is timed too")
    args = parser.parse_args()
    variants = list(VARIANTS)
    if args.before:
        variants.insert(0, ("interp. before", ["backend=interpreter"]))

    rows = []
    for key in args.models.split(","):
        label, model_args = MODELS[key]
        times = {name: [] for name, _ in variants}
        peaks = {name: 0.0 for name, _ in variants}
        state = params = 0
        with tempfile.TemporaryDirectory() as out:
            for r in range(args.rounds):
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for name, extra in order:
                    kiln = args.before if name == "interp. before" else args.kiln
                    seconds, state_gib, peak_gib, params = init_once(kiln, model_args + extra, out)
                    times[name].append(seconds)
                    peaks[name] = max(peaks[name], peak_gib)
                    if name == "compiled":
                        state = state_gib
        base = statistics.median(times["interpreted"])
        before = statistics.median(times["interp. before"]) if args.before else 0.0
        for name, _ in variants:
            t = statistics.median(times[name])
            rows.append((label, params, state, name, t, peaks[name], base / t, before / t))

    print("\ninit program: compiled and sharded vs interpreted (median of %d runs; `kiln train ... steps=0`)" % args.rounds)
    print("%-20s %12s %9s  %-14s %9s %11s %12s %12s" % ("model", "parameters", "state", "init", "seconds",
                                                        "peak RSS", "vs interp.", "vs before"))
    for label, params, state, name, t, peak, speedup, vs_before in rows:
        print("%-20s %12s %6.2f GiB  %-14s %9.3f %7.2f GiB %11.1fx %11s" % (
            label, "{:,}".format(params), state, name, t, peak, speedup,
            "%.1fx" % vs_before if args.before else "-"))
    compiled = [r for r in rows if r[3].startswith("compiled")]
    worst = min(r[6] for r in compiled)
    print("goal: compiled init at least 20x faster than this build's interpreted init: %s (lowest %.1fx)"
          % ("met" if worst >= 20 else "NOT met", worst))
    if args.before:
        worst_before = min(r[7] for r in compiled)
        print("      and than the interpreted init of %s: %s (lowest %.1fx)"
              % (args.before, "met" if worst_before >= 20 else "NOT met", worst_before))
    print("command: /usr/bin/python3 bench/init_vs_interpreted.py --kiln %s --rounds %d --models %s%s"
          % (args.kiln, args.rounds, args.models, " --before " + args.before if args.before else ""))


if __name__ == "__main__":
    main()
