#!/usr/bin/env python3
"""The saved Llama reference of tests/models/llama_parity_test.cc: tiny random-init
LlamaForCausalLM models built in transformers (the community reference), saved with
save_pretrained (float32 safetensors), with input ids and the logits and losses that
transformers computes for them.

    .venv/bin/python tests/reference/make_llama_reference.py tests/models/data/llama

writes, under the output directory:
  untied/  config.json, model.safetensors, reference.safetensors
  tied/    the same for a tied-embedding model (tie_word_embeddings, no lm_head)
reference.safetensors holds
  ids         int32 [B, T]      seeded random token ids
  logits      f32 [B, T, V]     transformers' logits, computed in float64 from the saved
                                f32 weights, stored in f32
  token_loss  f32 [B, T-1]      cross-entropy of ids[:, t+1] under logits[:, t] (float64)
  loss        f32 []            the model's own loss output (labels=ids), float64 run

What the models exercise: RoPE with Llama 3.1's scaling (transformers' rope_type "llama3")
where it changes the frequencies of the head: with head_dim 16 and theta 1e4 the 8
wavelengths are 6.3, 20, 63, 199, ... tokens, and an original context of 32 keeps the first
(< 32 / 4), blends the second and divides the rest by the factor; the sequence (72 tokens) is
longer than twice the original context. GQA (4 query heads on 2 kv heads), a head width
(16) that is not hidden_size / heads (8), norm epsilon 2e-5 and weights at unit scale
(transformers' N(0, 0.02) init gives near-constant logits) so every term matters.
Deterministic (seeded); keep the files small: about 200 KB in all.
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM


def config(tied, vocab, layers):
    return LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=48, head_dim=16,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        hidden_act="silu", rms_norm_eps=2e-5, max_position_embeddings=256,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=tied, dtype="float32",
    )


def randomize(model, seed):
    """Unit-scale weights: kernels N(0, 1/fan_in), norm scales 1 + N(0, 0.2), the embedding
    N(0, 1) (N(0, 1/D) when tied); rounded to f32 (what is saved is what is run)."""
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
            p.copy_(v.to(torch.float32))


def make(out_dir, tied, vocab, layers, batch, length, seed):
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config(tied, vocab, layers)).to(torch.float32).eval()
    randomize(model, seed)
    assert model.config.rope_parameters["rope_type"] == "llama3"
    model.save_pretrained(out_dir)
    ids = torch.from_numpy(np.random.default_rng(seed).integers(0, vocab, size=(batch, length)).astype(np.int64))
    model64 = model.double()
    with torch.no_grad():
        out = model64(input_ids=ids, labels=ids)
    logits = out.logits  # float64 [B, T, V]
    token_loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), ids[:, 1:].reshape(-1),
                                                   reduction="none").reshape(batch, length - 1)
    save_file({"ids": ids.to(torch.int32).contiguous(), "logits": logits.to(torch.float32).contiguous(),
               "token_loss": token_loss.to(torch.float32).contiguous(),
               "loss": out.loss.to(torch.float32).reshape(())},
              os.path.join(out_dir, "reference.safetensors"))
    with open(os.path.join(out_dir, "config.json")) as f:
        saved = json.load(f)
    files = sorted(os.listdir(out_dir))
    size = sum(os.path.getsize(os.path.join(out_dir, n)) for n in files)
    print("%s: LlamaForCausalLM %d parameters (tied %s), ids [%d, %d], loss %.6f, rope %s; %s, %d bytes"
          % (out_dir, sum(p.numel() for p in model.parameters()), tied, batch, length, out.loss.item(),
             json.dumps(saved.get("rope_parameters", saved.get("rope_scaling"))), ", ".join(files), size))


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    root = sys.argv[1]
    import transformers
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()  # "Writing model shards"
    print("transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    make(os.path.join(root, "untied"), False, vocab=64, layers=2, batch=2, length=72, seed=1)
    make(os.path.join(root, "tied"), True, vocab=64, layers=1, batch=1, length=72, seed=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
