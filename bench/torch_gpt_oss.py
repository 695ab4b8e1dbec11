#!/usr/bin/env python3
"""PyTorch side of bench/peers.py: one system (PyTorch eager or torch.compile, f32 or bf16
autocast) training GPT-OSS on Kiln's synthetic batch from Kiln's initial weights, in its
own process. Runs under PyTorch 2 (the venv) and Debian's PyTorch 1.13 (/usr/bin/python3).

The model is the project's reference (tests/reference/gpt_oss_ref.py: RMSNorm, YaRN RoPE,
GQA attention with sinks and sliding windows as Hugging Face's eager attention writes them,
the loss) with its per-token MoE loop replaced, as bench/step_vs_torch.py does, by
  --moe loop     one matmul pair per expert on the rows routed to it (step_vs_torch's
                 moe_per_expert: what PyTorch users write; data-dependent shapes), or
  --moe grouped  tokens sorted by expert and torch.nn.functional.grouped_mm over the
                 expert groups (PyTorch >= 2.8; static shapes, so torch.compile sees one
                 graph).
The optimizer is torch.optim.AdamW (fused=True where PyTorch has the CPU kernel) with
MaxText's hyperparameters and Kiln's learning-rate schedule, after
clip_grad_norm_(gradient_clipping_threshold). bf16 is torch.autocast("cpu", bfloat16) over
the forward and the loss, with f32 master weights, gradients and optimizer state.

Usage (peers.py runs it): python bench/torch_gpt_oss.py SPEC.json WEIGHTS.safetensors OUT.json
    [--dtype float32|bfloat16] [--mode eager|compile] [--moe loop|grouped] [--steps N] [--threads 2]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
import gpt_oss_ref as ref  # noqa: E402
import peers_common as pc  # noqa: E402
from step_vs_torch import moe_per_expert  # noqa: E402


def hf_cfg(spec):
    return {
        "hidden_size": spec["d_model"], "num_attention_heads": spec["heads"], "num_key_value_heads": spec["kv_heads"],
        "head_dim": spec["head_dim"], "num_local_experts": spec["experts"], "num_experts_per_tok": spec["top_k"],
        "intermediate_size": spec["mlp_dim"], "vocab_size": spec["vocab"], "rms_norm_eps": spec["eps"],
        "rope_theta": spec["rope_theta"],
        "rope_scaling": {"rope_type": "yarn", "factor": spec["rope_factor"], "beta_fast": spec["beta_fast"],
                         "beta_slow": spec["beta_slow"],
                         "original_max_position_embeddings": spec["original_max_position_embeddings"],
                         "truncate": spec["rope_truncate"]},
        "sliding_window": spec["sliding_window"], "swiglu_limit": spec["swiglu_limit"],
        "layer_types": ["sliding_attention" if pc.layer_is_sliding(spec, i) else "full_attention"
                        for i in range(spec["layers"])],
    }


def _autocast_dtype():
    if torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu")
    return None


def moe_grouped(cfg, w, prefix, x):
    """Dropless MoE on grouped_mm: sort the (token, slot) pairs by expert, one grouped GEMM
    per projection over the expert groups, weighted sum back into the tokens."""
    bsz, t, d = x.shape
    e, k, limit = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["swiglu_limit"]
    tokens = x.reshape(-1, d)
    logits = (tokens @ w[prefix + "router.weight"].T + w[prefix + "router.bias"]).float()
    values, index = torch.topk(logits, k, dim=-1)
    weights = torch.softmax(values, dim=-1)  # f32 [N, k]
    flat = index.reshape(-1)  # [N*k] expert of each (token, slot)
    order = torch.argsort(flat, stable=True)
    rows = torch.div(order, k, rounding_mode="floor")  # token of each sorted pair
    expert = flat[order]
    counts = torch.nn.functional.one_hot(flat, e).sum(0)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    mm_dtype = _autocast_dtype() or tokens.dtype
    xs = tokens[rows].to(mm_dtype)
    hidden = torch.nn.functional.grouped_mm(xs, w[prefix + "experts.gate_up_proj"].to(mm_dtype), offs=offs)
    hidden = hidden + w[prefix + "experts.gate_up_proj_bias"][expert]
    gate, up = hidden[:, 0::2].clamp(max=limit), hidden[:, 1::2].clamp(min=-limit, max=limit)
    act = ((up + 1) * gate * torch.sigmoid(gate * 1.702)).to(mm_dtype)
    y = torch.nn.functional.grouped_mm(act, w[prefix + "experts.down_proj"].to(mm_dtype), offs=offs)
    y = (y + w[prefix + "experts.down_proj_bias"][expert]).float() * weights.reshape(-1)[order, None]
    out = torch.zeros(tokens.shape, dtype=torch.float32).index_add(0, rows, y)
    return out.to(x.dtype).view(bsz, t, d), torch.zeros(())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("weights")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--moe", default="loop", choices=["loop", "grouped"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile-mode", default=None, help="torch.compile mode (default: PyTorch's default)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    spec = json.load(open(a.spec))
    cfg = hf_cfg(spec)
    ref.moe = moe_grouped if a.moe == "grouped" else moe_per_expert
    w = {n: torch.from_numpy(v.astype(np.float32)).requires_grad_()
         for n, v in pc.to_hf(spec, pc.read_params(a.weights)).items()}
    if spec["tied_embeddings"]:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]
    params = list({id(p): p for p in w.values()}.values())
    batch = {k: torch.from_numpy(v) for k, v in pc.synthetic_batch(spec).items()}
    lrs = pc.learning_rates(spec, a.steps)

    opt_kwargs = dict(lr=lrs[0], betas=(spec["adam_b1"], spec["adam_b2"]), eps=spec["adam_eps"],
                      weight_decay=spec["adam_weight_decay"])
    fused = False
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 4):
        opt_kwargs["fused"] = fused = True
    opt = torch.optim.AdamW(params, **opt_kwargs)
    bf16 = a.dtype == "bfloat16"

    def loss_fn(w, batch):
        if bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits, lb = ref.forward(cfg, w, batch)
        else:
            logits, lb = ref.forward(cfg, w, batch)
        return ref.losses(cfg, logits.float(), lb, batch)["loss"]

    info = {"torch": torch.__version__, "threads": torch.get_num_threads(), "moe": a.moe, "mode": a.mode,
            "mkldnn": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled,
            "mkl": torch.backends.mkl.is_available(), "fused_adamw": fused,
            "ld_preload": os.environ.get("LD_PRELOAD", "")}
    if a.mode == "compile":
        kwargs = {"mode": a.compile_mode} if a.compile_mode else {}
        loss_fn = torch.compile(loss_fn, **kwargs)
        info["compile_mode"] = a.compile_mode or "default"

    times, losses = [], []
    for step in range(a.steps):
        for group in opt.param_groups:
            group["lr"] = lrs[step]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(w, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, spec["clip"])
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
        print("step %d: %.3f s, loss %.6f" % (step, times[-1], losses[-1]), file=sys.stderr, flush=True)
    if a.mode == "compile":
        try:
            import torch._dynamo.utils as du
            info["graph_breaks"] = int(sum(du.counters["graph_break"].values()))
            info["unique_graphs"] = int(du.counters["stats"]["unique_graphs"])
        except Exception:  # noqa: BLE001 (counters are an internal API)
            pass
    # Time to the first step: for torch.compile, step 0 traces and compiles (Dynamo,
    # AOTAutograd, Inductor's C++ kernels) on the way.
    json.dump({"times": times, "losses": losses, "compile_s": times[0] if a.mode == "compile" else None,
               "first_step_s": times[0], "info": info}, open(a.out, "w"))


if __name__ == "__main__":
    main()
