#!/usr/bin/env python3
"""Per-device memory and collectives of the partitioned training step, for docs/sharding.md.

For each model and device count, `kiln compile ... --json` plans two meshes: pure FSDP
(ici_fsdp_parallelism=N) and FSDP x expert (ici_fsdp_parallelism=N/E ici_expert_parallelism=E).
Nothing is allocated or run: the step is traced, partitioned and compiled for one device, and
the report's memory_per_device_bytes, collectives and compile_seconds become one table row.
The model's own settings are kept (per_device_batch_size, max_target_length, dtype,
remat_policy from configs/base.yml and configs/models/MODEL.yml); --set adds key=value
overrides to every command.

Each compile runs under /usr/bin/time -v (os.wait4 where it is missing) for its wall time and
the kiln process's max RSS. Unless --cold, each command runs twice and the second run is the
one measured: the first builds the kernel libraries the cache lacks, and the C++ compiler it
starts for them would otherwise be counted in kiln's max RSS (a process's rusage includes its
reaped children) and in its compile seconds. A mesh that kiln rejects (a dimension its axes do not divide, ...)
is listed below the table with kiln's one-line error instead of numbers. A mesh rejected because
its axes do not divide a weight (gpt-oss's width 2880 = 2^6 * 45 splits at most 64 ways; JAX
refuses such shardings as well) is planned again with a data axis, d = 2, 4, ... taken from its
fsdp degree, and the first that plans becomes a row (--no-data-fallback: not).

Usage:
  python3 scripts/sharding_table.py [--kiln build/kiln] [--models gpt-oss-20b,gpt-oss-120b]
      [--devices 16,64,256] [--expert gpt-oss-20b=8,gpt-oss-120b=16] [--set key=value ...]
      [--timeout 900] [--json-dir DIR] [--cold]
Prints the markdown table, the exact command of each row, and the rejected meshes.
"""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = float(1 << 30)

# Expert-parallel degree per model when --expert does not name it: the gpt-oss-20b's 32 experts
# split 8 ways (4 per device), the gpt-oss-120b's 128 split 16 ways (8 per device). Other models
# take 8, or their expert count when it is smaller.
DEFAULT_EXPERT = {"gpt-oss-20b": 8, "gpt-oss-120b": 16}


def num_experts(model):
    """num_experts from configs/models/MODEL.yml, or None when the file does not set it."""
    path = os.path.join(ROOT, "configs", "models", model + ".yml")
    try:
        with open(path) as f:
            m = re.search(r"^num_experts:\s*([\d_]+)", f.read(), re.M)
    except OSError:
        return None
    return int(m.group(1).replace("_", "")) if m else None


def expert_degree(model, overrides):
    if model in overrides:
        return overrides[model]
    if model in DEFAULT_EXPERT:
        return DEFAULT_EXPERT[model]
    e = num_experts(model)
    return min(8, e) if e else 8


def meshes(model, devices, expert):
    """[(label, [key=value ...]) or (label, None, why)] for one model and device count."""
    out = [(f"fsdp={devices}", [f"ici_fsdp_parallelism={devices}"])]
    if devices % expert:
        out.append((f"fsdp={devices}/{expert} × expert={expert}", None,
                    f"expert degree {expert} does not divide {devices} devices"))
    else:
        out.append((f"fsdp={devices // expert} × expert={expert}",
                    [f"ici_fsdp_parallelism={devices // expert}", f"ici_expert_parallelism={expert}"]))
    return out


def label_of(mesh_args):
    """"data=4 × fsdp=64" from [ici_data_parallelism=4, ici_fsdp_parallelism=64], in their order."""
    parts = []
    for a in mesh_args:
        key, _, value = a.partition("=")
        parts.append(f"{key[len('ici_'):-len('_parallelism')]}={value}")
    return " × ".join(parts)


def data_meshes(mesh_args):
    """[args] for d = 2, 4, 8, ...: the mesh with its fsdp degree divided by d and a data axis
    of d (first), while d divides the fsdp degree."""
    fsdp = next(int(a.split("=")[1]) for a in mesh_args if a.startswith("ici_fsdp_parallelism="))
    out, d = [], 2
    while d <= fsdp and fsdp % d == 0:
        rest = [f"ici_fsdp_parallelism={fsdp // d}" if a.startswith("ici_fsdp_parallelism=") else a for a in mesh_args]
        out.append([f"ici_data_parallelism={d}"] + rest)
        d *= 2
    return out


def parse_time_v(text):
    """(wall seconds, max RSS bytes) from /usr/bin/time -v's report, or (None, None)."""
    wall = rss = None
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
    if m:
        wall = int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if m:
        rss = int(m.group(1)) * 1024
    return wall, rss


def run_timed(cmd, timeout):
    """Runs cmd; returns (exit code, or None when stopped at the timeout; stdout; stderr; wall s;
    max RSS bytes)."""
    time_bin = shutil.which("time", path="/usr/bin:/bin")
    with tempfile.NamedTemporaryFile("w+", suffix=".time") as report:
        argv = [time_bin, "-v", "-o", report.name] + cmd if time_bin else cmd
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            start = time.monotonic()
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, start_new_session=True)
            rc, rusage = None, None
            while True:
                pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    rc, rusage = os.waitstatus_to_exitcode(status), ru
                    proc.returncode = rc
                    break
                if time.monotonic() - start > timeout:
                    os.killpg(proc.pid, 9)  # the compile and the compilers it started
                    os.wait4(proc.pid, 0)
                    proc.returncode = -9  # so Popen's destructor does not wait for it again
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - start
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        report.seek(0)
        wall, rss = parse_time_v(report.read()) if time_bin else (None, None)
    if wall is None:
        wall = elapsed
    if rss is None and rusage is not None:
        rss = rusage.ru_maxrss * 1024  # Linux: kilobytes
    return rc, stdout, stderr, wall, rss


def error_line(stderr):
    """kiln's one-line error (`kiln: error: ...`), else the last line of stderr."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l.strip()
    return lines[-1].strip() if lines else "(no output)"


def collective_counts(coll):
    """{all-gather, reduce-scatter, all-reduce, all-to-all, other} from the report's collectives
    (kind -> count; the backend's *_start kinds, or the partitioner's plain ones)."""
    groups = {"all_gather": "ag", "reduce_scatter": "rs", "all_reduce": "ar",
              "all_to_all": "a2a", "ragged_all_to_all": "a2a"}
    counts = {"ag": 0, "rs": 0, "ar": 0, "a2a": 0, "other": {}}
    for kind, n in coll.items():
        base = kind[:-len("_start")] if kind.endswith("_start") else kind
        if base in groups:
            counts[groups[base]] += n
        else:
            counts["other"][kind] = n
    return counts


def fmt_gib(b):
    return f"{b / GIB:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"), help="the kiln binary")
    ap.add_argument("--models", default="gpt-oss-20b,gpt-oss-120b", help="comma-separated model names")
    ap.add_argument("--devices", default="16,64,256", help="comma-separated device counts")
    ap.add_argument("--expert", default="",
                    help="MODEL=DEGREE,... expert-parallel degree of the fsdp x expert mesh "
                         "(default gpt-oss-20b=8, gpt-oss-120b=16)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides added to every command (e.g. dtype=bfloat16 remat_policy=minimal)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per compile before it is stopped")
    ap.add_argument("--json-dir", default="", help="keep each compile's JSON report here")
    ap.add_argument("--no-data-fallback", dest="data_fallback", action="store_false",
                    help="do not plan a rejected mesh again with a data axis (by default a mesh whose axes "
                         "do not divide a weight is tried as data=2, 4, ... x the rest, the first that plans "
                         "becoming a row)")
    ap.add_argument("--cold", action="store_true",
                    help="measure the first run of each command (kernel builds included) instead of a second")
    args = ap.parse_args()

    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        sys.exit(f"sharding_table: no kiln binary at {args.kiln} (build it, or pass --kiln PATH)")
    models = [m for m in args.models.split(",") if m]
    devices = [int(d) for d in args.devices.split(",") if d]
    overrides = {}
    for item in filter(None, args.expert.split(",")):
        model, _, deg = item.partition("=")
        overrides[model] = int(deg)
    if args.json_dir:
        os.makedirs(args.json_dir, exist_ok=True)

    rows, commands, rejected = [], [], []
    runs = 0  # kiln invocations, warm-ups included
    started = time.monotonic()
    def measure(model, label, n, mesh_args):
        """Plans one mesh: appends its row and returns None, or returns why kiln rejected it."""
        nonlocal runs
        cmd = [args.kiln, "compile", f"model_name={model}", f"local_devices={n}"] + mesh_args + args.set + ["--json"]
        shown = " ".join(shlex.quote(c) for c in ["kiln"] + cmd[1:])
        print(f"[{time.monotonic() - started:7.1f} s] {model} {label} ...", file=sys.stderr, flush=True)
        built = None
        if not args.cold:
            rc, stdout, stderr, wall, rss = run_timed(cmd, args.timeout)
            runs += 1
            if rc == 0:
                built = json.loads(stdout).get("kernels_compiled")
                print(f"    warm-up: wall {wall:.1f} s, {built} kernel libraries built", file=sys.stderr,
                      flush=True)
        if args.cold or rc == 0:
            rc, stdout, stderr, wall, rss = run_timed(cmd, args.timeout)
            runs += 1
        if rc != 0:
            why = f"stopped after {args.timeout:g} s" if rc is None else error_line(stderr)
            print(f"    rejected: {why}", file=sys.stderr, flush=True)
            return why, shown
        report = json.loads(stdout)
        if args.json_dir:
            name = f"{model}_{label.replace(' × ', 'x').replace('=', '')}.json"
            with open(os.path.join(args.json_dir, name), "w") as f:
                json.dump(report, f, indent=2)
        mem = report["memory_per_device_bytes"]
        print(f"    {mem['total'] / GIB:.2f} GiB per device, wall {wall:.1f} s, max RSS {rss / 2**20:.0f} MiB",
              file=sys.stderr, flush=True)
        commands.append(shown)
        rows.append({"model": model, "mesh": report.get("mesh", label), "devices": n, "mem": mem,
                     "coll": collective_counts(report.get("collectives", {})),
                     "compile_s": report.get("compile_seconds", 0.0),
                     "kernels_built": report.get("kernels_compiled") if built is None else built, "wall": wall, "rss": rss,
                     "ref": len(commands)})
        return None

    for model in models:
        expert = expert_degree(model, overrides)
        for n in devices:
            for mesh in meshes(model, n, expert):
                label = mesh[0]
                if mesh[1] is None:
                    rejected.append((model, label, n, "(not run)", mesh[2]))
                    continue
                failed = measure(model, label, n, mesh[1])
                if failed is None:
                    continue
                why, shown = failed
                # A weight dimension the mesh's axes do not divide (JAX rejects such shardings
                # too): the same devices with a data axis as small as lets the rest divide it.
                if args.data_fallback and "not divisible" in why:
                    for data_args in data_meshes(mesh[1]):
                        data_label = label_of(data_args)
                        if measure(model, data_label, n, data_args) is None:
                            why += f" (in the table as {data_label})"
                            break
                rejected.append((model, label, n, shown, why))
    total = time.monotonic() - started

    copies = any(r["mem"].get("bf16_weight_copies", 0) for r in rows)
    head = ["model", "mesh", "devices", "parameters", "optimizer state"] + (["bf16 copies"] if copies else []) + \
           ["activations", "temporaries", "total", "AG", "RS", "AR", "A2A", "compile s", "wall s", "max RSS MiB", "cmd"]
    print("Per device, GiB (from `kiln compile --json`, nothing allocated). Collectives per step:")
    print("AG all-gather, RS reduce-scatter, AR all-reduce, A2A all-to-all (ragged and plain), counted as the")
    print("backend runs them (start/done pairs). Wall time and max RSS of the kiln process from /usr/bin/time -v"
          + (", first run (kernel builds included)." if args.cold else ", second run (kernel cache warm)."))
    print()
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|")
    for r in rows:
        m, c = r["mem"], r["coll"]
        cells = [r["model"], " × ".join(r["mesh"].replace(",", " ").split()), str(r["devices"]),
                 fmt_gib(m["parameters"]), fmt_gib(m["optimizer_state"])]
        if copies:
            cells.append(fmt_gib(m.get("bf16_weight_copies", 0)))
        cells += [fmt_gib(m["activations"]), fmt_gib(m["temporaries"]), fmt_gib(m["total"]),
                  str(c["ag"]), str(c["rs"]), str(c["ar"]), str(c["a2a"]),
                  f"{r['compile_s']:.1f}", f"{r['wall']:.1f}", f"{r['rss'] / 2**20:.0f}" if r["rss"] else "?",
                  f"[{r['ref']}]"]
        print("| " + " | ".join(cells) + " |")
    print()
    print("Commands:")
    print()
    for i, cmd in enumerate(commands, 1):
        print(f"{i}. `{cmd}`")
    other = {k: v for r in rows for k, v in r["coll"]["other"].items()}
    if other:
        print()
        print("Other collective kinds (not in the columns): " + ", ".join(f"{k} x{v}" for k, v in other.items()))
    if rejected:
        print()
        print("Rejected meshes:")
        print()
        for model, label, n, shown, why in rejected:
            print(f"- {model} {label} ({n} devices): `{why}`" + (f" — `{shown}`" if shown != "(not run)" else ""))
    print()
    print(f"Total runtime: {total:.1f} s, {runs} kiln runs ({'one per row' if args.cold else 'warm-ups included'}).")


if __name__ == "__main__":
    main()
