#!/usr/bin/env python3
"""Kiln against transformers' Qwen3MoeForCausalLM, both ways (the Qwen3-MoE section of
scripts/parity.sh; subcommands, checks and tolerances are family_parity.py's).

  make HF_DIR --seed S
      a small Qwen3MoeForCausalLM with seeded random weights at unit scale, saved with
      save_pretrained (f32, the per-expert layout of the released checkpoints)
  tokens, check ...   (family_parity.py; transformers' fused expert gradients are split the
      way save_pretrained splits the weights)

transformers' loss is the mean cross-entropy (no router auxiliary loss: output_router_logits is
off), so Kiln runs with load_balance_loss_weight=0.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_parity  # noqa: E402


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


def make(args):
    import torch
    from transformers import Qwen3MoeForCausalLM
    model = Qwen3MoeForCausalLM(small_config()).to(torch.float32)
    randomize(model, args.seed)
    return model


def load_hf(hf_dir):
    """Eager experts too (the per-expert loop)."""
    from transformers import Qwen3MoeForCausalLM
    return family_parity.from_pretrained(Qwen3MoeForCausalLM, hf_dir, experts_implementation="eager")


def describe(model):
    cfg = model.config
    return "%d layers, top-%d of %d experts, head_dim %d" % (cfg.num_hidden_layers, cfg.num_experts_per_tok,
                                                           cfg.num_experts, cfg.head_dim)


FAMILY = family_parity.Family(
    name="Qwen3MoeForCausalLM", make=make, load_hf=load_hf, describe=describe, router_margin=router_margin,
    regroup=family_parity.per_expert)

if __name__ == "__main__":
    sys.exit(family_parity.main(FAMILY, __doc__))
