#!/usr/bin/env python3
"""Kiln against Hugging Face transformers' LlamaForCausalLM, both ways (the Llama section of
scripts/parity.sh; the token, gradient-file and table helpers are hf_parity.py's).

Subcommands:
  make HF_DIR --seed S [--tied]
      a small Llama built in transformers from a LlamaConfig (Llama 3.1 RoPE scaling that acts
      on its 16-wide heads, GQA, numbers off transformers' defaults) with seeded unit-scale
      random weights, saved with save_pretrained (f32)
  check --name NAME --hf HF_DIR --tokens T.npy --logits L.npy --loss LOSS.npy
        [--grads GRADS.safetensors] --results R.jsonl
      loads HF_DIR with LlamaForCausalLM.from_pretrained (float32, eager attention), runs it
      on the tokens with labels=ids, and compares with `kiln forward`'s logits, per-token
      losses and (with --grads) its training-step gradient of every parameter; a float64
      copy of the model is the tie-breaker, as in hf_parity.py

Errors and tolerances are hf_parity.py's: logits, per-token and mean loss 1e-5 relative,
every gradient 1e-4 relative to its largest entry.
"""
import argparse
import copy
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity import GRAD_TOL, LOGIT_TOL, LOSS_TOL, read_grads, rel  # noqa: E402


def small_config(tied):
    """Llama 3.1's RoPE scaling where a 16-wide head feels it: theta 1e4 gives wavelengths
    6.3, 20, 63, 199, ... tokens; an original context of 32 keeps the first (< 32 / 4),
    blends the second and divides the rest by 4. Epsilon, theta and factor are not
    transformers' defaults, so a mapping that dropped one would show."""
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=96, head_dim=16,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
        rms_norm_eps=2e-5, max_position_embeddings=128,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=tied, dtype="float32",
    )


def randomize(model, seed):
    """Unit scale (transformers' N(0, 0.02) init makes a near-linear model with tiny logits):
    kernels N(0, 1/fan_in), norm scales 1 + N(0, 0.2), the embedding N(0, 1) (N(0, 1/D) when
    tied)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif name == "model.embed_tokens.weight":
                # Tied, it is the unembedding too: N(0, 1/D) keeps the logits near unit scale.
                scale = p.shape[1] ** -0.5 if model.config.tie_word_embeddings else 1.0
                v = scale * torch.randn(p.shape, generator=gen)
            else:  # nn.Linear [out, in]
                v = torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5
            p.copy_(v.to(p.dtype))


def cmd_make(args):
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(small_config(args.tied)).to(torch.float32)
    randomize(model, args.seed)
    model.save_pretrained(args.out)
    print("make: LlamaForCausalLM %d parameters (tied %s), f32, saved with save_pretrained to %s"
          % (sum(p.numel() for p in model.parameters()), args.tied, args.out))
    return 0


def load_hf(hf_dir):
    """LlamaForCausalLM in float32, eager attention. A missing, unexpected or misshapen
    tensor is an error: from_pretrained would otherwise initialise it at random."""
    import torch
    from transformers import LlamaForCausalLM
    model, info = LlamaForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                                   output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("from_pretrained(%s): %s" % (hf_dir, problems))
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32, (name, p.dtype)
    return model.eval()


def run_hf(model, ids):
    """logits, per-token loss [B, T] (last position 0), the model's mean loss, gradients."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    logits = out.logits.detach().double().numpy()
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    nxt = ids.numpy()[:, 1:]
    token_loss = np.zeros(ids.shape, dtype=np.float64)
    token_loss[:, :-1] = -np.take_along_axis(logp[:, :-1], nxt[..., None], -1)[..., 0]
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters() if p.grad is not None}
    return logits, token_loss, out.loss.item(), grads


def cmd_check(args):
    import torch
    torch.manual_seed(0)
    t0 = time.time()
    model = load_hf(args.hf)
    model64 = copy.deepcopy(model).double()
    ids = torch.from_numpy(np.load(args.tokens).astype(np.int64))
    B, T = ids.shape
    logits, token_loss, loss, grads = run_hf(model, ids)
    logits64, token_loss64, _, grads64 = run_hf(model64, ids)
    loss64 = token_loss64[:, :-1].mean()
    kiln_logits = np.load(args.logits)
    kiln_loss = np.load(args.loss).astype(np.float64)
    if kiln_logits.shape != logits.shape:
        raise SystemExit("logits shape: kiln %s, transformers %s" % (kiln_logits.shape, logits.shape))
    kiln_mean = kiln_loss[:, :-1].mean()
    rows = []

    def row(what, err, tol, err64=None, hf_vs_64=None, note=""):
        rows.append({"check": args.name, "what": what, "err": err, "tol": tol, "ok": bool(err <= tol),
                     "err_vs_f64": err64, "hf32_vs_f64": hf_vs_64, "note": note})

    row("logits", rel(kiln_logits, logits), LOGIT_TOL, rel(kiln_logits, logits64), rel(logits, logits64),
        "max|logit| %.3g" % np.abs(logits).max())
    row("per-token loss", rel(kiln_loss, token_loss), LOSS_TOL, rel(kiln_loss, token_loss64),
        rel(token_loss, token_loss64), "%d tokens" % (B * (T - 1)))
    row("mean loss", rel(kiln_mean, loss), LOSS_TOL, rel(kiln_mean, loss64), rel(loss, loss64),
        "kiln %.7f, hf %.7f" % (kiln_mean, loss))
    if args.grads:
        kg, meta = read_grads(args.grads)
        if set(kg) != set(grads):
            rows.append({"check": args.name, "what": "gradient names", "err": float(len(set(kg) ^ set(grads))),
                         "tol": 0.0, "ok": False, "err_vs_f64": None, "hf32_vs_f64": None,
                         "note": "only kiln %s, only transformers %s" % (sorted(set(kg) - set(grads)),
                                                                         sorted(set(grads) - set(kg)))})
            grads = {n: g for n, g in grads.items() if n in kg}
        diff_loss = float(meta.get("loss", "nan"))
        row("differentiated loss", rel(diff_loss, loss), LOSS_TOL, rel(diff_loss, loss64), rel(loss, loss64),
            "kiln z_loss %s" % meta.get("z_loss"))
        errs = {n: rel(kg[n], grads[n]) for n in grads}
        worst = max(errs, key=errs.get)
        row("gradient (worst of %d)" % len(errs), errs[worst], GRAD_TOL, rel(kg[worst], grads64[worst]),
            rel(grads[worst], grads64[worst]), worst)
        if args.verbose:
            for n in sorted(errs, key=errs.get, reverse=True):
                print("  grad %-50s %.2e (vs f64 %.2e)" % (n, errs[n], rel(kg[n], grads64[n])))
    cfg = model.config
    print("%s: transformers %s, torch %s; T=%d, tied %s; rope %s; %.1f s" % (
        args.name, __import__("transformers").__version__, torch.__version__, T, cfg.tie_word_embeddings,
        json.dumps(cfg.rope_parameters, sort_keys=True), time.time() - t0))
    for r in rows:
        print("  %-28s %.2e (tol %.0e) %s  %s" % (r["what"], r["err"], r["tol"], "ok" if r["ok"] else "FAIL",
                                                    r["note"]))
    with open(args.results, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("out")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--tied", action="store_true")
    c = sub.add_parser("check")
    c.add_argument("--name", required=True)
    c.add_argument("--hf", required=True)
    c.add_argument("--tokens", required=True)
    c.add_argument("--logits", required=True)
    c.add_argument("--loss", required=True)
    c.add_argument("--grads")
    c.add_argument("--results", required=True)
    c.add_argument("--verbose", action="store_true", help="print every gradient tensor's error")
    args = p.parse_args()
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    if args.cmd == "check":
        try:
            return cmd_check(args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 (a check that cannot run is a failed row)
            message = "%s: %s" % (type(e).__name__, e)
            print("%s: %s" % (args.name, message))
            with open(args.results, "a") as f:
                f.write(json.dumps({"check": args.name, "what": "could not compare", "err": 1.0, "tol": 0.0,
                                    "ok": False, "err_vs_f64": None, "hf32_vs_f64": None, "note": message}) + "\n")
            return 1
    return cmd_make(args)


if __name__ == "__main__":
    sys.exit(main())
