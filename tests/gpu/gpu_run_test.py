#!/usr/bin/python3
"""make gpu (bench/gpu_run.py) on a machine without a GPU.

  - no nvidia-smi, an nvidia-smi that fails, one that lists nothing: one line, exit 0, and
    `make gpu` itself prints just that line;
  - bad arguments: one line on stderr, nothing on stdout, exit 2; --help: exit 0;
  - a whole run against a fake nvidia-smi (an H100 80GB HBM3), a fake kiln (`config` is the
    real one; `train` prints Kiln's log lines with fixed step times and writes metrics.jsonl
    and, for steps=0, a checkpoint) and a fake JAX interpreter: the arguments each side gets
    (plugin, peak, Kiln's perturbed weights for small, own draw and remat for large), the
    table's arithmetic (tokens/s = tokens / median step, TFLOP/s = the real kiln's FLOP count
    / median step, MFU against configs/targets/h100.yml's 989), the step-0 losses, the JSON;
  - the large model's layer count for an 80 GB and a 40 GB card (--dry-run);
  - the time limit: a kiln that hangs after 3 steps is stopped, the 3 steps are reported,
    exit 1;
  - the CUDA plugin's look-up: --plugin, $KILN_CUDA_PLUGIN, the jax_plugins package of
    --python (the venv's jax-cuda13-pjrt wheel, when installed).

Usage: gpu_run_test.py --kiln build/kiln [--venv-python .venv/bin/python]
"""
import argparse
import json
import os
import re
import stat
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DRIVER = os.path.join(ROOT, "bench", "gpu_run.py")
PY = "/usr/bin/python3"

FAKE_SMI = r"""#!/bin/sh
case "$FAKE_SMI" in
  fail) echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9 ;;
  empty) exit 0 ;;
esac
case "$*" in
  *memory.used*) echo 1234 ;;
  *) case "$FAKE_SMI" in
       a100-40) echo "NVIDIA A100-SXM4-40GB, 40960" ;;
       *) echo "NVIDIA H100 80GB HBM3, 81559" ;;
     esac ;;
esac
"""

# Kiln's log lines (src/kiln/train), with step k taking FAKE_STEP_S * (2 if k == 0 else 1)
# seconds (so the median leaves step 0 out) and the loss 9.5 - 0.125 k.
FAKE_KILN = r"""#!/usr/bin/python3
import json, os, struct, sys, time
args = sys.argv[1:]
if args and args[0] == "config":
    os.execv(os.environ["REAL_KILN"], [os.environ["REAL_KILN"]] + args)
if args and args[0] == "--version":
    print("kiln 0.1.0 (fake)")
    sys.exit(0)
assert args[0] == "train", args
kv = dict(a.split("=", 1) for a in args[1:] if "=" in a)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
out = os.path.join(kv["base_output_directory"], kv["run_name"])
os.makedirs(out, exist_ok=True)
steps = int(kv["steps"])
print("kiln train: config from fake")
print("  per device per step: %s learnable + %s attention TFLOPs (formula: MaxText 2026-02)" % (
    os.environ["FAKE_LEARNABLE"], os.environ["FAKE_ATTENTION"]))
print("memory per device: 12.500 GiB planned (state 10.000 GiB, activations and temporaries 2.500 GiB, "
      "thread stacks 0.000 GiB, collective buffers 0.000 GiB)")
print("compile/trace time: 3.000 s (trace 0.500 s, compile 2.000 s, init 0.500 s); backend: fake", flush=True)
if steps == 0:
    ck = os.path.join(out, "checkpoints", "0")
    os.makedirs(ck)
    header = json.dumps({"params/decoder_norm.scale": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    with open(os.path.join(ck, "shard-0.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1, 1, 1, 1))
    json.dump({"tensors": {"params/decoder_norm.scale": {"pieces": [{"fnv1a64": "0"}]}}},
              open(os.path.join(ck, "manifest.json"), "w"))
    sys.exit(0)
step_s = float(os.environ["FAKE_STEP_S"])
hang = int(os.environ.get("FAKE_HANG_AFTER", "-1"))
with open(os.path.join(out, "metrics.jsonl"), "w") as m:
    for k in range(steps):
        if k == hang:
            time.sleep(1000)
        s = step_s * (2 if k == 0 else 1)
        loss = 9.5 - 0.125 * k
        print("completed step: %d, seconds: %.3f, TFLOP/s/device: 1.000, Tokens/s/device: 1.000, total_weights: 8, "
              "loss: %.3f, lm_loss: %.3f, MFU: 1.00%%" % (k, s, loss, loss), flush=True)
        m.write(json.dumps({"step": k, "step_time_s": s, "loss": loss}) + "\n")
        m.flush()
"""

# The JAX side: `-c` probes (the plugin's package, jax's version), else bench/jax_gpt_oss.py's
# arguments: SPEC WEIGHTS OUT --steps N ... -> OUT with step times 2 x FAKE_STEP_S.
FAKE_PYTHON = r"""#!/usr/bin/python3
import json, os, sys
args = sys.argv[1:]
if args[0] == "-c":
    if "find_spec" in args[1]:
        if os.environ.get("FAKE_PLUGIN"):
            print(os.environ["FAKE_PLUGIN"])
    else:
        print("0.0.fake")
    sys.exit(0)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(["python"] + args) + "\n")
script, spec, weights, out = args[:4]
steps = int(args[args.index("--steps") + 1])
s = 2 * float(os.environ["FAKE_STEP_S"])
for k in range(steps):
    print("step %d: %.3f s, loss %.6f" % (k, s, 9.25 - 0.125 * k), file=sys.stderr)
json.dump({"times": [s] * steps, "losses": [9.25 - 0.125 * k for k in range(steps)], "compile_s": 4.0,
           "info": {"adamw": "jax", "peak_bytes_in_use": 3 * 2**30}}, open(out, "w"))
"""


def check(cond, what):
    if not cond:
        raise SystemExit("FAIL: " + what)


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run(args, env, timeout=240):
    return subprocess.run([PY, DRIVER] + args, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def real_tflops(kiln, keys):
    """The real kiln's FLOP count for a config (its start-up report)."""
    text = subprocess.run([kiln, "train"] + keys + ["--dry-run"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"per device per step: ([\d.e+-]+) learnable \+ ([\d.e+-]+) attention TFLOPs", text)
    check(m is not None, "the real kiln's --dry-run prints its FLOPs:\n" + text)
    return m.group(1), m.group(2)


def test_no_gpu(work):
    empty = os.path.join(work, "empty_bin")
    os.makedirs(empty)
    env = dict(os.environ, PATH=empty)
    r = run([], env)
    check(r.returncode == 0, "no nvidia-smi: exit 0, got %d: %s" % (r.returncode, r.stderr))
    check(r.stdout == "make gpu: no NVIDIA GPU on this machine (nvidia-smi not found); nothing to run\n",
          "no nvidia-smi: one line, got %r" % r.stdout)
    fake = os.path.join(work, "fake_bin")
    for mode, says in (("fail", "nvidia-smi exit 9: NVIDIA-SMI has failed"), ("empty", "nvidia-smi lists no GPU")):
        r = run(["--steps", "4", "--model", "small"], dict(os.environ, PATH=fake + ":/usr/bin:/bin", FAKE_SMI=mode))
        check(r.returncode == 0 and r.stdout.count("\n") == 1 and says in r.stdout and
              r.stdout.startswith("make gpu: no NVIDIA GPU on this machine (") and r.stdout.endswith(
                  "; nothing to run\n"), "nvidia-smi %s: one line, exit 0; got %d %r" % (mode, r.returncode, r.stdout))
    # make gpu itself: nothing but that line (no recipe echo, no build).
    r = subprocess.run(["make", "-s", "--no-print-directory", "-C", ROOT, "gpu", "GPU_PYTHON=" + PY],
                       env=dict(os.environ, PATH=fake + ":/usr/bin:/bin", FAKE_SMI="empty"), capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0 and r.stdout == "make gpu: no NVIDIA GPU on this machine (nvidia-smi lists no GPU); "
          "nothing to run\n", "make gpu without a GPU: one line, exit 0; got %d %r %r" % (r.returncode, r.stdout,
                                                                                         r.stderr))
    print("ok: no GPU -> one line, exit 0 (no nvidia-smi, failing, listing none; and make gpu)")


def test_arguments(work):
    env = dict(os.environ, PATH=os.path.join(work, "empty_bin"))
    for args, says in ((["--bogus"], "unrecognized arguments: --bogus"), (["--steps", "x"], "--steps"),
                       (["--steps", "0"], "--steps"), (["--model", "medium"], "--model"),
                       (["--time-limit", "-3"], "--time-limit"), (["--sides", "torch"], "--sides"),
                       (["--steps", "4", "--warmup", "4"], "--warmup 4 must be below --steps 4"),
                       (["stray"], "unrecognized arguments: stray")):
        r = run(args, env)
        check(r.returncode == 2, "%s: exit 2, got %d" % (args, r.returncode))
        check(r.stdout == "", "%s: nothing on stdout, got %r" % (args, r.stdout))
        lines = r.stderr.splitlines()
        check(len(lines) == 1 and lines[0].startswith("make gpu: error: ") and says in lines[0],
              "%s: one line naming %r, got %r" % (args, says, r.stderr))
    r = run(["--help"], env)
    check(r.returncode == 0 and "--time-limit" in r.stdout and "--plugin" in r.stdout and "--model" in r.stdout,
          "--help: exit 0 and the options, got %d" % r.returncode)
    print("ok: bad arguments -> one line, exit 2; --help")


def fake_env(work, kiln, **extra):
    fake = os.path.join(work, "fake_bin")
    env = dict(os.environ, PATH=fake + ":/usr/bin:/bin", REAL_KILN=kiln, FAKE_LOG=os.path.join(work, "calls.log"),
               FAKE_STEP_S="0.25")
    env.pop("KILN_CUDA_PLUGIN", None)
    env.update(extra)
    return env


def test_whole_run(work, kiln):
    small = ["model_name=gpt-oss-small", "override_model_config=true", "per_device_batch_size=8",
             "max_target_length=1024", "dtype=bfloat16", "weight_dtype=float32", "remat_policy=none"]
    large = [os.path.join(ROOT, "configs", "gpt-oss-3.5b-v6e4.yml"), "ici_fsdp_parallelism=1",
             "ici_expert_parallelism=1"]
    learnable, attention = real_tflops(kiln, small)
    large_learnable, large_attention = real_tflops(kiln, large)
    plugin = os.path.join(work, "fake_plugin.so")
    open(plugin, "w").close()
    out = os.path.join(work, "out")
    json_path = os.path.join(work, "r.json")
    open(os.path.join(work, "calls.log"), "w").close()
    env = fake_env(work, kiln, FAKE_LEARNABLE=learnable, FAKE_ATTENTION=attention)
    start = time.time()
    r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--python", os.path.join(work, "fake_bin", "python"),
             "--plugin", plugin, "--steps", "6", "--warmup", "2", "--out-dir", out, "--json", json_path], env)
    check(r.returncode == 0, "fake H100 run: exit 0, got %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr))
    text = r.stdout
    check("NVIDIA H100 80GB HBM3 (81559 MiB), bf16 dense peak 989 TFLOP/s (configs/targets/h100.yml)" in text,
          "the card, its memory and its peak are named:\n" + text)
    res = json.load(open(json_path))
    check(res["gpu"] == "NVIDIA H100 80GB HBM3" and res["peak_tflops"] == 989, "JSON: the card and peak")
    by = {(e["model"], e["side"]): e for e in res["results"]}
    check(sorted(by) == [("large", "jax"), ("large", "kiln"), ("small", "jax"), ("small", "kiln")],
          "four runs, got %s" % sorted(by))
    tflop = {"small": float(learnable) + float(attention)}
    for (model, side), e in sorted(by.items()):
        med = 0.25 if side == "kiln" else 0.5
        tokens = 8 * 1024 if model == "small" else 1024
        check(e["status"] == 0 and e["steps_done"] == 6, "%s %s: 6 steps done" % (model, side))
        check(abs(e["median_s"] - med) < 1e-9, "%s %s: median %s, expected %s" % (model, side, e["median_s"], med))
        check(abs(e["tokens_per_s"] - tokens / med) < 1e-6, "%s %s: tokens/s" % (model, side))
        if model == "small":
            check(abs(e["tflop_per_step"] - tflop["small"]) <= 1e-6 * tflop["small"],
                  "small: the FLOPs are the real kiln's: %s vs %s" % (e["tflop_per_step"], tflop["small"]))
        check(abs(e["tflops"] - e["tflop_per_step"] / med) < 1e-9, "%s %s: TFLOP/s" % (model, side))
        check(abs(e["mfu"] - e["tflop_per_step"] / med / 989) < 1e-12, "%s %s: MFU against 989" % (model, side))
        check(e["loss0"] == (9.5 if side == "kiln" else 9.25), "%s %s: step-0 loss" % (model, side))
        check(e["smi_peak_mib"] == 1234, "%s %s: nvidia-smi's memory reading" % (model, side))
    check(by[("small", "kiln")]["memory_gib"] == 12.5 and by[("small", "jax")]["memory_gib"] == 3.0, "memory")
    large_spec = res["plans"]["large"]["spec"]
    check(large_spec["layers"] == 16, "an 80 GB card holds all 16 layers of the 3.5B shape, got %d" %
          large_spec["layers"])
    # The large run's FLOPs (peers_common's formula) equal the real kiln's for the same config
    # (bf16_weight_copy changes no FLOP).
    want = float(large_learnable) + float(large_attention)
    check(abs(by[("large", "kiln")]["tflop_per_step"] - want) <= 1e-6 * want,
          "large: FLOPs %s vs the real kiln's %s" % (by[("large", "kiln")]["tflop_per_step"], want))
    # The table: one row per run with the MFU printed.
    small_kiln = by[("small", "kiln")]
    row = [line for line in text.splitlines() if line.startswith("| small | kiln |")]
    check(len(row) == 1 and ("| %.1f%% |" % (100 * small_kiln["mfu"])) in row[0] and "| 0.2500 |" in row[0] and
          "| 32768 |" in row[0] and "| 9.5000 |" in row[0], "the small kiln row: %s" % row)
    check("small step-0 loss kiln 9.500000, jax 9.250000" in text, "the step-0 losses side by side:\n" + text)
    # What each side was given.
    calls = [json.loads(line) for line in open(os.path.join(work, "calls.log"))]
    trains = [c for c in calls if c[0] == "train"]
    jax_calls = [c for c in calls if c[0] == "python"]
    check(len(trains) == 3 and len(jax_calls) == 2, "3 kiln runs (init, small, large) and 2 JAX runs: %s" % calls)
    for c in trains:
        check("backend=pjrt" in c and "pjrt_plugin=" + plugin in c and "hardware_peak_tflops=989" in c,
              "kiln gets the plugin and the peak: %s" % c)
    check("steps=0" in trains[0], "the first kiln run saves the initial weights")
    check(any(x.startswith("load_parameters_path=") for x in trains[1]), "small kiln starts from the saved weights")
    check("base_num_decoder_layers=16" in trains[2] and "bf16_weight_copy=false" in trains[2], "large kiln keys")
    check(jax_calls[0][3].endswith(os.path.join("small", "weights", "0", "shard-0.safetensors")),
          "small JAX reads Kiln's perturbed weights: %s" % jax_calls[0])
    check(jax_calls[1][3] == "-" and "--remat" in jax_calls[1], "large JAX draws its own and remats: %s" %
          jax_calls[1])
    check("AdamW in plain JAX" in by[("small", "jax")]["note"], "the JAX rows say the AdamW had no optax")
    print("ok: a whole run on a fake H100 (table, MFU against 989, JSON, arguments) in %.0f s" % (time.time() - start))


def test_sizes_and_plugin(work, kiln, venv_python):
    env = fake_env(work, kiln, FAKE_SMI="a100-40", KILN_VENV=os.path.join(work, "no_venv"))
    r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--python", os.path.join(work, "fake_bin", "python"),
             "--dry-run", "--out-dir", os.path.join(work, "dry")], env)
    check(r.returncode == 0, "dry run: exit 0, got %d %s" % (r.returncode, r.stderr))
    m = re.search(r"large: (\d+) layers.*; (\d+) of 16 layers fit 75% of 40 GiB", r.stdout)
    check(m is not None and m.group(1) == m.group(2), "a 40 GB card: fewer layers, said so:\n" + r.stdout)
    layers = int(m.group(1))
    check(2 <= layers < 16 and layers % 2 == 0, "a 40 GB card: an even count below 16, got %d" % layers)
    check("bf16 dense peak 312 TFLOP/s (the A100 datasheet)" in r.stdout, "the A100's peak:\n" + r.stdout)
    check("CUDA plugin none (no CUDA PJRT plugin" in r.stdout, "no plugin found is said:\n" + r.stdout)
    r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--plugin", "/nonexistent/plugin.so"],
            fake_env(work, kiln))
    check(r.returncode == 2 and r.stderr.strip() == "make gpu: error: --plugin /nonexistent/plugin.so: no such file",
          "a missing --plugin: one line, exit 2: %d %r" % (r.returncode, r.stderr))
    r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--python", os.path.join(work, "fake_bin", "python"),
             "--dry-run", "--out-dir", os.path.join(work, "dry")], fake_env(work, kiln, KILN_CUDA_PLUGIN="/x/y.so"))
    check("CUDA plugin none ($KILN_CUDA_PLUGIN names /x/y.so, which does not exist)" in r.stdout,
          "$KILN_CUDA_PLUGIN is used and checked:\n" + r.stdout)
    r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--python", os.path.join(work, "fake_bin", "python"),
             "--dry-run", "--out-dir", os.path.join(work, "dry")], fake_env(work, kiln, FAKE_PLUGIN=kiln))
    check("CUDA plugin %s (the jax_plugins package of" % kiln in r.stdout, "the --python's package:\n" + r.stdout)
    venv_python = os.path.abspath(venv_python) if venv_python else ""
    wheel = os.path.join(os.path.dirname(os.path.dirname(venv_python)), "lib", "python3.11", "site-packages",
                         "jax_plugins", "xla_cuda13", "xla_cuda_plugin.so") if venv_python else ""
    if venv_python and os.path.isfile(wheel):
        r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--python", venv_python, "--sides", "kiln",
                 "--dry-run", "--out-dir", os.path.join(work, "dry")], fake_env(work, kiln))
        check("CUDA plugin %s (the jax_plugins package of %s)" % (wheel, venv_python) in r.stdout,
              "the venv's jax-cuda13-pjrt wheel is found:\n" + r.stdout)
        print("ok: the venv's CUDA plugin wheel found through its jax_plugins package")
    else:
        print("note: no jax-cuda13-pjrt wheel in the venv; its look-up not checked")
    print("ok: layers for a 40 GB card (%d), the A100's peak, --plugin / $KILN_CUDA_PLUGIN / --python look-ups"
          % layers)


def test_time_limit(work, kiln):
    out = os.path.join(work, "out_limit")
    env = fake_env(work, kiln, FAKE_LEARNABLE="1.0", FAKE_ATTENTION="0.5", FAKE_HANG_AFTER="3")
    start = time.time()
    r = run(["--kiln", os.path.join(work, "fake_bin", "kiln"), "--python", os.path.join(work, "fake_bin", "python"),
             "--plugin", kiln, "--model", "small", "--sides", "kiln", "--steps", "8", "--warmup", "1",
             "--time-limit", "12", "--out-dir", out], env)
    wall = time.time() - start
    check(r.returncode == 1, "a run cut short: exit 1, got %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    check(wall < 40, "the time limit holds: %.0f s for a 12 s limit" % wall)
    res = json.load(open(os.path.join(out, "gpu_results.json")))
    e = res["results"][0]
    check(e["status"] == "timeout" and e["steps_done"] == 3 and abs(e["median_s"] - 0.25) < 1e-9,
          "the 3 steps done before the limit are reported: %s" % {k: e.get(k) for k in ("status", "steps_done",
                                                                                        "median_s")})
    check("timed out after" in e["note"] and "timed out after" in r.stdout, "the table says it timed out")
    print("ok: the time limit stops a hung kiln (%.0f s) and reports the steps it finished" % wall)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--venv-python", default="")
    a = ap.parse_args()
    kiln = os.path.abspath(a.kiln)
    with tempfile.TemporaryDirectory(prefix="kiln_gpu_run_") as work:
        fake = os.path.join(work, "fake_bin")
        os.makedirs(fake)
        write_exe(os.path.join(fake, "nvidia-smi"), FAKE_SMI)
        write_exe(os.path.join(fake, "kiln"), FAKE_KILN)
        write_exe(os.path.join(fake, "python"), FAKE_PYTHON)
        test_no_gpu(work)
        test_arguments(work)
        test_whole_run(work, kiln)
        test_sizes_and_plugin(work, kiln, a.venv_python)
        test_time_limit(work, kiln)
    print("PASS")


if __name__ == "__main__":
    main()
