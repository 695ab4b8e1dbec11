#!/usr/bin/env python3
"""Kiln against transformers' Qwen3MoeForCausalLM, both ways (scripts/parity.sh drives it, as
hf_parity.py for GPT-OSS; its `table` subcommand prints both families' rows).

Subcommands:
  make HF_DIR --seed S
      a small Qwen3MoeForCausalLM with seeded random weights at unit scale, saved with
      save_pretrained (f32, the per-expert layout of the released checkpoints)
  tokens OUT.npy --vocab V --batch B --len T --seed S [--hf HF_DIR ...]
      seeded random ids, int32 [B, T]; with --hf, from the first seed whose rows have no
      router near-tie in those models (every top-k logit gap >= 1e-4)
  check --name NAME --hf HF_DIR --tokens T.npy --logits L.npy --loss LOSS.npy
        --grads GRADS.safetensors --results R.jsonl
      loads HF_DIR with Qwen3MoeForCausalLM.from_pretrained (float32, eager attention and
      eager experts), runs it on the tokens with labels=ids and compares with `kiln forward`'s
      logits, per-token losses and training-step gradient (`grads_out=`, Hugging Face names in
      the per-expert layout; transformers' own gradients of its fused gate_up_proj [E, 2I, D]
      and down_proj [E, D, I] are split the way save_pretrained splits the weights).

Errors and tolerances are hf_parity.py's: logits, per-token loss and mean loss within 1e-5
relative, every parameter's gradient within 1e-4 (max |kiln - hf| / max |hf|). transformers'
loss is the mean cross-entropy (no router auxiliary loss: output_router_logits is off), so
Kiln runs with load_balance_loss_weight=0.
"""
import argparse
import copy
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_parity import GRAD_TOL, LOGIT_TOL, LOSS_TOL, MARGIN, read_grads, rel  # noqa: E402


def small_config():
    """Qwen3-MoE at toy size; the numbers a mapping could get wrong are off transformers'
    defaults: head_dim 16 is not hidden/heads (12), GQA 6/2, theta, eps, top-3 of 8."""
    from transformers import Qwen3MoeConfig
    return Qwen3MoeConfig(
        vocab_size=500, hidden_size=72, intermediate_size=96, moe_intermediate_size=24,
        num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
        rms_norm_eps=3e-6, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 20000.0},
        tie_word_embeddings=False, dtype="float32")


def randomize(model, seed):
    """Unit scale instead of transformers' N(0, 0.02): kernels N(0, 1/fan_in), the embedding
    N(0, 1), norm scales (q_norm and k_norm included) 1 + N(0, 0.2)."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
            elif name == "model.embed_tokens.weight":
                v = torch.randn(p.shape, generator=gen)
            else:  # [out, in] linears and the fused experts [E, out, in]
                v = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
            p.copy_(v)


def cmd_make(args):
    import torch
    from transformers import Qwen3MoeForCausalLM
    torch.manual_seed(args.seed)
    model = Qwen3MoeForCausalLM(small_config()).to(torch.float32)
    randomize(model, args.seed)
    model.save_pretrained(args.out)
    print("make: Qwen3MoeForCausalLM %d parameters, f32, saved with save_pretrained to %s"
          % (sum(p.numel() for p in model.parameters()), args.out))
    return 0


def load_hf(hf_dir):
    """Float32, eager attention and eager experts (the per-expert loop); a missing,
    unexpected or misshapen tensor is an error (from_pretrained would initialise it)."""
    import torch
    from transformers import Qwen3MoeForCausalLM
    model, info = Qwen3MoeForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                                      experts_implementation="eager", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("from_pretrained(%s): %s" % (hf_dir, problems))
    return model.eval()


def router_margin(model, ids):
    """The smallest gap between the k-th and (k+1)-th router logit, every token and layer."""
    import torch
    k = model.config.num_experts_per_tok
    margin = [float("inf")]

    def hook(_module, _inputs, output):
        top = torch.topk(output[0].detach(), k + 1, dim=-1).values
        margin[0] = min(margin[0], float((top[:, k - 1] - top[:, k]).min()))

    hooks = [layer.mlp.gate.register_forward_hook(hook) for layer in model.model.layers]
    with torch.no_grad():
        model(input_ids=ids)
    for h in hooks:
        h.remove()
    return margin[0]


def cmd_tokens(args):
    import torch
    models = [load_hf(d) for d in args.hf] if args.hf else []
    for seed in range(args.seed, args.seed + 100):
        ids = np.random.default_rng(seed).integers(0, args.vocab, size=(args.batch, args.len)).astype(np.int32)
        if not models:
            break
        margin = min(router_margin(m, torch.from_numpy(ids.astype(np.int64))) for m in models)
        if margin >= MARGIN:
            print("tokens: seed %d, smallest router top-k margin %.2e" % (seed, margin))
            break
    else:
        raise SystemExit("tokens: no seed in %d..%d routes without a near-tie" % (args.seed, args.seed + 99))
    np.save(args.out, ids)
    return 0


def per_expert(grads, config):
    """transformers' fused expert gradients in save_pretrained's per-expert layout:
    gate_up_proj [E, 2I, D] -> experts.e.gate_proj [I, D] (rows :I) and up_proj (rows I:),
    down_proj [E, D, I] -> experts.e.down_proj [D, I]."""
    out = {}
    I = config.moe_intermediate_size
    for name, g in grads.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base = name[: -len("gate_up_proj")]
            for e in range(g.shape[0]):
                out["%s%d.gate_proj.weight" % (base, e)] = g[e, :I]
                out["%s%d.up_proj.weight" % (base, e)] = g[e, I:]
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(g.shape[0]):
                out["%s%d.down_proj.weight" % (base, e)] = g[e]
        else:
            out[name] = g
    return out


def run_hf(model, ids):
    """logits, per-token loss [B, T] (last position 0), the model's mean loss, gradients."""
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    logits = out.logits.detach().double().numpy()
    logp = logits - logits.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    token_loss = np.zeros(ids.shape, dtype=np.float64)
    token_loss[:, :-1] = -np.take_along_axis(logp[:, :-1], ids.numpy()[:, 1:, None], -1)[..., 0]
    grads = {n: p.grad.detach().double().numpy() for n, p in model.named_parameters() if p.grad is not None}
    return logits, token_loss, out.loss.item(), per_expert(grads, model.config)


def cmd_check(args):
    import torch
    torch.manual_seed(0)
    t0 = time.time()
    model = load_hf(args.hf)
    model64 = copy.deepcopy(model).double()
    ids = torch.from_numpy(np.load(args.tokens).astype(np.int64))
    B, T = ids.shape
    margin = router_margin(model, ids)
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
    kg, meta = read_grads(args.grads)
    if set(kg) != set(grads):
        rows.append({"check": args.name, "what": "gradient names", "err": float(len(set(kg) ^ set(grads))), "tol": 0.0,
                     "ok": False, "err_vs_f64": None, "hf32_vs_f64": None,
                     "note": "only kiln %s, only transformers %s" % (sorted(set(kg) - set(grads))[:4],
                                                                     sorted(set(grads) - set(kg))[:4])})
        grads = {n: g for n, g in grads.items() if n in kg}
    diff_loss = float(meta.get("loss", "nan"))
    row("differentiated loss", rel(diff_loss, loss), LOSS_TOL, rel(diff_loss, loss64), rel(loss, loss64),
        "kiln moe_lb_loss %s, z_loss %s" % (meta.get("moe_lb_loss"), meta.get("z_loss")))
    errs = {n: rel(kg[n], grads[n]) for n in grads}
    worst = max(errs, key=errs.get)
    row("gradient (worst of %d)" % len(errs), errs[worst], GRAD_TOL, rel(kg[worst], grads64[worst]),
        rel(grads[worst], grads64[worst]), worst)
    cfg = model.config
    print("%s: transformers %s, torch %s; %d layers, top-%d of %d experts, head_dim %d, min router margin %.2e; %.1f s"
          % (args.name, __import__("transformers").__version__, torch.__version__, cfg.num_hidden_layers,
             cfg.num_experts_per_tok, cfg.num_experts, cfg.head_dim, margin, time.time() - t0))
    if margin < MARGIN:
        print("WARNING: a router top-k margin of %.2e is within rounding reach: routing may differ" % margin)
    for r in rows:
        print("  %-28s %.2e (tol %.0e) %s  %s" % (r["what"], r["err"], r["tol"], "ok" if r["ok"] else "FAIL", r["note"]))
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
    t = sub.add_parser("tokens")
    t.add_argument("out")
    t.add_argument("--vocab", type=int, required=True)
    t.add_argument("--batch", type=int, required=True)
    t.add_argument("--len", type=int, required=True)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--hf", nargs="+")
    c = sub.add_parser("check")
    for flag in ("--name", "--hf", "--tokens", "--logits", "--loss", "--grads", "--results"):
        c.add_argument(flag, required=True)
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
    return {"make": cmd_make, "tokens": cmd_tokens}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
