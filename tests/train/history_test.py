#!/usr/bin/python3
"""A run's history survives every restart (metrics.jsonl and TensorBoard).

A straight `kiln train` run of gpt-oss-tiny is the reference. The same run is then killed
with SIGKILL at seeded random moments (after a random number of completed steps, plus a
random delay, so some kills land between checkpoints and mid-write) and restarted three
times, then run to the end. Checked:
  * metrics.jsonl holds steps 0..N-1 exactly once each, and every value that does not
    depend on the clock (losses, norms, learning rate, token counts, expert load) equals
    the straight run's bit for bit (the same JSON text);
  * TensorBoard's own reader (EventAccumulator, project venv) sees one curve per tag:
    steps 0..N-1 once each, with the straight run's values;
  * restarting the finished run changes nothing in metrics.jsonl;
  * a torn last line (as a kill mid-write leaves) is moved to metrics.jsonl.discarded on the
    next start and never breaks a reader; the records of an attempt past the restored
    checkpoint go there too.

Usage: history_test.py --kiln build/kiln --venv-python .venv/bin/python [--keep DIR]
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 24
CLOCK_FIELDS = {"step_time_s", "data_wait_s", "collective_wait_s", "tokens_per_s_per_device",
                "tflops_per_s_per_device", "mfu", "goodput"}


def command(kiln, workdir, run_name, steps=STEPS):
    return [kiln, "train", "model_name=gpt-oss-tiny", f"steps={steps}", f"run_name={run_name}",
            f"base_output_directory={workdir}", "enable_checkpointing=true", "checkpoint_period=5",
            "async_checkpointing=false", "enable_tensorboard=true", "log_period=3", "learning_rate=3e-3",
            "hardware_peak_tflops=1"]


def read_records(path):
    with open(path) as f:
        text = f.read()
    assert text.endswith("\n"), f"{path} ends in a torn line"
    return [json.loads(line) for line in text.splitlines()]


def clockless(record):
    return {k: v for k, v in record.items() if k not in CLOCK_FIELDS}


def run_and_kill(cmd, env, after_steps, delay):
    """Starts cmd, SIGKILLs it `delay` seconds after it printed `after_steps` step lines (or
    when it exits). Returns the number of step lines seen."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = 0
    for line in p.stdout:
        if line.startswith("completed step:"):
            seen += 1
            if seen >= after_steps:
                time.sleep(delay)
                p.send_signal(signal.SIGKILL)
                break
    p.wait()
    return seen


def tensorboard_curves(python, logdir):
    reader = os.path.join(HERE, "..", "reference", "tensorboard_reader.py")
    out = subprocess.run([python, reader, logdir], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"tensorboard_reader.py failed:\n{out.stderr}")
    return json.loads(out.stdout)["tags"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--venv-python", required=True)
    ap.add_argument("--keep")
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    if not os.path.exists(args.venv_python):
        sys.exit(f"{args.venv_python} is missing: run scripts/setup_venv.sh")
    workdir = args.keep or tempfile.mkdtemp(prefix="kiln_history_")
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_PROGRESS="off")

    straight = subprocess.run(command(args.kiln, workdir, "straight"), capture_output=True, text=True, env=env)
    if straight.returncode != 0:
        sys.exit(f"straight run failed:\n{straight.stdout}\n{straight.stderr}")
    reference = read_records(os.path.join(workdir, "straight", "metrics.jsonl"))
    assert [r["step"] for r in reference] == list(range(STEPS)), [r["step"] for r in reference]

    rng = random.Random(args.seed)
    cmd = command(args.kiln, workdir, "killed")
    kills = []
    for attempt in range(3):
        after = rng.randint(2, 7)
        delay = rng.uniform(0.0, 0.15)
        seen = run_and_kill(cmd, env, after, delay)
        kills.append((after, round(delay, 3), seen))
    metrics = os.path.join(workdir, "killed", "metrics.jsonl")
    # A kill mid-write leaves a torn line; make sure the next start meets one.
    with open(metrics, "a") as f:
        f.write('{"step": 9999, "loss": 1.2')
    final = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if final.returncode != 0:
        sys.exit(f"final run failed:\n{final.stdout}\n{final.stderr}")
    assert "continuing per-step metrics in" in final.stdout, final.stdout

    records = read_records(metrics)
    steps = [r["step"] for r in records]
    assert steps == list(range(STEPS)), f"steps after kills {kills}: {steps}"
    for mine, ref in zip(records, reference):
        assert clockless(mine) == clockless(ref), (mine["step"], clockless(mine), clockless(ref))
    discarded = os.path.join(workdir, "killed", "metrics.jsonl.discarded")
    assert os.path.exists(discarded), "the torn line was not kept aside"
    with open(discarded) as f:
        assert '{"step": 9999, "loss": 1.2' in f.read()

    # TensorBoard: one curve per tag, the straight run's values.
    ref_curves = tensorboard_curves(args.venv_python, os.path.join(workdir, "straight", "tensorboard"))
    curves = tensorboard_curves(args.venv_python, os.path.join(workdir, "killed", "tensorboard"))
    assert sorted(curves) == sorted(ref_curves), sorted(set(curves) ^ set(ref_curves))
    points = 0
    for tag, series in curves.items():
        tag_steps = [s for s, _ in series]
        assert tag_steps == sorted(set(tag_steps)), (tag, tag_steps)
        assert tag_steps == [s for s, _ in ref_curves[tag]], (tag, tag_steps)
        if not tag.startswith("perf/"):
            assert series == ref_curves[tag], (tag, series[:4], ref_curves[tag][:4])
        points += len(series)

    # Restarting the finished run changes nothing.
    with open(metrics, "rb") as f:
        before = f.read()
    again = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if again.returncode != 0:
        sys.exit(f"restart after the end failed:\n{again.stdout}\n{again.stderr}")
    with open(metrics, "rb") as f:
        assert f.read() == before, "a restart after the end changed metrics.jsonl"

    print(f"history: kills (after steps, delay s, steps seen) {kills}; metrics.jsonl holds steps 0..{STEPS - 1} "
          f"once each, equal to the straight run; TensorBoard: {len(curves)} tags, {points} points, one curve each; "
          f"a restart after the end changed nothing")
    if not args.keep:
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
