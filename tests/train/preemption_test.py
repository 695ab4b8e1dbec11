#!/usr/bin/python3
"""Preemption (src/kiln/train/preemption.h) as a scheduler causes it:

  1. one process: SIGTERM after a few steps stops the run after the step in progress with
     exit code 75, a complete checkpoint of that step and a `preempted` event; running the
     same command again resumes from it, and every step's loss equals the uninterrupted
     run's bit for bit, each step recorded once;
  2. a second signal exits at once (128 + SIGTERM) and leaves only complete checkpoints;
  3. 4 MPI ranks (fsdp 2 x expert 2, one device each): SIGTERM to ONE rank stops every rank at
     the same step within preemption_grace_s, mpirun exits 75, the checkpoint holds all four
     shards, and the resumed run's losses equal the uninterrupted 4-rank run's bit for bit.

  preemption_test.py --kiln build/kiln [--mpirun "mpiexec --allow-run-as-root --oversubscribe -n 4"]
"""
import argparse
import json
import os
import shlex
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
    "max_target_length=16", "learning_rate=1e-2", "log_period=100", "enable_tensorboard=false",
    "checkpoint_period=1000", "preemption_grace_s=60",
]
EXIT_PREEMPTED = 75


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: exit {p.returncode}: {' '.join(cmd)}\n{p.stdout}")
    return p.stdout


def start_and_signal(cmd, env, log_path, after_step, pids_to_signal, count=1):
    """Starts cmd, waits for the console line of `after_step`, sends SIGTERM `count` times to
    the processes pids_to_signal(proc) names; returns (exit code, seconds from signal to exit)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while True:
        with open(log_path) as f:
            if f"completed step: {after_step}," in f.read():
                break
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"FAIL: the run ended or stalled before step {after_step}:\n{open(log_path).read()}")
        time.sleep(0.05)
    targets = pids_to_signal(proc)
    sent = time.monotonic()
    for pid in targets:
        os.kill(pid, signal.SIGTERM)
    if count == 2:
        # The second once the first is being handled (signals of one kind sent together merge).
        while "kiln: SIGTERM:" not in open(log_path).read() and proc.poll() is None:
            time.sleep(0.001)
        for pid in targets:
            os.kill(pid, signal.SIGTERM)
    code = proc.wait(timeout=240)
    return code, time.monotonic() - sent


def complete_checkpoints(ckpt_dir, shards):
    """The step directories of ckpt_dir; each must be complete (manifest and every shard)."""
    steps = sorted(int(d) for d in os.listdir(ckpt_dir) if d.isdigit())
    for s in steps:
        files = set(os.listdir(os.path.join(ckpt_dir, str(s))))
        want = {"manifest.json"} | {f"shard-{d}.safetensors" for d in range(shards)}
        assert files == want, (s, files)
    return steps


def check_resumed(full, stopped_then_resumed, stop_step):
    steps = [r["step"] for r in stopped_then_resumed]
    assert steps == list(range(len(full))), f"each step once: {steps}"
    for a, b in zip(full, stopped_then_resumed):
        assert a["loss"] == b["loss"], f"step {a['step']}: {a['loss']} (uninterrupted) vs {b['loss']} (resumed)"
    assert 0 < stop_step < len(full)


def one_process(kiln, env, out):
    common = [kiln, "train"] + MODEL + ["per_device_batch_size=2", "steps=30", f"base_output_directory={out}"]
    run(common + ["run_name=full"], env)
    full = records(os.path.join(out, "full", "metrics.jsonl"))
    log = os.path.join(out, "stopped.log")
    code, took = start_and_signal(common + ["run_name=stopped"], env, log, 3, lambda p: [p.pid])
    text = open(log).read()
    assert code == EXIT_PREEMPTED, f"exit {code}:\n{text}"
    events = records(os.path.join(out, "stopped", "events.jsonl"))
    pre = [e for e in events if e["event"] == "preempted"]
    assert len(pre) == 1 and pre[0]["signal"] == "SIGTERM", pre
    stop = pre[0]["step"]
    assert pre[0]["checkpoint_step"] == stop, pre
    assert complete_checkpoints(os.path.join(out, "stopped", "checkpoints"), 1) == [stop]
    assert f"exiting with code {EXIT_PREEMPTED}" in text, text
    resumed_log = run(common + ["run_name=stopped"], env)
    assert f"restored the full training state of step {stop}" in resumed_log, resumed_log
    check_resumed(full, records(os.path.join(out, "stopped", "metrics.jsonl")), stop)
    print(f"ok: one process stopped after step {stop} ({took:.2f} s after SIGTERM) and resumed bit for bit")

    # A second signal while the first is handled: out at once, nothing partial left behind.
    # Steps of about a second here, so the second signal lands inside the step.
    log = os.path.join(out, "twice.log")
    slow = ["base_emb_dim=256", "base_mlp_dim=512", "base_moe_mlp_dim=512", "max_target_length=512",
            "per_device_batch_size=8", "attention=dot_product"]
    code, _ = start_and_signal(common + slow + ["run_name=twice", "steps=100000"], env, log, 2, lambda p: [p.pid],
                               count=2)
    assert code == 128 + signal.SIGTERM, f"exit {code}:\n{open(log).read()}"
    ckpt = os.path.join(out, "twice", "checkpoints")
    if os.path.isdir(ckpt):
        complete_checkpoints(ckpt, 1)
    print("ok: a second SIGTERM exits at once with 143, leaving only complete checkpoints")


def rank_pids(run_name):
    """pids of the kiln processes of this run (not the launcher), by their environment's rank."""
    pids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if not argv or not argv[0].endswith(b"kiln") or f"run_name={run_name}".encode() not in argv:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            pids[int(env.get(b"OMPI_COMM_WORLD_RANK", b"-1"))] = int(entry)
        except OSError:
            continue
    return pids


def four_ranks(kiln, mpirun, env, out):
    mesh = ["per_device_batch_size=1", "local_devices=1", "ici_fsdp_parallelism=2", "ici_expert_parallelism=2",
            "steps=16", "backend=interpreter", f"base_output_directory={out}"]
    launcher = shlex.split(mpirun)
    run(launcher + [kiln, "train"] + MODEL + mesh + ["run_name=mpi_full"], env)
    full = records(os.path.join(out, "mpi_full", "metrics.jsonl"))
    log = os.path.join(out, "mpi_stopped.log")

    def rank1(_):
        for _ in range(100):
            pids = rank_pids("mpi_stopped")
            if 1 in pids:
                return [pids[1]]
            time.sleep(0.05)
        sys.exit(f"FAIL: no rank 1 process found: {rank_pids('mpi_stopped')}")

    code, took = start_and_signal(launcher + [kiln, "train"] + MODEL + mesh + ["run_name=mpi_stopped"], env, log, 2,
                                  rank1)
    text = open(log).read()
    assert code == EXIT_PREEMPTED, f"mpirun exit {code}:\n{text}"
    assert took < 60, f"took {took:.1f} s, over preemption_grace_s"
    pre = [e for e in records(os.path.join(out, "mpi_stopped", "events.jsonl")) if e["event"] == "preempted"]
    assert len(pre) == 1, pre
    stop = pre[0]["step"]
    assert complete_checkpoints(os.path.join(out, "mpi_stopped", "checkpoints"), 4) == [stop]
    resumed = run(launcher + [kiln, "train"] + MODEL + mesh + ["run_name=mpi_stopped"], env)
    assert f"restored the full training state of step {stop}" in resumed, resumed
    check_resumed(full, records(os.path.join(out, "mpi_stopped", "metrics.jsonl")), stop)
    print(f"ok: 4 ranks, SIGTERM to rank 1: all stopped after step {stop} ({took:.2f} s), exit 75, "
          f"resumed bit for bit")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--mpirun", default="", help="launcher command for 4 ranks (empty: skip the MPI case)")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_PROGRESS="off", KILN_COLLECTIVE_TIMEOUT_S="120",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    out = tempfile.mkdtemp(prefix="kiln_preemption_")
    try:
        one_process(args.kiln, env, out)
        if args.mpirun:
            four_ranks(args.kiln, args.mpirun, env, out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
