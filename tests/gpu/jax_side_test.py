#!/usr/bin/python3
"""make gpu's JAX side on the CPU (bench/jax_gpt_oss.py, what a GPU image without optax runs):

  - `--adamw jax` (AdamW written in JAX) gives optax's losses step for step (4 steps of a
    shrunk gpt-oss-tiny, f32, learning rate 1e-2 so the updates matter): relative 1e-5, the
    float32 rounding of the same operations in another order through XLA's fusion;
  - with optax hidden (an `optax` module that raises ImportError first on the path) `auto`
    falls back to it and says so in the result;
  - `--remat` (jax.checkpoint per layer) gives the losses without it (1e-5: the same
    operations, recomputed);
  - WEIGHTS `-` draws Kiln's initialisers: every parameter Kiln has, with its shape, and the
    spread (standard deviation) of Kiln's within sampling error (4 / sqrt(n) relative).

Skipped (exit 77) when the interpreter has no JAX (make bench installs it into the venv).
Usage: jax_side_test.py --kiln build/kiln --python .venv/bin/python
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))

TINY = ["model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
        "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
        "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "max_target_length=16",
        "per_device_batch_size=4", "steps=4", "learning_rate=1e-2"]


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def run_jax(python, spec, weights, out, extra, env=None):
    cmd = [python, os.path.join(ROOT, "bench", "jax_gpt_oss.py"), spec, weights, out, "--steps", "4"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    check(r.returncode == 0, "%s: exit %d\n%s" % (" ".join(cmd), r.returncode, r.stderr[-3000:]))
    return json.load(open(out))


def close(a, b, tol):
    return all(abs(x - y) <= tol * abs(y) for x, y in zip(a, b)) and len(a) == len(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--python", required=True)
    a = ap.parse_args()
    probe = subprocess.run([a.python, "-c", "import jax, optax"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("skipped: %s has no jax and optax (make bench installs them)" % a.python)
        sys.exit(77)
    import peers_common as pc  # numpy: Debian's python3-numpy
    with tempfile.TemporaryDirectory(prefix="kiln_jax_side_") as work:
        spec_path = os.path.join(work, "spec.json")
        spec = pc.model_spec(pc.resolved_config(a.kiln, TINY))
        json.dump(spec, open(spec_path, "w"))
        # Kiln's initial weights (the interpreter: no kernels to compile) for the runs.
        init = os.path.join(work, "init")
        subprocess.run([a.kiln, "train"] + TINY + ["steps=0", "run_name=init", "base_output_directory=" + init,
                                                   "async_checkpointing=false", "backend=interpreter"], check=True,
                       capture_output=True)
        weights = os.path.join(init, "init", "checkpoints", "0", "shard-0.safetensors")
        ref = run_jax(a.python, spec_path, weights, os.path.join(work, "optax.json"), ["--adamw", "optax"])
        mine = run_jax(a.python, spec_path, weights, os.path.join(work, "jax.json"), ["--adamw", "jax"])
        check(ref["info"]["adamw"] == "optax" and mine["info"]["adamw"] == "jax", "the result names the AdamW")
        check(ref["losses"][-1] < ref["losses"][0] - 0.5, "the run learns: %s" % ref["losses"])
        check(close(mine["losses"], ref["losses"], 1e-5), "AdamW in JAX %s vs optax %s" % (mine["losses"],
                                                                                         ref["losses"]))
        print("ok: --adamw jax gives optax's losses: %s" % " ".join("%.6f" % x for x in mine["losses"]))
        hide = os.path.join(work, "hide")
        os.makedirs(hide)
        open(os.path.join(hide, "optax.py"), "w").write("raise ImportError('hidden by the test')\n")
        env = dict(os.environ, PYTHONPATH=hide)
        auto = run_jax(a.python, spec_path, weights, os.path.join(work, "auto.json"), [], env)
        check(auto["info"]["adamw"] == "jax" and close(auto["losses"], ref["losses"], 1e-5),
              "without optax, auto falls back: %s" % auto["info"])
        print("ok: without optax the default falls back to AdamW in JAX")
        remat = run_jax(a.python, spec_path, weights, os.path.join(work, "remat.json"), ["--remat"])
        check(remat["info"]["remat"] and close(remat["losses"], ref["losses"], 1e-5),
              "--remat %s vs %s" % (remat["losses"], ref["losses"]))
        print("ok: --remat gives the same losses")
        # The own draw: every Kiln parameter, its shape, the kernels' spread.
        code = r"""
import json, sys
sys.path.insert(0, %r)
import jax_gpt_oss as j, jax.numpy as jnp
spec = json.load(open(%r))
p = j.own_init(spec, 0)
print(json.dumps({n: [list(v.shape), float(jnp.std(v))] for n, v in p.items()}))
""" % (os.path.join(ROOT, "bench"), spec_path)
        r = subprocess.run([a.python, "-c", code], capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, "own_init: %s" % r.stderr[-2000:])
        drawn = json.loads(r.stdout.strip().splitlines()[-1])
        kiln = pc.read_params(weights)
        check(sorted(drawn) == sorted(kiln), "the own draw has Kiln's parameters: %s" % (
            set(drawn) ^ set(kiln)))
        for name, values in kiln.items():
            check(drawn[name][0] == list(values.shape), "%s: shape %s vs Kiln's %s" % (name, drawn[name][0],
                                                                                       values.shape))
            # Two samples' standard deviations differ by about std / sqrt(n): 4 of those.
            std = float(values.std())
            if std > 0:
                check(abs(drawn[name][1] - std) <= 4 * std / values.size ** 0.5, "%s: std %.4f vs Kiln's %.4f" % (
                    name, drawn[name][1], std))
        print("ok: WEIGHTS - draws Kiln's %d parameters with their shapes and spreads" % len(kiln))
    print("PASS")


if __name__ == "__main__":
    main()
