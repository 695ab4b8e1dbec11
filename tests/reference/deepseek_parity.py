#!/usr/bin/env python3
"""Kiln against transformers' DeepseekV3ForCausalLM, both ways (scripts/parity.sh drives it, as
hf_parity.py for GPT-OSS; its `table` subcommand prints every family's rows). Made from
qwen3_moe_parity.py: the same subcommands, tolerances and per-expert gradient layout.

Subcommands:
  make HF_DIR --seed S
      a small DeepseekV3ForCausalLM with seeded random weights (correction biases included) at unit scale, saved with
      save_pretrained (f32, the per-expert layout of the released checkpoints)
  tokens OUT.npy --vocab V --batch B --len T --seed S [--hf HF_DIR ...]
      seeded random ids, int32 [B, T]; with --hf, from the first seed whose rows have no
      routing near-tie in those models (every group and expert choice gap >= 1e-4)
  check --name NAME --hf HF_DIR --tokens T.npy --logits L.npy --loss LOSS.npy
        --grads GRADS.safetensors --results R.jsonl
      loads HF_DIR with DeepseekV3ForCausalLM.from_pretrained (float32, eager attention and
      eager experts), runs it on the tokens with labels=ids and compares with `kiln forward`'s
      logits, per-token losses and training-step gradient (`grads_out=`, Hugging Face names in
      the per-expert layout; transformers' own gradients of its fused gate_up_proj [E, 2I, D]
      and down_proj [E, D, I] are split the way save_pretrained splits the weights).

Errors and tolerances are hf_parity.py's: logits, per-token loss and mean loss within 1e-5
relative, every parameter's gradient within 1e-4 (max |kiln - hf| / max |hf|); the correction
biases are buffers in transformers and take no gradient in Kiln. transformers has no MTP
module, so Kiln runs with mtp_num_layers=0.
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
    """DeepSeek-V3 at toy size with every feature on: MLA with a low-rank query, v_head_dim
    not the q/k width, YaRN (factor 4, mscale = mscale_all_dim) on interleaved pairs, one
    dense layer then MoE, a shared expert, top-2 of 8 experts from 2 of 4 groups."""
    from transformers import DeepseekV3Config
    return DeepseekV3Config(
        vocab_size=500, hidden_size=64, intermediate_size=96, moe_intermediate_size=24,
        num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12,
        n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
        norm_topk_prob=True, routed_scaling_factor=2.5, rms_norm_eps=1e-6, max_position_embeddings=256,
        rope_interleave=True, num_mtp_layers=0,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32.0, "beta_slow": 1.0,
                         "mscale": 1.0, "mscale_all_dim": 1.0},
        tie_word_embeddings=False, dtype="float32")


def randomize(model, seed):
    """Unit scale instead of transformers' N(0, 0.02): kernels N(0, 1/fan_in), the embedding
    N(0, 1), norm scales 1 + N(0, 0.2), correction biases N(0, 0.3)."""
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
        for layer in model.model.layers[model.config.first_k_dense_replace:]:
            b = layer.mlp.gate.e_score_correction_bias
            b.copy_(0.3 * torch.randn(b.shape, generator=gen))


def cmd_make(args):
    import torch
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(args.seed)
    model = DeepseekV3ForCausalLM(small_config()).to(torch.float32)
    randomize(model, args.seed)
    model.save_pretrained(args.out)
    print("make: DeepseekV3ForCausalLM %d parameters, f32, saved with save_pretrained to %s"
          % (sum(p.numel() for p in model.parameters()), args.out))
    return 0


def load_hf(hf_dir):
    """Float32, eager attention and eager experts (the per-expert loop); a missing,
    unexpected or misshapen tensor is an error (from_pretrained would initialise it)."""
    import torch
    from transformers import DeepseekV3ForCausalLM
    model, info = DeepseekV3ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                                      experts_implementation="eager", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit("from_pretrained(%s): %s" % (hf_dir, problems))
    return model.eval()


def router_margin(model, ids):
    """The smallest gap at a routing decision, every token and MoE layer: between the
    topk_group-th and next group score, and between the k-th and next biased expert score
    among the kept groups."""
    import torch
    cfg = model.config
    k, groups, top_groups = cfg.num_experts_per_tok, cfg.n_group, cfg.topk_group
    margin = [float("inf")]

    def hook(module, _inputs, output):
        choice = output[0].detach().sigmoid() + module.e_score_correction_bias
        per = choice.shape[-1] // groups
        group_scores = choice.view(-1, groups, per).topk(2, dim=-1).values.sum(-1)
        if top_groups < groups:
            g = group_scores.topk(top_groups + 1, dim=-1).values
            margin[0] = min(margin[0], float((g[:, top_groups - 1] - g[:, top_groups]).min()))
        kept = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(top_groups, dim=-1).indices, 1.0)
        masked = choice.masked_fill(kept.repeat_interleave(per, dim=1) == 0, float("-inf"))
        top = masked.topk(k + 1, dim=-1).values
        margin[0] = min(margin[0], float((top[:, k - 1] - top[:, k]).min()))

    hooks = [layer.mlp.gate.register_forward_hook(hook) for layer in model.model.layers[cfg.first_k_dense_replace:]]
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
    # The correction biases: buffers in transformers, set by the step (no gradient) in Kiln.
    zero_bias = all(not np.any(g) for n, g in kg.items() if n.endswith("e_score_correction_bias"))
    kg = {n: g for n, g in kg.items() if not n.endswith("e_score_correction_bias")}
    row("bias gradients zero", 0.0 if zero_bias else 1.0, 0.0, note="mlp.gate.e_score_correction_bias")
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
    print("%s: transformers %s, torch %s; %d layers, top-%d of %d experts, min routing margin %.2e; %.1f s"
          % (args.name, __import__("transformers").__version__, torch.__version__, cfg.num_hidden_layers,
             cfg.num_experts_per_tok, cfg.n_routed_experts, margin, time.time() - t0))
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
