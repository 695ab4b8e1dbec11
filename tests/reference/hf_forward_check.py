#!/usr/bin/env python3
"""Checks `kiln forward` against the PyTorch reference model (gpt_oss_ref.py) on a Hugging
Face-layout export: same logits and per-token loss within float32 tolerance.

Usage: hf_forward_check.py HF_DIR TOKENS.npy LOGITS.npy LOSS.npy

HF_DIR holds config.json and model.safetensors (F32), as `kiln convert --to hf` writes them;
TOKENS.npy int32 [B, T] ids; LOGITS.npy / LOSS.npy are kiln forward's outputs (f32 [B, T, V]
and [B, T], loss[b, t] = -log p(ids[b, t+1]), 0 at the last position).

The reference runs in float64, Kiln in float32, so the difference is Kiln's rounding: about
6e-8 relative per operation, grown by the depth of the model (norms, softmaxes, two layers)
and by cancellation in the residual sums. Errors are measured against the largest |logit|
(1e-5 of it: ~100x what a correct float32 run shows, far below any modelling difference such
as a wrong mask, rope dimension, sink or routing, which moves logits by 1e-2 or more).
Exits 1 when a check fails.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_oss_ref  # noqa: E402


def main():
    hf_dir, tokens_path, logits_path, loss_path = sys.argv[1:5]
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    weights = {n: v.to(torch.float64) for n, v in gpt_oss_ref.read_safetensors(os.path.join(hf_dir, "model.safetensors")).items()}
    ids = np.load(tokens_path).astype(np.int64)
    b, t = ids.shape
    targets = np.zeros_like(ids)
    targets[:, :-1] = ids[:, 1:]
    batch = {
        "inputs": torch.from_numpy(ids.astype(np.int32)),
        "targets": torch.from_numpy(targets.astype(np.int32)),
        "positions": torch.arange(t, dtype=torch.int32).repeat(b, 1),
        "segmentation": torch.ones(b, t, dtype=torch.int32),
    }
    with torch.no_grad():
        logits, _ = gpt_oss_ref.forward(cfg, weights, batch)
    ref = logits.numpy()
    log_z = np.log(np.exp(ref - ref.max(-1, keepdims=True)).sum(-1)) + ref.max(-1)
    ref_loss = log_z - np.take_along_axis(ref, targets[..., None], -1)[..., 0]
    ref_loss[:, -1] = 0.0

    kiln = np.load(logits_path).astype(np.float64)
    kiln_loss = np.load(loss_path).astype(np.float64)
    ok = True
    if kiln.shape != ref.shape:
        print("logits shape: kiln %s, reference %s" % (kiln.shape, ref.shape))
        return 1
    logit_err = np.abs(kiln - ref).max() / np.abs(ref).max()
    loss_err = np.abs(kiln_loss - ref_loss).max() / max(1.0, np.abs(ref_loss).max())
    print("kiln forward vs PyTorch reference: logits [%d, %d, %d], max |diff| / max |logit| = %.2e; "
          "per-token loss max |diff| = %.2e (mean loss kiln %.6f, reference %.6f)"
          % (b, t, ref.shape[-1], logit_err, loss_err, kiln_loss[:, :-1].mean(), ref_loss[:, :-1].mean()))
    if not logit_err < 1e-5:
        print("FAIL: logits differ by more than 1e-5 of their range")
        ok = False
    if not loss_err < 1e-5:
        print("FAIL: per-token losses differ by more than 1e-5")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
