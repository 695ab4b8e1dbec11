#!/usr/bin/env python3
"""Per-device memory of models compiled ahead of time for named hardware, for docs/sharding.md
and docs/seed.md: Kiln's own plan beside XLA's, from

  kiln compile MODEL backend=pjrt compile_topology=TOPOLOGY ici_fsdp_parallelism=N --json

(nothing is allocated or run; XLA compiles for the slice without its hardware: the CUDA plugin
for h100-N, libtpu for v5p-N/v6e-N, which must be installed: make setup-tpu). A config that does
not fit is a row too: kiln's one-line verdict, with the smallest change that fits, follows the
table.

Usage:
  python3 scripts/aot_table.py [--kiln build/kiln] [--rows MODEL:TOPOLOGY:FSDP,...]
      [--set key=value ...] [--timeout 3600] [--json-dir DIR]
Default rows: gpt-oss-20b and gpt-oss-120b on h100-16 and h100-64 (fsdp over every GPU) and on
v5p-64 (32 chips, fsdp 32).
"""
import argparse
import json
import os
import subprocess
import sys
import time

GIB = float(1 << 30)
DEFAULT_ROWS = ",".join(
    f"{m}:{t}:{f}"
    for m in ("gpt-oss-20b", "gpt-oss-120b")
    for t, f in (("h100-16", 16), ("h100-64", 64), ("v5p-64", 32))
)


def gib(b):
    return f"{b / GIB:.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", default="build/kiln")
    p.add_argument("--rows", default=DEFAULT_ROWS)
    p.add_argument("--set", nargs="*", default=[])
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--json-dir", default="")
    a = p.parse_args()

    header = ("| model | topology | mesh | Kiln: state | Kiln: activations + temporaries | Kiln: total | "
              "XLA: arguments | XLA: temporaries | XLA: peak | capacity | fits | XLA fusions | "
              "all-gathers | reduce-scatters | all-to-alls | XLA compile s |")
    rows, notes = [header, "|" + "---|" * 16], []
    for spec in a.rows.split(","):
        model, topology, fsdp = spec.split(":")
        args = [a.kiln, "compile", f"model_name={model}", "backend=pjrt", f"compile_topology={topology}",
                f"ici_fsdp_parallelism={fsdp}", "--json"] + a.set
        cmd = " ".join(args[1:])
        start = time.time()
        try:
            r = subprocess.run(args, capture_output=True, text=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            notes.append(f"- {model} on {topology}: no result within {a.timeout} s — `kiln {cmd}`")
            continue
        wall = time.time() - start
        try:
            j = json.loads(r.stdout)
        except json.JSONDecodeError:
            last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            notes.append(f"- {model} on {topology}: `{last}` — `kiln {cmd}`")
            continue
        if a.json_dir:
            os.makedirs(a.json_dir, exist_ok=True)
            with open(os.path.join(a.json_dir, f"{model}-{topology}.json"), "w") as f:
                json.dump(j, f, indent=1)
        km = j["kiln_plan"]["memory_per_device_bytes"]
        state = km["parameters"] + km["optimizer_state"] + km["bf16_weight_copies"]
        x = j.get("xla_report")
        cap = j["kiln_plan"]["memory_capacity_gib"]
        if x:
            xm, c = x["memory_per_device_bytes"], x["census"]["collectives"]
            xla = [gib(xm["arguments"]), gib(xm["temporaries"]), gib(xm["peak"])]
            census = [str(x["census"]["fusions"]), str(c.get("all-gather", 0)), str(c.get("reduce-scatter", 0)),
                      str(c.get("all-to-all", 0) + c.get("ragged-all-to-all", 0)), f"{x['compile_seconds']:.0f}"]
        else:
            xla, census = ["-", "-", "-"], ["-"] * 4 + ["not compiled"]
        rows.append("| " + " | ".join([model, topology, j["kiln_plan"]["mesh"], gib(state),
                                       gib(km["activations"] + km["temporaries"]), gib(km["total"])] + xla +
                                      [f"{cap:.1f}", "yes" if j.get("fits") else "**no**"] + census) + " |")
        if not j.get("fits"):
            last = (r.stderr.strip().splitlines() or [""])[-1]
            notes.append(f"- {model} on {topology}: `{last}`")
        notes.append(f"- `kiln {cmd}` ({wall:.0f} s wall)")
        print(rows[-1], file=sys.stderr, flush=True)
    print("\n".join(rows))
    print()
    print("\n".join(notes))


if __name__ == "__main__":
    main()
