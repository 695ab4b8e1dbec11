#!/usr/bin/env python3
"""Independent PyTorch computation of the tiny pre-norm transformer block that
tests/frontend/transformer_block_test.cc traces with Kiln's frontend.

Block (x: [B, T, D]):
  h   = x + Attn(RMSNorm(x; g1))          causal multi-head attention, H heads of width Dh
  out = h + W_down(silu(RMSNorm(h) W_gate) * (RMSNorm(h) W_up))
loss = sum(out * r) for a fixed weight tensor r.

Usage: transformer_block_ref.py IN.json OUT.json. IN holds "dims" and named float arrays
(flattened row-major); OUT gets "out" and "loss" and "grad.<param>" for every parameter.
"""
import json
import sys

import torch


def rms_norm(x, g, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def block(p, x, heads, eps):
    b, t, d = x.shape
    dh = d // heads
    a_in = rms_norm(x, p["g1"], eps)
    q = (a_in @ p["wq"]).view(b, t, heads, dh).transpose(1, 2)
    k = (a_in @ p["wk"]).view(b, t, heads, dh).transpose(1, 2)
    v = (a_in @ p["wv"]).view(b, t, heads, dh).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / dh ** 0.5
    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    scores = scores.masked_fill(~causal, float("-inf"))
    attn = torch.softmax(scores, dim=-1) @ v
    h = x + attn.transpose(1, 2).reshape(b, t, d) @ p["wo"]
    m_in = rms_norm(h, p["g2"], eps)
    gate = m_in @ p["w_gate"]
    mlp = (torch.nn.functional.silu(gate) * (m_in @ p["w_up"])) @ p["w_down"]
    return h + mlp


def main():
    data = json.load(open(sys.argv[1]))
    dims = data["dims"]
    tensors = {
        name: torch.tensor(value["data"], dtype=torch.float32).view(value["shape"])
        for name, value in data["tensors"].items()
    }
    params = {k: v.requires_grad_() for k, v in tensors.items() if k not in ("x", "r")}
    out = block(params, tensors["x"], dims["heads"], dims["eps"])
    loss = (out * tensors["r"]).sum()
    loss.backward()
    result = {"out": out.detach().flatten().tolist(), "loss": loss.item()}
    for name, value in params.items():
        result["grad." + name] = value.grad.flatten().tolist()
    json.dump(result, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
