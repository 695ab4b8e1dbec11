#!/usr/bin/env python3
"""Kiln against Hugging Face transformers' LlamaForCausalLM, both ways (the Llama section of
scripts/parity.sh; subcommands, checks and tolerances are family_parity.py's).

  make HF_DIR --seed S [--tied]
      a small Llama built in transformers from a LlamaConfig (Llama 3.1 RoPE scaling that acts
      on its 16-wide heads, GQA, numbers off transformers' defaults) with seeded unit-scale
      random weights, saved with save_pretrained (f32)
  check ...   (family_parity.py)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_parity  # noqa: E402


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


def make(args):
    import torch
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM(small_config(args.tied)).to(torch.float32)
    randomize(model, args.seed)
    return model


def load_hf(hf_dir):
    from transformers import LlamaForCausalLM
    return family_parity.from_pretrained(LlamaForCausalLM, hf_dir)


def describe(model):
    import json
    cfg = model.config
    return "tied %s; rope %s" % (cfg.tie_word_embeddings, json.dumps(cfg.rope_parameters, sort_keys=True))


FAMILY = family_parity.Family(
    name="LlamaForCausalLM", make=make, load_hf=load_hf, describe=describe,
    make_flags=[("--tied", {"action": "store_true"})])

if __name__ == "__main__":
    sys.exit(family_parity.main(FAMILY, __doc__))
