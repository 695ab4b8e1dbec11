#!/usr/bin/python3
"""Goodput (src/kiln/report/goodput.h) over a run with a restart: a run killed (SIGKILL) five
steps past its checkpoint and started again has two attempts in events.jsonl, each with its
goodput snapshots; the second reports as re-done exactly the step time of the records the
kill left past the checkpoint (metrics.jsonl.discarded); every record carries the attempt's
goodput so far; the console's last lines and report.html show the run's goodput over both
attempts.

  goodput_test.py --kiln build/kiln
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

MODEL = [
    "model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
    "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
    "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "sliding_window_size=8",
    "max_target_length=16", "per_device_batch_size=2", "learning_rate=1e-2", "log_period=1",
    "enable_tensorboard=false", "checkpoint_period=10", "async_checkpointing=false", "steps=30",
    "run_name=run",
]


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_PROGRESS="off")
    out = tempfile.mkdtemp(prefix="kiln_goodput_")
    try:
        cmd = [args.kiln, "train"] + MODEL + [f"base_output_directory={out}"]
        log_path = os.path.join(out, "first.log")
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while "completed step: 14," not in open(log_path).read():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                sys.exit(f"FAIL: the first attempt ended before step 14:\n{open(log_path).read()}")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        run_dir = os.path.join(out, "run")
        before = lines(os.path.join(run_dir, "metrics.jsonl"))
        past = [r for r in before if r["step"] >= 10]
        assert past, "the kill left no record past the checkpoint of step 10"
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        assert p.returncode == 0, p.stdout
        redone_expected = sum(r["step_time_s"] for r in past)

        events = lines(os.path.join(run_dir, "events.jsonl"))
        starts = [i for i, e in enumerate(events) if e["event"] == "start"]
        assert len(starts) == 2, starts
        first = [e for e in events[starts[0]:starts[1]] if e["event"] == "goodput"]
        second = [e for e in events[starts[1]:] if e["event"] == "goodput"]
        assert len(first) == 1 and not first[0]["final"], first  # the step-10 checkpoint's; then the kill
        assert second and second[-1]["final"], second
        last = second[-1]
        assert abs(last["redone_s"] - redone_expected) <= 1e-9 * max(1.0, redone_expected), (last, redone_expected)
        parts = sum(last[k] for k in ("startup_s", "productive_s", "data_wait_s", "checkpoint_s", "eval_s", "other_s"))
        assert abs(parts - last["wall_s"]) <= 1e-6 * last["wall_s"] + 1e-9, (parts, last)
        assert 0 < last["goodput"] < 1 and last["productive_s"] > 0 and last["startup_s"] > 0, last
        records = lines(os.path.join(run_dir, "metrics.jsonl"))
        assert [r["step"] for r in records] == list(range(30)), [r["step"] for r in records]
        assert all(0 < r["goodput"] <= 1 for r in records), records[0]
        run_goodput = (first[-1]["productive_s"] + last["productive_s"] - last["redone_s"]) / (
            first[-1]["wall_s"] + last["wall_s"])
        line = [l for l in p.stdout.splitlines() if l.startswith("goodput: ")]
        assert len(line) == 1, p.stdout
        assert f"the run: {100 * run_goodput:.1f}% of" in line[0] and "over 2 attempts" in line[0], (line, run_goodput)
        html = open(os.path.join(run_dir, "report.html")).read()
        assert 'id="goodput-section"' in html and "the run (2 attempts)" in html, "no goodput table in report.html"
        print(f"ok: {line[0]}")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
