"""Independent reference for Kiln's DeepSeek-V3 multi-token prediction (deepseek_mtp_test.cc).

transformers' DeepseekV3ForCausalLM has no MTP module, so this script writes DeepSeek-V3's
(§2.2) around it in plain PyTorch: with h0 the last decoder layer's output (before the final
norm), module k = 1 computes
    h1 = block(eh_proj(cat(enorm(embed(token i+1)), hnorm(h0))))      block: a MoE decoder layer
    logits1 = lm_head(norm(h1))                                        the shared norm and head
and its loss is the mean cross-entropy against target i+1 over the positions i whose i+1 is
inside the sequence (token 0 elsewhere, as MaxText). The objective is
    mean main cross-entropy + mtp_loss_scaling_factor * MTP loss.
Writes into OUT_DIR: config.json (num_nextn_predict_layers 1), model.safetensors (per-expert
tensors as save_pretrained writes them; the MTP module as model.layers.L.{enorm, hnorm,
eh_proj, ...}), reference.safetensors (input_ids, targets [B, T] I32, loss [], and grad.<name>
for every tensor but the correction biases, which take no gradient).

  HF_HUB_OFFLINE=1 .venv/bin/python tests/reference/deepseek_mtp_ref.py OUT_DIR
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer, DeepseekV3RMSNorm

SCALE = 0.1
B, T = 2, 10


def per_expert(state):
    """Fused experts (gate_up_proj [E, 2I, D], down_proj [E, D, I]) as save_pretrained writes them."""
    out = {}
    for name, t in state.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            base, i = name[: -len("gate_up_proj")], t.shape[1] // 2
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :i]
                out[f"{base}{e}.up_proj.weight"] = t[e, i:]
        elif name.endswith("mlp.experts.down_proj"):
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            out[name] = t
    return out


def main(out_dir):
    torch.manual_seed(0)
    config = DeepseekV3Config(
        vocab_size=48, hidden_size=32, intermediate_size=40, moe_intermediate_size=8, num_hidden_layers=2,
        first_k_dense_replace=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16, kv_lora_rank=8,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=8, num_experts_per_tok=2, n_group=4,
        topk_group=2, n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=2.5, rms_norm_eps=1e-6,
        max_position_embeddings=64, rope_interleave=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        initializer_range=0.2, num_mtp_layers=1, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    model = DeepseekV3ForCausalLM(config).float()
    L, D = config.num_hidden_layers, config.hidden_size
    enorm, hnorm = DeepseekV3RMSNorm(D, eps=1e-6), DeepseekV3RMSNorm(D, eps=1e-6)
    eh_proj = torch.nn.Linear(2 * D, D, bias=False)
    block = DeepseekV3DecoderLayer(config, layer_idx=L)  # a MoE layer (L >= first_k_dense_replace)
    torch.nn.init.normal_(eh_proj.weight, std=0.2)
    with torch.no_grad():
        for name, p in block.named_parameters():
            p.normal_(0.0, 0.2) if p.dim() > 1 else p.copy_(1.0 + 0.1 * torch.randn_like(p))
        for norm in (enorm, hnorm):
            norm.weight.copy_(1.0 + 0.1 * torch.randn_like(norm.weight))
        for layer in list(model.model.layers[config.first_k_dense_replace:]) + [block]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.randn(config.n_routed_experts) * 0.3)

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (B, T + 1), generator=g)
    inputs, targets = ids[:, :T], ids[:, 1:]
    causal = torch.full((T, T), float("-inf")).triu(1)[None, None]
    positions = torch.arange(T)[None]

    def decoder(layer, x, cos_sin):
        return layer(x, attention_mask=causal, position_embeddings=cos_sin, position_ids=positions)

    x = model.model.embed_tokens(inputs)
    cos_sin = model.model.rotary_emb(x, positions)
    for layer in model.model.layers:
        x = decoder(layer, x, cos_sin)
    xent = torch.nn.functional.cross_entropy
    logits = model.lm_head(model.model.norm(x))
    main_loss = xent(logits.reshape(-1, config.vocab_size), targets.reshape(-1))

    valid = (torch.arange(T) < T - 1)[None].expand(B, T)  # position i + 1 inside the sequence
    zero = torch.zeros(B, 1, dtype=inputs.dtype)
    next_tokens = torch.where(valid, torch.cat([inputs[:, 1:], zero], 1), 0)
    next_targets = torch.where(valid, torch.cat([targets[:, 1:], zero], 1), 0)
    h = eh_proj(torch.cat([enorm(model.model.embed_tokens(next_tokens)), hnorm(x)], -1))
    h = decoder(block, h, cos_sin)
    mtp_logits = model.lm_head(model.model.norm(h))
    mtp_loss = xent(mtp_logits[valid], next_targets[valid])
    loss = main_loss + SCALE * mtp_loss
    loss.backward()

    params = dict(model.named_parameters())
    mtp = {f"model.layers.{L}.enorm.weight": enorm.weight, f"model.layers.{L}.hnorm.weight": hnorm.weight,
           f"model.layers.{L}.eh_proj.weight": eh_proj.weight}
    mtp.update({f"model.layers.{L}.{n}": p for n, p in block.named_parameters()})
    params.update(mtp)
    biases = {f"model.layers.{l}.mlp.gate.e_score_correction_bias": model.model.layers[l].mlp.gate.e_score_correction_bias
              for l in range(config.first_k_dense_replace, L)}
    biases[f"model.layers.{L}.mlp.gate.e_score_correction_bias"] = block.mlp.gate.e_score_correction_bias
    weights = per_expert({n: p.detach() for n, p in params.items()})
    weights.update({n: b.detach() for n, b in biases.items()})
    grads = per_expert({n: p.grad for n, p in params.items()})

    os.makedirs(out_dir, exist_ok=True)
    save_file({n: t.contiguous() for n, t in weights.items()}, os.path.join(out_dir, "model.safetensors"))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        cfg = config.to_dict()
        cfg["num_nextn_predict_layers"] = 1
        json.dump(cfg, f, indent=1, default=str)
    ref = {"input_ids": inputs.to(torch.int32), "targets": targets.to(torch.int32), "loss": loss.detach().reshape(()),
           "mtp_loss": mtp_loss.detach().reshape(())}
    ref.update({f"grad.{n}": t.contiguous() for n, t in grads.items()})
    save_file(ref, os.path.join(out_dir, "reference.safetensors"))
    print(f"loss {loss.item():.6f} (main {main_loss.item():.6f}, mtp {mtp_loss.item():.6f})")


if __name__ == "__main__":
    main(sys.argv[1])
