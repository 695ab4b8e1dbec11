#!/usr/bin/env python3
"""Kiln against transformers' DeepseekV3ForCausalLM, both ways (the DeepSeek-V3 section of
scripts/parity.sh; subcommands, checks and tolerances are family_parity.py's).

  make HF_DIR --seed S
      a small DeepseekV3ForCausalLM with seeded random weights (correction biases included) at
      unit scale, saved with save_pretrained (f32, the per-expert layout of the released
      checkpoints)
  tokens, check ...   (family_parity.py; routing near-ties are checked at every group and
      expert choice)

The correction biases are buffers in transformers and take no gradient in Kiln (checked to be
zero). transformers has no MTP module, so Kiln runs with mtp_num_layers=0.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_parity  # noqa: E402


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


def make(args):
    import torch
    from transformers import DeepseekV3ForCausalLM
    model = DeepseekV3ForCausalLM(small_config()).to(torch.float32)
    randomize(model, args.seed)
    return model


def load_hf(hf_dir):
    """Eager experts too (the per-expert loop)."""
    from transformers import DeepseekV3ForCausalLM
    return family_parity.from_pretrained(DeepseekV3ForCausalLM, hf_dir, experts_implementation="eager")


def describe(model):
    cfg = model.config
    return "%d layers, top-%d of %d experts" % (cfg.num_hidden_layers, cfg.num_experts_per_tok, cfg.n_routed_experts)


FAMILY = family_parity.Family(
    name="DeepseekV3ForCausalLM", make=make, load_hf=load_hf, describe=describe, router_margin=router_margin,
    regroup=family_parity.per_expert,
    zero_grads=[(lambda n: n.endswith("e_score_correction_bias"), "correction bias")])

if __name__ == "__main__":
    sys.exit(family_parity.main(FAMILY, __doc__))
