#!/usr/bin/python3
"""Multi-process training: `mpirun -np 2 kiln train ... local_devices=2` on the mesh
ici_fsdp_parallelism=2 ici_expert_parallelism=2 (4 devices over 2 ranks) gives the per-step
losses of the one-device run (metrics.jsonl, 1e-4 relative: float32 sums in another order),
rank 0 alone prints and writes the metrics, each rank writes the checkpoint shards its devices
own (rank 0 commits the manifest), a resume under MPI continues from it and a one-device run
resumes from it with the same losses, collective_wait is reported, and an
error on rank 0 alone ends the whole job at once. gpt-oss-tiny shrunk as in
sharded_training_test.cc.

  mpi_training_test.py --kiln build/kiln --mpirun "mpiexec --allow-run-as-root --oversubscribe -n 2"
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

MODEL = [
    "model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
    "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
    "base_num_decoder_layers=2", "vocab_size=64", "num_experts=4", "sliding_window_size=8",
    "max_target_length=8", "steps=4", "learning_rate=1e-2", "log_period=100", "enable_tensorboard=false",
    # One batch every step, which the model memorises: its loss falls in 4 steps (on fresh
    # uniform tokens it only wanders around ln(vocab)).
    "reuse_example_batch=1",
]


def run(cmd, env):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if p.returncode != 0:
        sys.exit(f"FAIL: exit {p.returncode}: {' '.join(cmd)}\n{p.stdout}")
    return p.stdout


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--mpirun", required=True, help="launcher command for 2 ranks")
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--losses_only", action="store_true", help="skip the checkpoint, resume and failure checks")
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_PROGRESS="off", KILN_COLLECTIVE_TIMEOUT_S="120",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    out = tempfile.mkdtemp(prefix="kiln_mpi_training_")
    try:
        common = MODEL + [f"backend={args.backend}", f"base_output_directory={out}"]
        run([args.kiln, "train"] + common + ["per_device_batch_size=4", "local_devices=1", "ici_fsdp_parallelism=1",
                                             "enable_checkpointing=false", "run_name=one"], env)
        log = run(shlex.split(args.mpirun) + [args.kiln, "train"] + common + [
            "per_device_batch_size=1", "local_devices=2", "ici_fsdp_parallelism=2", "ici_expert_parallelism=2",
            "enable_checkpointing=true", "checkpoint_period=2", "run_name=mpi"], env)

        one, mpi = records(os.path.join(out, "one", "metrics.jsonl")), records(os.path.join(out, "mpi", "metrics.jsonl"))
        assert len(one) == len(mpi) == 4, (len(one), len(mpi))
        for a, b in zip(one, mpi):
            assert abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), f"step {a['step']}: {a['loss']} vs {b['loss']}"
            assert "collective_wait_s" not in a, a  # one device: no collectives
            assert 0 <= b["collective_wait_s"] <= b["step_time_s"] + 1e-3, b
        assert mpi[-1]["loss"] < mpi[0]["loss"], "the loss does not fall"
        # Rank 0 alone prints: each step line once, with the collective wait.
        steps = [line for line in log.splitlines() if line.startswith("completed step:")]
        assert len(steps) == 4, f"expected 4 step lines (rank 0 only), got {len(steps)}:\n{log}"
        assert all(", collective_wait: " in line for line in steps), steps[0]
        assert "2 MPI ranks × 2 local devices" in log, log
        if args.losses_only:
            print(f"ok: losses {[r['loss'] for r in mpi]} (one device {[r['loss'] for r in one]})")
            return
        # Checkpoints of steps 2 and 4: each rank wrote its devices' shards (rank 1 holds
        # devices 2 and 3), the manifest names the mesh and every piece's writer.
        ckpt = os.path.join(out, "mpi", "checkpoints")
        saved = sorted(d for d in os.listdir(ckpt) if d.isdigit())
        assert saved == ["2", "4"], saved
        files = sorted(os.listdir(os.path.join(ckpt, "4")))
        assert files == ["manifest.json"] + [f"shard-{d}.safetensors" for d in range(4)], files
        with open(os.path.join(ckpt, "4", "manifest.json")) as f:
            manifest = json.load(f)
        assert manifest["mesh"]["num_devices"] == 4, manifest["mesh"]
        devices = {p["device"] for t in manifest["tensors"].values() for p in t["pieces"]}
        assert devices == {0, 1, 2, 3}, devices
        # The MPI checkpoint of step 4 resumed on one device: steps 4 and 5.
        run([args.kiln, "train"] + common + ["per_device_batch_size=4", "local_devices=1", "ici_fsdp_parallelism=1",
                                             "enable_checkpointing=false", "run_name=one_resumed", "steps=6",
                                             f"load_full_state_path={ckpt}/4"], env)
        one_resumed = records(os.path.join(out, "one_resumed", "metrics.jsonl"))
        assert [r["step"] for r in one_resumed] == [4, 5], one_resumed
        # Resume from step 4 with steps=6 under MPI: both ranks restore, two more steps.
        log = run(shlex.split(args.mpirun) + [args.kiln, "train"] + common + [
            "per_device_batch_size=1", "local_devices=2", "ici_fsdp_parallelism=2", "ici_expert_parallelism=2",
            "enable_checkpointing=true", "checkpoint_period=2", "run_name=mpi", "steps=6"], env)
        assert "restored the full training state of step 4" in log, log
        resumed = [line for line in log.splitlines() if line.startswith("completed step:")]
        assert [line.split(",")[0] for line in resumed] == ["completed step: 4", "completed step: 5"], resumed
        mpi_resumed = records(os.path.join(out, "mpi", "metrics.jsonl"))[-2:]
        for a, b in zip(one_resumed, mpi_resumed):
            assert a["step"] == b["step"] and abs(a["loss"] - b["loss"]) <= 1e-4 * abs(a["loss"]), (a, b)
        # An error on rank 0 alone (its output directory is a file; rank 1 writes nothing) ends
        # the job at once (MpiWorld::abort_job), not after rank 1's collective timeout (120 s).
        blocker = os.path.join(out, "a_file")
        open(blocker, "w").close()
        start = time.monotonic()
        p = subprocess.run(shlex.split(args.mpirun) + [args.kiln, "train"] + MODEL + [
            f"backend={args.backend}", f"base_output_directory={blocker}", "per_device_batch_size=1",
            "local_devices=2", "ici_fsdp_parallelism=4", "enable_checkpointing=false", "run_name=bad"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        took = time.monotonic() - start
        assert p.returncode != 0, p.stdout
        assert "kiln: error: rank 0: cannot create directory" in p.stdout, p.stdout
        assert took < 60, f"the job took {took:.0f} s to end after rank 0 failed"
        print(f"ok: {len(one)} steps, losses {[round(r['loss'], 6) for r in mpi]} "
              f"(one device {[round(r['loss'], 6) for r in one]}), collective_wait "
              f"{[round(r['collective_wait_s'], 3) for r in mpi]} s")
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
