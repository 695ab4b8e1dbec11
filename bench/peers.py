#!/usr/bin/env python3
"""Kiln against its peers: the same GPT-OSS training step (same model, shapes, batch,
sequence, initial weights, AdamW hyperparameters and learning-rate schedule, 2 threads) in

  kiln            Kiln (`build/kiln train`), f32 and dtype=bfloat16 weight_dtype=float32
  torch2-eager    PyTorch 2 from PyPI (the project venv), eager
  torch2-compile  the same under torch.compile (Inductor's CPU backend)
  jax             JAX/XLA on the CPU: the whole step under jax.jit with optax.adamw, the
                  model as MaxText writes it (bench/jax_gpt_oss.py)
  torch1.13       Debian's PyTorch 1.13 (/usr/bin/python3), eager: bench/step_vs_torch.py's
                  model (per-expert MoE loop), kept for continuity
  jax-ragged      (not in the default set) jax with MaxText's megablox=false MoE,
                  jax.lax.ragged_dot, which XLA:CPU runs as a dense product (E x the FLOPs)
  torch2-loop     (not in the default set) torch2-eager with step_vs_torch's per-expert loop

Each system runs in its own process, one after another (never two at once), with
OMP_NUM_THREADS / torch.set_num_threads = --threads. Every system starts from the same
weights: Kiln's own initialisation (init_weights_seed=0, saved by a 0-step `kiln train`)
with the constant-initialised tensors (biases, sinks, norm scales) perturbed by seeded
noise so that every term of the model counts, read through safetensors by the peers and
through load_parameters_path by Kiln; every system trains on Kiln's synthetic batch
(reuse_example_batch=1, regenerated bit for bit in bench/peers_common.py). No side
rematerialises (Kiln runs remat_policy=none).

Reported per shape, dtype and system: the median step time after --warmup steps, tokens/s,
the system's step time over Kiln's (same dtype), TFLOP/s by MaxText's formula (as Kiln logs
it), MFU against the peak measured in the same run (build/bench/cpu_peak_bench: f32 FMA for
f32 runs, bf16 dot product for bf16 runs), the compile time (Kiln: trace + compile from its
start-up report; jax: lower + XLA compile; torch.compile: step 0 minus the median step), the
time to the end of the first step (from the start of tracing; eager: step 0), and the loss
at step 0 and at the last step with their relative difference from Kiln's.

Usage: /usr/bin/python3 bench/peers.py [--steps 8] [--warmup 2] [--shapes small,moe] [--dtypes float32,bfloat16]
         [--systems kiln,torch2-eager,torch2-compile,jax,torch1.13] [--quick] [--json OUT.json]
         [--allocator tcmalloc|jemalloc|system] [--warm-caches] [--kiln build/kiln]
(the driver needs only the standard library and numpy: Debian's /usr/bin/python3 or the venv's
python; the workers run under the interpreter each system names.)
"""
import argparse
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cpu_peaks  # noqa: E402
import peers_common as pc  # noqa: E402

VENV_PYTHON = os.path.join(ROOT, ".venv", "bin", "python")
DEBIAN_PYTHON = "/usr/bin/python3"

SHAPES = {
    "small": ["model_name=gpt-oss-small"],
    # The MoE shape: 4 layers, d 512, 8 q / 2 kv heads of 64, 8 experts top-2 of width 1024,
    # vocab 32000, batch 8 x 256. gpt-oss-small.yml sets base_moe_mlp_dim, which is the
    # expert width (derived moe_mlp_dim); base_mlp_dim alone would leave it at 512.
    "moe": ["model_name=gpt-oss-small", "override_model_config=true", "base_num_decoder_layers=4",
            "base_emb_dim=512", "base_num_query_heads=8", "base_num_kv_heads=2", "head_dim=64", "num_experts=8",
            "num_experts_per_tok=2", "base_mlp_dim=1024", "base_moe_mlp_dim=1024", "vocab_size=32000",
            "max_target_length=256", "per_device_batch_size=8"],
}
DTYPES = {"float32": ["dtype=float32", "weight_dtype=float32"],
          "bfloat16": ["dtype=bfloat16", "weight_dtype=float32"]}
DEFAULT_SYSTEMS = ["kiln", "torch2-eager", "torch2-compile", "jax", "torch1.13"]
ALL_SYSTEMS = DEFAULT_SYSTEMS + ["jax-ragged", "torch2-loop"]
ALLOCATORS = {"tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
              "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}
COMMON_KILN_ARGS = ["reuse_example_batch=1", "learning_rate=1e-4", "remat_policy=none"]

# ------------------------------------------------------------------------------------------
# The machine's peak, measured in this run

def measure_peaks(kiln, seconds):
    """(f32 GFLOP/s, bf16 GFLOP/s, how) for all cores: build/bench/cpu_peak_bench, which runs the
    measurement kiln train itself uses (bench/cpu_peaks.py reads its output)."""
    bench_dir = os.path.join(os.path.dirname(os.path.abspath(kiln)), "bench")
    if not os.access(os.path.join(bench_dir, "cpu_peak_bench"), os.X_OK):
        raise SystemExit(f"peers: {bench_dir}/cpu_peak_bench is missing: build it (make build)")
    peaks = cpu_peaks.measure(bench_dir, seconds)
    return 1e3 * peaks["f32"], 1e3 * peaks["bf16"], "build/bench/cpu_peak_bench %g" % seconds


# ------------------------------------------------------------------------------------------
# Running the systems


def run_logged(cmd, env, log_path, timeout):
    with open(log_path, "w") as log:
        log.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        log.flush()
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = open(log_path).read()[-3000:]
        raise RuntimeError("exit code %d; the end of %s:\n%s" % (proc.returncode, log_path, tail))
    return wall


def base_env(a, work, allocator=True):
    env = dict(os.environ)
    threads = str(a.threads)
    env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads,
                "PYTHONUNBUFFERED": "1", "KILN_PROGRESS": "plain"})
    env.pop("LD_PRELOAD", None)
    if allocator and a.allocator != "system":
        env["LD_PRELOAD"] = ALLOCATORS[a.allocator]
    if not a.warm_caches:
        env["KILN_CACHE_DIR"] = os.path.join(work, "kiln_cache")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(work, "inductor_cache")
    return env


def run_kiln(a, shape_args, dtype, weights_dir, work, log):
    out = os.path.join(work, "out")
    cmd = [a.kiln, "train"] + shape_args + DTYPES[dtype] + COMMON_KILN_ARGS + [
        "steps=%d" % a.steps, "enable_checkpointing=false", "run_name=bench", "base_output_directory=" + out,
        "load_parameters_path=" + weights_dir]
    run_logged(cmd, base_env(a, work, allocator=False), log, a.timeout)
    text = open(log).read()
    m = re.search(r"compile/trace time: [\d.]+ s \(trace ([\d.]+) s, compile ([\d.]+) s", text)
    compile_s = float(m.group(1)) + float(m.group(2)) if m else None
    m = re.search(r"per device per step: ([\d.e+-]+) learnable \+ ([\d.e+-]+) attention TFLOPs", text)
    kiln_tflops = float(m.group(1)) + float(m.group(2)) if m else None
    records = [json.loads(line) for line in open(os.path.join(out, "bench", "metrics.jsonl")) if line.strip()]
    times = [r["step_time_s"] for r in records]
    return {"times": times, "losses": [r["loss"] for r in records], "compile_s": compile_s,
            "first_step_s": (compile_s or 0) + times[0], "kiln_tflops": kiln_tflops,
            "info": {"cmd": " ".join(cmd)}}


def run_python_worker(a, system, dtype, spec_path, weights_file, work, log):
    out = os.path.join(work, "result.json")
    env = base_env(a, work)
    if system.startswith("jax"):
        flags = "--xla_force_host_platform_device_count=1"
        env["XLA_FLAGS"] = (flags + " " + a.xla_flags).strip()
        cmd = [VENV_PYTHON, os.path.join(HERE, "jax_gpt_oss.py"), spec_path, weights_file, out, "--dtype", dtype,
               "--steps", str(a.steps), "--moe", "ragged" if system == "jax-ragged" else "tiled"]
        if a.jax_tile:
            cmd += ["--tile", str(a.jax_tile)]
    else:
        python = DEBIAN_PYTHON if system == "torch1.13" else VENV_PYTHON
        mode = "compile" if system == "torch2-compile" else "eager"
        moe = "loop" if system in ("torch1.13", "torch2-loop") else a.torch_moe
        cmd = [python, os.path.join(HERE, "torch_gpt_oss.py"), spec_path, weights_file, out, "--dtype", dtype,
               "--mode", mode, "--moe", moe, "--steps", str(a.steps), "--threads", str(a.threads)]
        if mode == "compile" and a.compile_mode:
            cmd += ["--compile-mode", a.compile_mode]
    run_logged(cmd, env, log, a.timeout)
    result = json.load(open(out))
    result["info"]["cmd"] = " ".join(shlex.quote(c) for c in cmd)
    return result


# ------------------------------------------------------------------------------------------
# Report


def fmt(x, spec="%.3f"):
    return "—" if x is None else spec % x


def rel(x, ref):
    return None if x is None or ref is None else abs(x - ref) / abs(ref)


def summarise(results, peaks, a):
    lines = []
    head = ("| shape | dtype | system | step (s) | tokens/s | × Kiln | TFLOP/s | MFU | compile (s) | first step (s) "
            "| loss, step 0 | rel. diff | loss, last step | rel. diff |")
    lines.append(head)
    lines.append("|" + "|".join(["---"] * (head.count("|") - 1)) + "|")
    for r in results:
        kiln = next((k for k in results if k["shape"] == r["shape"] and k["dtype"] == r["dtype"]
                     and k["system"] == "kiln" and "error" not in k), None)
        if "error" in r:
            lines.append("| %s | %s | %s | failed: %s |" % (r["shape"], r["dtype"], r["system"], r["error"][:120]
                                                            .replace("\n", " ").replace("|", "/")))
            continue
        peak = peaks["bfloat16" if r["dtype"] == "bfloat16" and peaks["bfloat16"] else "float32"]
        t = r["median_s"]
        ratio = t / kiln["median_s"] if kiln and r is not kiln else (1.0 if r is kiln else None)
        tf = r["tflop_per_step"] / t
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["shape"], r["dtype"], r["system"], fmt(t), fmt(r["tokens"] / t, "%.0f"), fmt(ratio, "%.2f"),
            fmt(tf, "%.4f"), fmt(100 * tf * 1e3 / peak, "%.1f%%"), fmt(r["compile_s"], "%.1f"),
            fmt(r["first_step_s"], "%.1f"), fmt(r["losses"][0], "%.6f"),
            fmt(rel(r["losses"][0], kiln["losses"][0]) if kiln else None, "%.1e"), fmt(r["losses"][-1], "%.6f"),
            fmt(rel(r["losses"][-1], kiln["losses"][-1]) if kiln else None, "%.1e")))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--steps", type=int, default=8, help="steps per run (default 8)")
    ap.add_argument("--warmup", type=int, default=2, help="first steps left out of the median (default 2)")
    ap.add_argument("--shapes", default="small,moe", help="comma list of " + ",".join(SHAPES))
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help="comma list of " + ",".join(ALL_SYSTEMS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="smoke test: --steps 3 --warmup 1")
    ap.add_argument("--allocator", default="tcmalloc", choices=["tcmalloc", "jemalloc", "system"],
                    help="LD_PRELOAD for the Python peers (default tcmalloc, Debian's libtcmalloc-minimal4)")
    ap.add_argument("--warm-caches", action="store_true",
                    help="use Kiln's and Inductor's usual kernel caches (default: fresh empty ones, so compile "
                         "times are cold and do not depend on earlier runs)")
    ap.add_argument("--torch-moe", default="grouped", choices=["grouped", "loop"], help="MoE of torch2-eager/-compile")
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (default: PyTorch's default)")
    ap.add_argument("--jax-tile", type=int, default=0, help="row tile of jax's MoE (0: auto)")
    ap.add_argument("--xla-flags", default="", help="more XLA_FLAGS for the jax systems")
    ap.add_argument("--peak-seconds", type=float, default=0.3)
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per system run")
    ap.add_argument("--json", default="", help="write every result (step times, losses, settings) here")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, weights)")
    a = ap.parse_args()
    if a.quick:
        a.steps, a.warmup = 3, 1
    if a.steps <= a.warmup:
        raise SystemExit("peers: --steps must exceed --warmup")
    shapes, dtypes, systems = a.shapes.split(","), a.dtypes.split(","), a.systems.split(",")
    for s in shapes:
        if s not in SHAPES:
            raise SystemExit("peers: unknown shape %s (known: %s)" % (s, ", ".join(SHAPES)))
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit("peers: unknown dtype %s (known: %s)" % (d, ", ".join(DTYPES)))
    for s in systems:
        if s not in ALL_SYSTEMS:
            raise SystemExit("peers: unknown system %s (known: %s)" % (s, ", ".join(ALL_SYSTEMS)))
    if a.allocator != "system" and not os.path.exists(ALLOCATORS[a.allocator]):
        print("peers: %s is not installed (apt-get install %s); using the system allocator" % (
            ALLOCATORS[a.allocator], "libtcmalloc-minimal4" if a.allocator == "tcmalloc" else "libjemalloc2"))
        a.allocator = "system"
    if "torch1.13" in systems:
        blas = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
        if "openblas" not in blas:
            print("peers: warning: Debian's libblas.so.3 is %s (the reference BLAS); run scripts/setup_bench.sh "
                  "for the OpenMP OpenBLAS that `make bench` uses" % blas)

    started = time.time()
    work = tempfile.mkdtemp(prefix="kiln_peers_")
    print("peers: work directory %s (logs per run)" % work, flush=True)
    f32_peak, bf16_peak, peak_how = measure_peaks(a.kiln, a.peak_seconds)
    peaks = {"float32": f32_peak, "bfloat16": bf16_peak}
    print("peers: measured peak of the %d cores: f32 FMA %.1f GFLOP/s, bf16 dot %s GFLOP/s (%s)" % (
        os.cpu_count(), f32_peak, fmt(bf16_peak, "%.1f"), peak_how), flush=True)

    results = []
    for shape in shapes:
        shape_dir = os.path.join(work, shape)
        os.makedirs(shape_dir)
        spec = pc.model_spec(pc.resolved_config(a.kiln, SHAPES[shape] + ["steps=%d" % a.steps] + COMMON_KILN_ARGS))
        spec_path = os.path.join(shape_dir, "spec.json")
        json.dump(spec, open(spec_path, "w"), indent=1)
        learnable, attention = pc.maxtext_tflops_per_step(spec)
        tokens = spec["batch"] * spec["seq_len"]
        # The initial weights: Kiln's initialisation, saved by a 0-step run, then perturbed.
        init_out = os.path.join(shape_dir, "init")
        run_logged([a.kiln, "train"] + SHAPES[shape] + COMMON_KILN_ARGS + ["steps=0", "run_name=init",
                    "base_output_directory=" + init_out, "async_checkpointing=false"],
                   base_env(a, shape_dir, allocator=False), os.path.join(shape_dir, "init.log"), a.timeout)
        weights_dir = os.path.join(shape_dir, "weights", "0")
        changed = pc.perturb_checkpoint(os.path.join(init_out, "init", "checkpoints", "0"), weights_dir)
        weights_file = os.path.join(weights_dir, "shard-0.safetensors")
        print("peers: %s: %d layers, d %d, %d/%d heads x %d, %d experts top-%d of width %d, vocab %d, batch %d x %d; "
              "%.4f TFLOP per step (MaxText formula); initial weights %s (%d constant tensors perturbed)" % (
                  shape, spec["layers"], spec["d_model"], spec["heads"], spec["kv_heads"], spec["head_dim"],
                  spec["experts"], spec["top_k"], spec["mlp_dim"], spec["vocab"], spec["batch"], spec["seq_len"],
                  learnable + attention, weights_dir, changed), flush=True)
        for dtype in dtypes:
            for system in systems:
                run_dir = os.path.join(shape_dir, dtype, system)
                os.makedirs(run_dir)
                log = os.path.join(run_dir, "log.txt")
                entry = {"shape": shape, "dtype": dtype, "system": system, "tokens": tokens,
                         "tflop_per_step": learnable + attention, "log": log}
                t0 = time.perf_counter()
                try:
                    if system == "kiln":
                        r = run_kiln(a, SHAPES[shape], dtype, weights_dir, run_dir, log)
                        if r["kiln_tflops"] and abs(r["kiln_tflops"] - entry["tflop_per_step"]) > 1e-4 * r["kiln_tflops"]:
                            print("peers: warning: Kiln counts %.6f TFLOP per step, peers_common %.6f" % (
                                r["kiln_tflops"], entry["tflop_per_step"]))
                    else:
                        r = run_python_worker(a, system, dtype, spec_path, weights_file, run_dir, log)
                    entry.update(r)
                    entry["median_s"] = statistics.median(r["times"][a.warmup:])
                    if system == "torch2-compile":
                        entry["compile_s"] = r["times"][0] - entry["median_s"]
                    print("peers: %-5s %-8s %-14s median step %.3f s (steps %s), loss %.6f -> %.6f  [%.0f s]" % (
                        shape, dtype, system, entry["median_s"], " ".join("%.2f" % t for t in r["times"]),
                        r["losses"][0], r["losses"][-1], time.perf_counter() - t0), flush=True)
                except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
                    entry["error"] = str(e)
                    print("peers: %s %s %s FAILED: %s" % (shape, dtype, system, e), flush=True)
                results.append(entry)

    table = summarise(results, peaks, a)
    command = " ".join([sys.executable, "bench/peers.py"] + [shlex.quote(x) for x in sys.argv[1:]])
    print()
    print("## Kiln vs peers: GPT-OSS training step, %d threads, %s" % (a.threads, time.strftime("%Y-%m-%d")))
    print()
    print("Median of steps %d-%d of %d (reused synthetic batch); MFU against the peak measured in this run "
          "(f32 rows: f32 FMA %.1f GFLOP/s; bf16 rows: bf16 dot %s GFLOP/s; %s); TFLOP/s by MaxText's formula "
          "(as Kiln logs it); × Kiln = step time over Kiln's, same dtype; compile: Kiln trace + compile, jax lower "
          "+ compile, torch.compile step 0 minus the median step; first step: from the start of tracing to the end "
          "of step 0; rel. diff: |loss - Kiln's| / Kiln's (same dtype); Python peers with LD_PRELOAD=%s; %s kernel "
          "caches." % (a.warmup, a.steps - 1, a.steps, f32_peak, fmt(bf16_peak, "%.1f"), peak_how, a.allocator,
                       "warm" if a.warm_caches else "cold (empty)"))
    print()
    print(table)
    print()
    for shape in shapes:
        f32 = next((r for r in results if r["shape"] == shape and r["dtype"] == "float32" and r["system"] == "kiln"
                    and "error" not in r), None)
        if f32 is None:
            continue
        for r in results:
            if r["shape"] == shape and r["dtype"] == "bfloat16" and "error" not in r:
                print("bf16 vs Kiln f32, %s %s: step-0 loss %.6f vs %.6f (rel. %.1e)" % (
                    shape, r["system"], r["losses"][0], f32["losses"][0], rel(r["losses"][0], f32["losses"][0])))
    print()
    print("reproduce: %s" % command)
    print("total wall time: %.0f s" % (time.time() - started))
    if a.json:
        json.dump({"command": command, "peaks_gflops": peaks, "peak_how": peak_how, "results": results,
                   "args": vars(a)}, open(a.json, "w"), indent=1)
    if not a.keep:
        # Keep the logs of failed runs only.
        if not any("error" in r for r in results):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("peers: logs kept in %s" % work)


if __name__ == "__main__":
    main()
