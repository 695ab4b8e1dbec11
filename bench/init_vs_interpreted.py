#!/usr/bin/env python3
"""Start-up: the compiled, sharded init program vs the whole init program on the interpreter.

A run's initial parameters come from the init program (every parameter's initialiser:
truncated normals scaled by fan-in, normals, zeros and ones). Before the state was born
sharded, every process ran the whole program on the reference interpreter; now each device
runs its own shard of it, compiled (train/state_init.h). This script runs `kiln train ...
steps=0` (trace, compile, init, nothing else) three ways and reads the start-up line:

  interpreted   executor=interpreter, one device: the whole program on the interpreter
  compiled      the compiled init program, one device
  compiled x2   local_devices=2 ici_fsdp_parallelism=2: each device makes its half

for gpt-oss-small (60 M parameters) and for a model about ten times larger (gpt-oss-small
widened: 629 M parameters, 7 GiB of state), --rounds runs of each (median; the order
rotates between rounds), and prints the init time, the process's peak resident memory after
the init, and the speed-up over the interpreted init (the goal: 20x).

Usage: /usr/bin/python3 bench/init_vs_interpreted.py [--kiln build/kiln] [--rounds 3] [--models small,large]
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
    ("interpreted", ["executor=interpreter"]),
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
    args = parser.parse_args()

    rows = []
    for key in args.models.split(","):
        label, model_args = MODELS[key]
        times = {name: [] for name, _ in VARIANTS}
        peaks = {name: 0.0 for name, _ in VARIANTS}
        state = params = 0
        with tempfile.TemporaryDirectory() as out:
            for r in range(args.rounds):
                order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
                for name, extra in order:
                    seconds, state_gib, peak_gib, params = init_once(args.kiln, model_args + extra, out)
                    times[name].append(seconds)
                    peaks[name] = max(peaks[name], peak_gib)
                    if name == "compiled":
                        state = state_gib
        base = statistics.median(times["interpreted"])
        for name, _ in VARIANTS:
            t = statistics.median(times[name])
            rows.append((label, params, state, name, t, peaks[name], base / t))

    print("\ninit program: compiled and sharded vs interpreted (median of %d runs; `kiln train ... steps=0`)" % args.rounds)
    print("%-20s %12s %9s  %-12s %9s %11s %9s" % ("model", "parameters", "state", "init", "seconds", "peak RSS",
                                                 "speed-up"))
    for label, params, state, name, t, peak, speedup in rows:
        print("%-20s %12s %6.2f GiB  %-12s %9.3f %7.2f GiB %8.1fx" % (label, "{:,}".format(params), state, name, t,
                                                                    peak, speedup))
    worst = min(s for _, _, _, name, _, _, s in rows if name != "interpreted")
    print("goal: compiled init at least 20x faster than interpreted: %s (lowest %.1fx)"
          % ("met" if worst >= 20 else "NOT met", worst))
    print("command: /usr/bin/python3 bench/init_vs_interpreted.py --kiln %s --rounds %d --models %s"
          % (args.kiln, args.rounds, args.models))


if __name__ == "__main__":
    main()
