#!/usr/bin/python3
"""skip_step_on_spikes (src/kiln/train/spike_window.h): a corpus of one repeated sentence with
one paragraph of random characters in it (a corrupted batch). Without the option that batch's
step is a loss spike; with it, exactly the spike steps are skipped (recorded in metrics.jsonl,
events.jsonl and the report page), the run goes on, and its final loss is within 1% of the run
on the clean corpus. The rolling window is in the checkpoint: stopped at step 40 and resumed,
the run skips the same step and ends bit for bit like the uninterrupted one. On the clean
corpus the option skips nothing.

  spike_test.py --kiln build/kiln
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

MODEL = [
    "model_name=gpt-oss-tiny", "override_model_config=true", "base_emb_dim=64", "base_mlp_dim=64",
    "base_moe_mlp_dim=32", "head_dim=16", "base_num_query_heads=4", "base_num_kv_heads=2",
    "base_num_decoder_layers=2", "num_experts=4", "sliding_window_size=16", "max_target_length=64",
    "per_device_batch_size=2", "learning_rate=3e-3", "dataset_type=text", "tokenizer_type=bytes",
    "vocab_size=258", "enable_tensorboard=false", "log_period=1", "learning_rate_schedule_steps=80",
]
SKIP = ["skip_step_on_spikes=true", "skip_step_interval=16", "skip_step_scaling_factor=6"]


def corpus(path, corrupt):
    rng = random.Random(3)
    docs = ["the quick brown fox jumps over the lazy dog and runs far away. " * 2] * 400
    docs = [d.strip() for d in docs]
    garbage = "".join(rng.choice("ZQXJKVWYzqxjkvwy0123456789#%&@!") for _ in range(len(docs[0])))
    if corrupt:
        docs[200] = garbage  # the same length: both corpora pack and shuffle alike
    with open(path, "w") as f:
        f.write("\n\n".join(docs) + "\n")


def train(kiln, out, name, data, extra, env):
    cmd = [kiln, "train"] + MODEL + [f"dataset_path={data}", f"dataset_cache_dir={out}/cache",
                                     f"base_output_directory={out}", f"run_name={name}"] + extra
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: exit {p.returncode}: {' '.join(cmd)}\n{p.stdout}")
    with open(os.path.join(out, name, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()], p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", KILN_PROGRESS="off")
    out = tempfile.mkdtemp(prefix="kiln_spike_")
    try:
        clean_txt, dirty_txt = os.path.join(out, "clean.txt"), os.path.join(out, "dirty.txt")
        corpus(clean_txt, False)
        corpus(dirty_txt, True)
        steps = ["steps=80", "enable_checkpointing=false"]
        clean, _ = train(args.kiln, out, "clean", clean_txt, steps, env)
        dirty, _ = train(args.kiln, out, "dirty", dirty_txt, steps, env)
        # The corrupted batch's steps, seen without the option: far above the steps before.
        spikes = [r["step"] for i, r in enumerate(dirty)
                  if i >= 20 and r["loss"] > 10 * statistics.median(x["loss"] for x in dirty[i - 16:i])]
        assert spikes, [r["loss"] for r in dirty]
        skipped, log = train(args.kiln, out, "skip", dirty_txt, steps + SKIP, env)
        assert [r["step"] for r in skipped if r.get("skipped")] == spikes, (spikes, skipped)
        assert all(f"step {s} skipped (skip_step_on_spikes)" in log for s in spikes), log
        events = [json.loads(l) for l in open(os.path.join(out, "skip", "events.jsonl"))]
        assert [e["step"] for e in events if e["event"] == "spike_skipped"] == spikes, events
        assert 'ev-spike_skipped' in open(os.path.join(out, "skip", "report.html")).read()
        final = lambda rs: rs[-1]["loss"]
        assert abs(final(skipped) - final(clean)) <= 0.01 * final(clean), (final(skipped), final(clean))
        # Clean corpus with the option: nothing skipped, and the losses of the run without it
        # (within float rounding: the kept-or-dropped select fuses into the AdamW kernels, whose
        # generated code then rounds a little differently; the interpreter gives the same bits).
        clean_skip, _ = train(args.kiln, out, "clean_skip", clean_txt, steps + SKIP, env)
        assert not [r for r in clean_skip if r.get("skipped")], "a clean run skipped a step"
        for a, b in zip(clean, clean_skip):
            assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"]), (a["step"], a["loss"], b["loss"])
        # Stopped at step 40 (checkpoint) and resumed: the same skips, the same losses.
        half, _ = train(args.kiln, out, "resumed", dirty_txt, ["steps=40", "enable_checkpointing=true"] + SKIP, env)
        whole, _ = train(args.kiln, out, "resumed", dirty_txt, ["steps=80", "enable_checkpointing=true"] + SKIP, env)
        assert [r["loss"] for r in whole] == [r["loss"] for r in skipped], "the resumed run differs"
        print(f"ok: steps {spikes} skipped; final loss {final(skipped):.5f} vs clean {final(clean):.5f} "
              f"(without skipping {final(dirty):.5f}); resumed bit for bit")
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
