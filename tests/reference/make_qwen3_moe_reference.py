#!/usr/bin/env python3
"""The saved Qwen3-MoE reference of tests/models/qwen3_moe_parity_test.cc: a tiny
Qwen3MoeForCausalLM (transformers, random weights at unit scale), saved with save_pretrained
(f32, the per-expert layout of the released checkpoints), with seeded input ids, its float32
logits and its per-token cross-entropy.

  .venv/bin/python tests/reference/make_qwen3_moe_reference.py tests/models/data/qwen3_moe

Writes OUT/config.json, OUT/model.safetensors and OUT/reference.safetensors (ids int32 [B, T],
logits f32 [B, T, V], token_loss f32 [B, T-1]: -log softmax(logits[:, t])[ids[:, t+1]],
loss f32 []: the model's own mean loss with labels=ids). Deterministic: the same files on
every run with the same torch and transformers.

The shape exercises what a mapping could get wrong: head_dim 16 is not hidden/heads (8), GQA
(4 query heads, 2 kv heads), top-3 of 8 experts with norm_topk_prob, non-default theta and
eps, norm scales away from 1 (so q_norm and k_norm matter), and the ids are chosen so that no
token's router has a near-tie between its k-th and (k+1)-th expert (top-k is discontinuous
there: a rounding difference could pick another expert).
"""
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

B, T = 2, 12
MARGIN = 1e-3  # smallest router top-k logit gap allowed in the reference tokens


def config():
    return Qwen3MoeConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
        rms_norm_eps=2e-6, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
        tie_word_embeddings=False, dtype="float32")


def randomize(model, seed):
    """transformers' init (N(0, 0.02), norm scales 1) makes a near-linear model: draw at unit
    scale instead, kernels N(0, 1/fan_in), the embedding N(0, 1), norm scales 1 + N(0, 0.2)."""
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


def router_margin(model, ids):
    """The smallest gap between the k-th and (k+1)-th router logit over every token and layer."""
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


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config()).to(torch.float32)
    randomize(model, 1)
    model.eval()
    for seed in range(100):
        ids = torch.from_numpy(np.random.default_rng(seed).integers(0, 128, size=(B, T)).astype(np.int64))
        if router_margin(model, ids) >= MARGIN:
            break
    else:
        raise SystemExit("no seed routes without a near-tie")
    with torch.no_grad():
        result = model(input_ids=ids, labels=ids)
    logits = result.logits.float()
    token_loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none").reshape(B, T - 1)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)
    gen_config = os.path.join(out, "generation_config.json")
    if os.path.exists(gen_config):
        os.remove(gen_config)
    save_file({"ids": ids.to(torch.int32).contiguous(), "logits": logits.contiguous(),
               "token_loss": token_loss.contiguous(), "loss": result.loss.detach().float().reshape(())},
              os.path.join(out, "reference.safetensors"))
    print("seed %d, router margin %.2e, loss %.6f, max |logit| %.3f"
          % (seed, router_margin(model, ids), result.loss.item(), logits.abs().max().item()))


if __name__ == "__main__":
    main()
