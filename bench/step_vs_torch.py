#!/usr/bin/env python3
"""Whole-step benchmark: Kiln vs PyTorch on the same GPT-OSS-shaped model and batch.

Trains `model_name` (default gpt-oss-small) for a few steps with Kiln (`build/kiln train`,
compiled CPU backend, synthetic reused batch) and with a PyTorch implementation of the same
architecture (the project's reference model from tests/reference/gpt_oss_ref.py, with a
per-expert MoE loop instead of its per-token loop, and torch.optim.AdamW), both on 2
threads, f32. Prints step time, tokens/s, TFLOP/s (MaxText's formula, as Kiln logs it) and
MFU against this CPU's f32 peak measured in the same run (bench/cpu_peaks.py), and the ratio.

Usage: /usr/bin/python3 bench/step_vs_torch.py [--model gpt-oss-small] [--steps 6] [--kiln build/kiln]
       [--kiln_args "remat_policy=none"]   (Kiln keeps activations like PyTorch; "" = base.yml)
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import gpt_oss_ref as ref  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_peaks  # noqa: E402


def resolved_config(kiln, model):
    text = subprocess.run([kiln, "config", "model_name=" + model], check=True, capture_output=True, text=True).stdout
    cfg = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_0-9]+):\s*([^#]*)", line)
        if m:
            cfg[m.group(1)] = m.group(2).strip().strip('"')
    return cfg


def hf_config(c):
    layers = int(c["base_num_decoder_layers"])
    window = int(c["sliding_window_size"])
    return {
        "hidden_size": int(c["base_emb_dim"]), "num_attention_heads": int(c["base_num_query_heads"]),
        "num_key_value_heads": int(c["base_num_kv_heads"]), "head_dim": int(c["head_dim"]),
        "num_local_experts": int(c["num_experts"]), "num_experts_per_tok": int(c["num_experts_per_tok"]),
        "intermediate_size": int(c["base_moe_mlp_dim"]), "vocab_size": int(c["vocab_size"]),
        "rms_norm_eps": float(c["normalization_layer_epsilon"]), "rope_theta": float(c["rope_max_timescale"].replace("_", "")),
        "rope_scaling": {"rope_type": "yarn", "factor": float(c["rope_factor"]), "beta_fast": float(c["beta_fast"]),
                         "beta_slow": float(c["beta_slow"]),
                         "original_max_position_embeddings": int(c["original_max_position_embeddings"]),
                         "truncate": c["rope_truncate"] == "true"},
        "sliding_window": window, "swiglu_limit": float(c["mlp_activations_limit"]),
        "layer_types": ["sliding_attention" if (i % 2 == 0 and window > 0) else "full_attention" for i in range(layers)],
    }


def moe_per_expert(cfg, w, prefix, x):
    """The MoE as PyTorch users write it: route, then one matmul pair per expert."""
    bsz, t, d = x.shape
    e, k, limit = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["swiglu_limit"]
    tokens = x.reshape(-1, d)
    logits = tokens @ w[prefix + "router.weight"].T + w[prefix + "router.bias"]
    values, index = torch.topk(logits, k, dim=-1)
    weights = torch.softmax(values, dim=-1)
    out = torch.zeros_like(tokens)
    for ex in range(e):
        rows, slot = torch.where(index == ex)
        if rows.numel() == 0:
            continue
        hidden = tokens[rows] @ w[prefix + "experts.gate_up_proj"][ex] + w[prefix + "experts.gate_up_proj_bias"][ex]
        gate, up = hidden[:, 0::2].clamp(max=limit), hidden[:, 1::2].clamp(min=-limit, max=limit)
        y = ((up + 1) * gate * torch.sigmoid(gate * 1.702)) @ w[prefix + "experts.down_proj"][ex]
        y = y + w[prefix + "experts.down_proj_bias"][ex]
        out = out.index_add(0, rows, weights[rows, slot, None] * y)
    return out.view(bsz, t, d), torch.zeros(())


def random_weights(cfg, gen):
    d, h, kv, dh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    e, i, v = cfg["num_local_experts"], cfg["intermediate_size"], cfg["vocab_size"]

    def n(*shape, std=0.02):
        return (torch.randn(*shape, generator=gen) * std).requires_grad_()

    w = {"model.embed_tokens.weight": n(v, d), "model.norm.weight": torch.ones(d, requires_grad=True),
         "lm_head.weight": n(v, d)}
    for layer in range(len(cfg["layer_types"])):
        p = "model.layers.%d." % layer
        w.update({p + "input_layernorm.weight": torch.ones(d, requires_grad=True),
                  p + "post_attention_layernorm.weight": torch.ones(d, requires_grad=True),
                  p + "self_attn.q_proj.weight": n(h * dh, d), p + "self_attn.q_proj.bias": n(h * dh),
                  p + "self_attn.k_proj.weight": n(kv * dh, d), p + "self_attn.k_proj.bias": n(kv * dh),
                  p + "self_attn.v_proj.weight": n(kv * dh, d), p + "self_attn.v_proj.bias": n(kv * dh),
                  p + "self_attn.o_proj.weight": n(d, h * dh), p + "self_attn.o_proj.bias": n(d),
                  p + "self_attn.sinks": n(h), p + "mlp.router.weight": n(e, d), p + "mlp.router.bias": n(e),
                  p + "mlp.experts.gate_up_proj": n(e, d, 2 * i), p + "mlp.experts.gate_up_proj_bias": n(e, 2 * i),
                  p + "mlp.experts.down_proj": n(e, i, d), p + "mlp.experts.down_proj_bias": n(e, d)})
    return w


def torch_step_times(cfg, batch_size, seq_len, steps, threads):
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    w = random_weights(cfg, gen)
    tokens = torch.randint(0, cfg["vocab_size"], (batch_size, seq_len + 1), generator=gen, dtype=torch.int32)
    batch = {"inputs": tokens[:, :-1], "targets": tokens[:, 1:],
             "positions": torch.arange(seq_len, dtype=torch.int32).repeat(batch_size, 1),
             "segmentation": torch.ones(batch_size, seq_len, dtype=torch.int32)}
    ref.moe = moe_per_expert  # the reference's per-token loop is for parity, not speed
    opt = torch.optim.AdamW(list(w.values()), lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits, lb = ref.forward(cfg, w, batch)
        loss = ref.losses(cfg, logits, lb, batch)["loss"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(w.values()), 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return times, losses


def kiln_step_records(kiln, model, steps, extra):
    out_dir = tempfile.mkdtemp(prefix="kiln_bench_")
    subprocess.run([kiln, "train", "model_name=" + model, "steps=%d" % steps, "reuse_example_batch=1",
                    "run_name=bench", "base_output_directory=" + out_dir, "learning_rate=1e-4"] + extra,
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out_dir, "bench", "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt-oss-small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--threads", type=int, default=2)
    # The PyTorch side keeps every activation (no checkpointing), so Kiln does the same work
    # by default; pass --kiln_args "" to measure with base.yml's remat_policy (full).
    ap.add_argument("--kiln_args", default="remat_policy=none", help="extra key=value pairs for kiln train")
    args = ap.parse_args()
    c = resolved_config(args.kiln, args.model)
    cfg = hf_config(c)
    batch_size, seq_len = int(float(c["per_device_batch_size"])), int(c["max_target_length"])
    # MFU against this CPU's measured f32 peak (as kiln train's default), never a fixed number.
    peak = cpu_peaks.measure(os.path.join(os.path.dirname(os.path.abspath(args.kiln)), "bench"))["f32"]

    records = kiln_step_records(args.kiln, args.model, args.steps, args.kiln_args.split())
    steady = records[2:] if len(records) > 3 else records[1:]
    kiln_time = statistics.median(r["step_time_s"] for r in steady)
    tflops_per_step = steady[0]["tflops_per_s_per_device"] * steady[0]["step_time_s"]

    times, _ = torch_step_times(cfg, batch_size, seq_len, args.steps, args.threads)
    torch_time = statistics.median(times[2:] if len(times) > 3 else times[1:])

    tokens = batch_size * seq_len
    print("step_vs_torch: %s, batch %d x %d tokens, f32, %d threads, peak %.3f TFLOP/s" %
          (args.model, batch_size, seq_len, args.threads, peak))
    print("%-8s %10s %12s %10s %8s" % ("", "step (s)", "tokens/s", "TFLOP/s", "MFU"))
    for name, t in (("kiln", kiln_time), ("pytorch", torch_time)):
        print("%-8s %10.3f %12.1f %10.4f %7.2f%%" % (name, t, tokens / t, tflops_per_step / t,
                                                   100 * tflops_per_step / t / peak))
    print("kiln step time / pytorch step time = %.2f (target <= 0.5)" % (kiln_time / torch_time))
    print("reproduce: /usr/bin/python3 bench/step_vs_torch.py --model %s --steps %d" % (args.model, args.steps))


if __name__ == "__main__":
    main()
