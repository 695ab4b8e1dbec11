"""Saved reference for Kiln's DeepSeek-V3 (tests/models/deepseek_parity_test.cc).

Builds a tiny random-init transformers DeepseekV3ForCausalLM (float32) exercising every
feature Kiln maps: MLA with a low-rank query, v_head_dim != qk head width, YaRN with
interleaved pairs and mscale == mscale_all_dim (the softmax scaled by mscale^2), one dense
layer then MoE, a shared expert, sigmoid routing with a non-zero correction bias, top-2 of 8
experts from the best 2 of 4 groups, norm_topk_prob and routed_scaling_factor. Writes
save_pretrained's files (config.json, model.safetensors with per-expert tensors) and
reference.safetensors: input_ids [B, T] (I32), logits [B, T, V], per_token_loss [B, T-1]
(the cross-entropy of token t+1 from position t).

  HF_HUB_OFFLINE=1 .venv/bin/python tests/reference/make_deepseek_reference.py tests/models/data/deepseek
"""

import os
import sys

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM


def main(out_dir):
    torch.manual_seed(0)
    config = DeepseekV3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=8,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        q_lora_rank=16,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=6,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_group=4,
        topk_group=2,
        n_shared_experts=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        rms_norm_eps=1e-6,
        max_position_embeddings=64,
        rope_interleave=True,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        initializer_range=0.2,
        num_mtp_layers=0,
        tie_word_embeddings=False,
    )
    model = DeepseekV3ForCausalLM(config).float().eval()
    with torch.no_grad():
        for layer in model.model.layers[config.first_k_dense_replace:]:
            # A correction bias that changes which experts are picked (transformers starts it at 0).
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(config.n_routed_experts) * 0.3)
        # Norm scales away from one, so a scale applied to the wrong tensor shows.
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)

    ids = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1), reduction="none"
    ).reshape(2, 11)
    save_file(
        {"input_ids": ids.to(torch.int32), "logits": logits.contiguous(), "per_token_loss": loss.contiguous()},
        os.path.join(out_dir, "reference.safetensors"),
    )
    print(f"wrote {out_dir}: logits {tuple(logits.shape)}, mean loss {loss.mean().item():.6f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/models/data/deepseek")
