#!/usr/bin/env python3
"""bf16 mixed precision vs float32: the same training run twice, loss curves side by side.

Trains --model (default `gpt-oss-tiny`; byte vocabulary, --batch x --seq tokens per step,
default 1 x 128) on the fortunes corpus (Debian's fortunes-min, tokenized once with
`kiln tokenize`) for --steps steps, once with
dtype=float32 and once with dtype=bfloat16 (weight_dtype=float32: f32 master weights and
Adam moments), same seed and data order. Prints both curves every --every steps, the
largest |loss_bf16 - loss_f32| over the run and over a trailing window (per-step losses of
one 128-token batch are noisy, so the window mean is the tracking criterion), and exits 1
when the window means differ by more than --tol.

Usage: /usr/bin/python3 bench/bf16_loss_curve.py [--kiln build/kiln] [--steps 200] [--tol 0.1]
         [--model gpt-oss-tiny] [--batch 1] [--seq 128] [--lr 3e-3]
  (make e2e also runs --model gpt-oss-small --batch 2 --seq 512 --steps 100 --lr 1e-3)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

FORTUNES = ["/usr/share/games/fortunes/fortunes", "/usr/share/games/fortunes/literature",
            "/usr/share/games/fortunes/riddles"]


def corpus(kiln, work):
    path = os.path.join(work, "fortunes")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        missing = [f for f in FORTUNES if not os.path.exists(f)]
        if missing:
            sys.exit("bf16_loss_curve: %s missing (scripts/setup.sh installs fortunes-min)" % missing[0])
        subprocess.run([kiln, "tokenize", "--output", path] + FORTUNES, check=True, stdout=subprocess.DEVNULL)
    return path


def losses(kiln, data, dtype, a, work):
    run = "bf16_curve_%s_%s" % (a.model, dtype)
    args = [kiln, "train", "model_name=" + a.model, "override_model_config=true", "vocab_size=258",
            "per_device_batch_size=%d" % a.batch, "max_target_length=%d" % a.seq, "steps=%d" % a.steps,
            "learning_rate=%g" % a.lr,
            "dataset_type=tokens", "dataset_path=" + data, "enable_checkpointing=false", "dtype=" + dtype,
            "weight_dtype=float32", "run_name=" + run, "base_output_directory=" + work] + a.extra
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(work, run, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--tol", type=float, default=0.1)
    ap.add_argument("--work", default="")
    ap.add_argument("--model", default="gpt-oss-tiny")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("extra", nargs="*", help="more key=value settings for both runs")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="kiln_bf16_curve_")
    data = corpus(a.kiln, work)
    f32 = losses(a.kiln, data, "float32", a, work)
    bf16 = losses(a.kiln, data, "bfloat16", a, work)
    print("bf16_loss_curve: %s, fortunes corpus, %d x %d tokens, %d steps, lr %g" %
          (a.model, a.batch, a.seq, a.steps, a.lr))
    print("%6s %10s %10s %10s" % ("step", "f32", "bf16", "bf16-f32"))
    for s in range(0, a.steps, a.every):
        print("%6d %10.4f %10.4f %+10.4f" % (s, f32[s], bf16[s], bf16[s] - f32[s]))
    print("%6d %10.4f %10.4f %+10.4f" % (a.steps - 1, f32[-1], bf16[-1], bf16[-1] - f32[-1]))
    deviation = [abs(b - f) for b, f in zip(bf16, f32)]
    worst = max(range(len(deviation)), key=deviation.__getitem__)
    w = min(a.window, a.steps)
    mean_f32, mean_bf16 = sum(f32[-w:]) / w, sum(bf16[-w:]) / w
    print("max |bf16 - f32| over all steps: %.4f (step %d); relative %.2f%%" %
          (deviation[worst], worst, 100 * deviation[worst] / f32[worst]))
    print("mean loss over the last %d steps: f32 %.4f, bf16 %.4f, difference %+.4f (tolerance %.3f)" %
          (w, mean_f32, mean_bf16, mean_bf16 - mean_f32, a.tol))
    print("reproduce: /usr/bin/python3 bench/bf16_loss_curve.py --kiln %s --model %s --batch %d --seq %d --steps %d "
          "--lr %g" % (a.kiln, a.model, a.batch, a.seq, a.steps, a.lr))
    if abs(mean_bf16 - mean_f32) > a.tol:
        print("FAIL: bf16 does not track f32 within the tolerance")
        sys.exit(1)


if __name__ == "__main__":
    main()
