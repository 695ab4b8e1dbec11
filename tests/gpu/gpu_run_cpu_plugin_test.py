#!/usr/bin/python3
"""make gpu's real command lines, on XLA's CPU plugin in place of the CUDA one.

bench/gpu_run.py with a fake nvidia-smi (an H100), the real kiln and `--plugin` the venv's
xla_cpu_pjrt.so, both models shrunk with --set (d 64, 4 experts, vocab 256, 2 x 64 tokens;
the large one at 2 layers), 3 steps: Kiln's 0-step run saves the initial weights, they are
perturbed, the small Kiln run starts from them, the large one runs configs/gpt-oss-3.5b-v6e4.yml
on one device through backend=pjrt; every run finishes all its steps and is parsed (step
times, losses from metrics.jsonl, Kiln's FLOPs equal to the driver's). When the venv has
JAX, the JAX side runs too and its small step-0 loss, on the same weights, is Kiln's to 1e-2
(bf16 compute on both sides). Skipped (77) without the CPU plugin. About 2 minutes on 2 cores.

Usage: gpu_run_cpu_plugin_test.py --kiln build/kiln --venv-python .venv/bin/python
"""
import argparse
import glob
import json
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHRINK = ["base_emb_dim=64", "base_num_query_heads=4", "base_num_kv_heads=2", "head_dim=16", "base_mlp_dim=64",
          "base_moe_mlp_dim=32", "num_experts=4", "vocab_size=256", "max_target_length=64", "per_device_batch_size=2"]


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--venv-python", required=True)
    a = ap.parse_args()
    venv = os.path.dirname(os.path.dirname(a.venv_python))
    plugins = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "xla_plugins", "xla_cpu_pjrt",
                                     "xla_cpu_pjrt.so"))
    if not plugins:
        print("skipped: no XLA CPU plugin in %s (make build installs it)" % venv)
        sys.exit(77)
    has_jax = subprocess.run([a.venv_python, "-c", "import jax"], capture_output=True).returncode == 0
    with tempfile.TemporaryDirectory(prefix="kiln_gpu_cpu_plugin_") as work:
        fake = os.path.join(work, "bin")
        os.makedirs(fake)
        smi = os.path.join(fake, "nvidia-smi")
        with open(smi, "w") as f:
            f.write('#!/bin/sh\ncase "$*" in *memory.used*) echo 100 ;; *) echo "NVIDIA H100 80GB HBM3, 81559" ;; '
                    'esac\n')
        os.chmod(smi, os.stat(smi).st_mode | stat.S_IXUSR)
        out = os.path.join(work, "out")
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "gpu_run.py"), "--kiln", a.kiln, "--plugin",
               plugins[0], "--python", a.venv_python, "--steps", "3", "--warmup", "1", "--large-layers", "2",
               "--out-dir", out, "--time-limit", "540", "--sides", "kiln,jax" if has_jax else "kiln"]
        for kv in SHRINK:
            cmd += ["--set", kv]
        env = dict(os.environ, PATH=fake + ":/usr/bin:/bin", OMP_NUM_THREADS="1")
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=590)
        print(r.stdout[-4000:])
        check(r.returncode == 0, "exit 0, got %d\n%s" % (r.returncode, r.stderr[-3000:]))
        res = json.load(open(os.path.join(out, "gpu_results.json")))
        by = {(e["model"], e["side"]): e for e in res["results"]}
        want = {("small", "kiln"), ("large", "kiln")} | ({("small", "jax"), ("large", "jax")} if has_jax else set())
        check(set(by) == want, "the runs: %s" % sorted(by))
        for key, e in by.items():
            check(e["status"] == 0 and e["steps_done"] == 3 and e["median_s"] > 0 and e["loss0"] > 0,
                  "%s: 3 steps, parsed: %s" % (key, {k: e.get(k) for k in ("status", "steps_done", "median_s",
                                                                             "loss0", "note")}))
            if key[1] == "kiln":
                check(abs(e["kiln_tflop_per_step"] - e["tflop_per_step"]) <= 1e-3 * e["tflop_per_step"],
                      "%s: Kiln's FLOPs %s vs the driver's %s" % (key, e["kiln_tflop_per_step"], e["tflop_per_step"]))
                check(e.get("memory_gib") is not None and e.get("compile_s") is not None, "%s: memory, compile" % (
                    key,))
        log = open(by[("small", "kiln")]["log"]).read()
        check("load_parameters_path=" in log.splitlines()[0], "small kiln starts from the saved, perturbed weights")
        check(res["plans"]["large"]["spec"]["layers"] == 2, "large: 2 layers")
        if has_jax:
            k, j = by[("small", "kiln")]["loss0"], by[("small", "jax")]["loss0"]
            check(abs(k - j) <= 1e-2 * abs(k), "small step-0 loss on the same weights: kiln %s, jax %s" % (k, j))
        else:
            print("note: the venv has no JAX (make bench installs it): the JAX side not run")
    print("PASS")


if __name__ == "__main__":
    main()
