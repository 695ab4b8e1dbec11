#!/usr/bin/env python3
"""Independent PyTorch implementation of GPT-OSS (the published architecture, written from
the spec in the Hugging Face / OpenAI style), for parity tests of Kiln's model.

It loads weights in the Hugging Face GPT-OSS layout from a safetensors file:
  model.embed_tokens.weight [V, D]
  model.layers.N.input_layernorm.weight [D], model.layers.N.post_attention_layernorm.weight [D]
  model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias}  (q: [H*Dh, D], o: [D, H*Dh])
  model.layers.N.self_attn.sinks [H]
  model.layers.N.mlp.router.{weight [E, D], bias [E]}
  model.layers.N.mlp.experts.gate_up_proj [E, D, 2I] (gate in the even columns, up in the odd)
  model.layers.N.mlp.experts.gate_up_proj_bias [E, 2I]
  model.layers.N.mlp.experts.down_proj [E, I, D], down_proj_bias [E, D]
  model.norm.weight [D], lm_head.weight [V, D]
and a config.json with the hub's keys (hidden_size, num_attention_heads, num_key_value_heads,
head_dim, num_local_experts, num_experts_per_tok, intermediate_size, vocab_size,
rms_norm_eps, rope_theta, rope_scaling {factor, beta_fast, beta_slow,
original_max_position_embeddings, truncate}, sliding_window, layer_types, swiglu_limit)
plus two MaxText loss weights: load_balance_loss_weight and z_loss_multiplier.

The batch file holds int32 [B, T] tensors inputs, targets, positions, segmentation
(segment 0 = padding: no loss; positions restart at 0 in every packed document; no
attention across segments). The output file gets logits [B, T, V], loss, xent_sum,
total_weights, moe_lb_loss, z_loss (scalars) and grad.<name> for every weight.

Usage: gpt_oss_ref.py CONFIG.json WEIGHTS.safetensors BATCH.safetensors OUT.safetensors [float64|float32]

safetensors is read and written by hand (Debian has no package for it): an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
raw little-endian data.
"""
import json
import math
import struct
import sys

import numpy as np
import torch

_NP = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=np.dtype(_NP[info["dtype"]]).newbyteorder("<"))
        out[name] = torch.from_numpy(array.reshape(info["shape"]).copy())
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        array = tensors[name].detach().cpu().numpy().astype("<f4")
        raw = array.tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


# --- the model ------------------------------------------------------------------------------


def yarn_inv_freq(cfg):
    """Inverse frequencies and the cos/sin scale of YaRN (HF _compute_yarn_parameters)."""
    base = cfg["rope_theta"]
    dim = cfg["head_dim"]
    rs = cfg.get("rope_scaling") or {}
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    if rs.get("rope_type", "yarn") != "yarn":
        return 1.0 / pos_freqs, 1.0
    factor = rs["factor"]
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (factor * pos_freqs)

    def correction_dim(rotations):
        return (dim * math.log(rs["original_max_position_embeddings"] / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(rs["beta_fast"]), correction_dim(rs["beta_slow"])
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, attention_factor


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def rotate(x, cos, sin):
    # Half-split ("non-interleaved") rotation: x = [a, b] -> [a cos - b sin, b cos + a sin].
    a, b = torch.chunk(x, 2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


def attention(cfg, w, prefix, x, cos, sin, mask):
    bsz, t, _ = x.shape
    h, kv, dh = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    q = (x @ w[prefix + "q_proj.weight"].T + w[prefix + "q_proj.bias"]).view(bsz, t, h, dh).transpose(1, 2)
    k = (x @ w[prefix + "k_proj.weight"].T + w[prefix + "k_proj.bias"]).view(bsz, t, kv, dh).transpose(1, 2)
    v = (x @ w[prefix + "v_proj.weight"].T + w[prefix + "v_proj.bias"]).view(bsz, t, kv, dh).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # [B, heads, T, Dh]
    # GQA: query head j reads kv head j // (h // kv).
    k = k.repeat_interleave(h // kv, dim=1)
    v = v.repeat_interleave(h // kv, dim=1)
    scores = (q @ k.transpose(-1, -2)) * dh ** -0.5  # [B, H, T, T]
    scores = scores.masked_fill(~mask[:, None, :, :], float("-inf"))
    # The sink: one more logit column per head, dropped after the softmax.
    sinks = w[prefix + "sinks"].view(1, h, 1, 1).expand(bsz, h, t, 1)
    combined = torch.cat([scores, sinks], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1)[..., :-1]
    out = (probs @ v).transpose(1, 2).reshape(bsz, t, h * dh)
    return out @ w[prefix + "o_proj.weight"].T + w[prefix + "o_proj.bias"]


def moe(cfg, w, prefix, x):
    """Returns the MoE output and the layer's MaxText load-balance loss (unweighted)."""
    bsz, t, d = x.shape
    e, k, limit, alpha = cfg["num_local_experts"], cfg["num_experts_per_tok"], cfg["swiglu_limit"], 1.702
    tokens = x.reshape(-1, d)
    router_logits = tokens @ w[prefix + "router.weight"].T + w[prefix + "router.bias"]  # [N, E]
    top_values, top_index = torch.topk(router_logits, k, dim=-1, sorted=True)
    top_weights = torch.softmax(top_values, dim=-1)  # softmax over the k picked logits
    out = torch.zeros_like(tokens)
    gate_up = w[prefix + "experts.gate_up_proj"]
    gate_up_bias = w[prefix + "experts.gate_up_proj_bias"]
    down, down_bias = w[prefix + "experts.down_proj"], w[prefix + "experts.down_proj_bias"]
    for n in range(tokens.shape[0]):
        for slot in range(k):
            ex = int(top_index[n, slot])
            hidden = tokens[n] @ gate_up[ex] + gate_up_bias[ex]  # [2I]
            gate, up = hidden[0::2], hidden[1::2]
            gate = gate.clamp(max=limit)
            up = up.clamp(min=-limit, max=limit)
            glu = gate * torch.sigmoid(gate * alpha)
            y = ((up + 1) * glu) @ down[ex] + down_bias[ex]
            out = out.index_add(0, torch.tensor([n]), (top_weights[n, slot] * y)[None])
    # MaxText load_balance_loss: per sequence, density = fraction of token choices per
    # expert, prob = mean softmax probability; mean(density * prob) * E^2.
    probs = torch.softmax(router_logits, dim=-1).view(bsz, t, e)
    chosen = torch.nn.functional.one_hot(top_index, e).sum(dim=1).view(bsz, t, e).to(x.dtype)
    lb = (chosen.mean(dim=1) * probs.mean(dim=1)).mean() * e * e
    return out.view(bsz, t, d), lb


def forward(cfg, w, batch):
    inputs, positions, seg = batch["inputs"].long(), batch["positions"], batch["segmentation"]
    bsz, t = inputs.shape
    eps = cfg["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][inputs]

    inv_freq, scale = yarn_inv_freq(cfg)
    angles = positions.to(torch.float64)[..., None] * inv_freq  # [B, T, Dh/2]
    cos = (torch.cos(angles) * scale).to(x.dtype)[:, None]  # [B, 1, T, Dh/2]
    sin = (torch.sin(angles) * scale).to(x.dtype)[:, None]

    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    same_segment = seg[:, :, None] == seg[:, None, :]
    causal = (j <= i)[None] & same_segment
    window = cfg["sliding_window"]
    sliding = causal & (j > i - window)[None]

    lb_losses = []
    for layer, kind in enumerate(cfg["layer_types"]):
        p = "model.layers.%d." % layer
        mask = sliding if kind == "sliding_attention" else causal
        x = x + attention(cfg, w, p + "self_attn.", rms_norm(x, w[p + "input_layernorm.weight"], eps), cos, sin, mask)
        m, lb = moe(cfg, w, p + "mlp.", rms_norm(x, w[p + "post_attention_layernorm.weight"], eps))
        x = x + m
        lb_losses.append(lb)
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].T, lb_losses


def losses(cfg, logits, lb_losses, batch):
    weights = (batch["segmentation"] != 0).to(logits.dtype)
    log_z = torch.logsumexp(logits, dim=-1)
    target_logit = logits.gather(-1, batch["targets"].long()[..., None])[..., 0]
    xent_sum = ((log_z - target_logit) * weights).sum()
    total_weights = weights.sum()
    z_loss = cfg.get("z_loss_multiplier", 0.0) * (log_z.pow(2) * weights).sum() / total_weights
    moe_lb = cfg.get("load_balance_loss_weight", 0.0) * torch.stack(lb_losses).mean()
    loss = xent_sum / total_weights + z_loss + moe_lb
    return {"loss": loss, "xent_sum": xent_sum, "total_weights": total_weights, "z_loss": z_loss,
            "moe_lb_loss": moe_lb}


def main():
    config_path, weights_path, batch_path, out_path = sys.argv[1:5]
    dtype = torch.float64 if len(sys.argv) < 6 or sys.argv[5] == "float64" else torch.float32
    cfg = json.load(open(config_path))
    weights = {n: v.to(dtype).requires_grad_() for n, v in read_safetensors(weights_path).items()}
    batch = read_safetensors(batch_path)
    logits, lb_losses = forward(cfg, weights, batch)
    results = losses(cfg, logits, lb_losses, batch)
    results["loss"].backward()
    out = {"logits": logits}
    out.update(results)
    for name, value in weights.items():
        out["grad." + name] = value.grad if value.grad is not None else torch.zeros_like(value)
    write_safetensors(out_path, out)


if __name__ == "__main__":
    main()
