#!/usr/bin/python3
"""Restart on failure (apps/cmd_supervise.cc): `kiln supervise -- mpiexec -n 4 kiln train ...`
with one rank killed (SIGKILL) mid-run restarts the job from its last checkpoint by itself and
finishes with every step recorded once and the uninterrupted run's losses bit for bit; with
--restart_command the restart runs on 2 ranks × 2 devices (the survivors' layout, the same
global batch) and finishes with the losses within 1e-5. events.jsonl records the restart.
A checkpoint with a corrupt byte stops a 2-rank resume at once with one line naming the file,
every rank, and nothing is written; the supervisor does not retry it forever.

  supervise_test.py --kiln build/kiln --mpiexec mpiexec
"""
import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preemption_test import MODEL, rank_pids, records  # noqa: E402

MESH4 = ["per_device_batch_size=1", "local_devices=1", "ici_fsdp_parallelism=2", "ici_expert_parallelism=2",
         "steps=16", "checkpoint_period=4", "async_checkpointing=false", "backend=interpreter"]


def supervised(kiln, launcher, args, env, log_path, run_name, kill_rank, restart_command=""):
    cmd = [kiln, "supervise", "--max_restarts", "2"]
    if restart_command:
        cmd += ["--restart_command", restart_command]
    cmd += ["--"] + launcher + ["-n", "4", kiln, "train"] + args
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while "completed step: 6," not in open(log_path).read():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"FAIL: the first attempt ended before step 6:\n{open(log_path).read()}")
        time.sleep(0.02)
    pids = rank_pids(run_name)
    assert kill_rank in pids, pids
    os.kill(pids[kill_rank], signal.SIGKILL)
    code = proc.wait(timeout=400)
    text = open(log_path).read()
    assert code == 0, f"supervise exit {code}:\n{text}"
    assert "kiln supervise: attempt 2 of 3 after" in text, text
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--mpiexec", required=True)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_PROGRESS="off", KILN_COLLECTIVE_TIMEOUT_S="60",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    launcher = shlex.split(args.mpiexec) + ["--allow-run-as-root", "--oversubscribe"]
    out = tempfile.mkdtemp(prefix="kiln_supervise_")
    try:
        common = MODEL + MESH4 + [f"base_output_directory={out}"]
        p = subprocess.run(launcher + ["-n", "4", args.kiln, "train"] + common + ["run_name=full"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        assert p.returncode == 0, p.stdout
        full = records(os.path.join(out, "full", "metrics.jsonl"))

        supervised(args.kiln, launcher, common + ["run_name=same"], env, os.path.join(out, "same.log"), "same", 2)
        same = records(os.path.join(out, "same", "metrics.jsonl"))
        assert [r["step"] for r in same] == list(range(16)), [r["step"] for r in same]
        for a, b in zip(full, same):
            assert a["loss"] == b["loss"], (a["step"], a["loss"], b["loss"])
        restarts = [e for e in records(os.path.join(out, "same", "events.jsonl")) if e["event"] == "restart"]
        assert len(restarts) == 1 and restarts[0]["supervisor_attempt"] == 2, restarts
        print(f"ok: rank 2 killed, restarted on 4 ranks from step {restarts[0]['step']}: 16 steps once, bitwise")

        two = MODEL + [a for a in MESH4 if not a.startswith("local_devices")] + [
            "local_devices=2", f"base_output_directory={out}", "run_name=shrunk"]
        restart = " ".join(shlex.quote(a) for a in launcher + ["-n", "2", args.kiln, "train"] + two)
        supervised(args.kiln, launcher, common + ["run_name=shrunk"], env, os.path.join(out, "shrunk.log"), "shrunk",
                   1, restart_command=restart)
        shrunk = records(os.path.join(out, "shrunk", "metrics.jsonl"))
        assert [r["step"] for r in shrunk] == list(range(16)), [r["step"] for r in shrunk]
        for a, b in zip(full, shrunk):
            assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a["step"], a["loss"], b["loss"])
        events = records(os.path.join(out, "shrunk", "events.jsonl"))
        starts = [e for e in events if e["event"] == "start"]
        assert len(starts) == 2 and starts[-1]["num_devices"] == 4, starts
        print("ok: rank 1 killed, restarted on 2 ranks x 2 devices: 16 steps once, losses within 1e-5")

        # Corrupt one byte of the last checkpoint's shard 3 (a piece rank 1 reads) and resume
        # that state under 2 ranks: the job ends in one line naming the file, nothing written.
        ckpt = os.path.join(out, "full", "checkpoints", "16")
        shard = os.path.join(ckpt, "shard-3.safetensors")
        with open(shard, "r+b") as f:
            header = int.from_bytes(f.read(8), "little")
            f.seek(8 + header + 5)
            b = f.read(1)
            f.seek(8 + header + 5)
            f.write(bytes([b[0] ^ 0x10]))
        before = {n: os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt)}
        start = time.monotonic()
        p = subprocess.run(launcher + ["-n", "2", args.kiln, "train"] + MODEL + [
            a for a in MESH4 if not a.startswith("local_devices") and not a.startswith("steps")] + [
            "local_devices=2", "steps=20", f"base_output_directory={out}", "run_name=corrupt",
            f"load_full_state_path={ckpt}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            timeout=300)
        took = time.monotonic() - start
        assert p.returncode != 0, p.stdout
        errors = [l for l in p.stdout.splitlines() if l.startswith("kiln: error:")]
        assert errors and "shard-3.safetensors" in errors[0] and "checksum" in errors[0], p.stdout
        assert took < 50, f"the job took {took:.0f} s to end"
        assert not os.path.exists(os.path.join(out, "corrupt", "checkpoints")), os.listdir(os.path.join(out, "corrupt"))
        assert before == {n: os.path.getsize(os.path.join(ckpt, n)) for n in os.listdir(ckpt)}
        print(f"ok: a corrupt shard stops the 2-rank resume in {took:.1f} s: {errors[0]}")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
