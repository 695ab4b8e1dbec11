#!/usr/bin/env python3
"""Independent PyTorch reference for Kiln's fused attention op (GPT-OSS attention).

Reads a JSON file written by tests/ops/attention_ops_test.cc: the inputs (q [B,T,H,Dh],
k and v [B,S,K,Dh], optional sinks [H] and segment ids), the attributes (scale, causal,
window) and dout, plus what Kiln's CPU kernels computed (out, lse, dq, dk, dv, dsinks).
Computes the same in float64 the way the GPT-OSS reference implementations do (repeat the kv
heads for GQA, mask with -inf, append the sink as one more logit column, softmax, drop
that column) and the gradients of sum(out * dout) by autograd, then compares.

Usage: attention_ref.py case.json...   exit 0 when every tensor of every case matches, 1 otherwise.
"""
import json
import sys

import torch


def reference(c):
    t64 = lambda name: torch.tensor(c[name], dtype=torch.float64).reshape(c["shape_" + name])
    q, k, v, dout = t64("q"), t64("k"), t64("v"), t64("dout")
    B, T, H, Dh = q.shape
    S, K = k.shape[1], k.shape[2]
    G = H // K
    sinks = t64("sinks") if "sinks" in c else None
    for x in (q, k, v) + ((sinks,) if sinks is not None else ()):
        x.requires_grad_(True)
    # GQA: query head h reads kv head h // G.
    kx = k.repeat_interleave(G, dim=2)
    vx = v.repeat_interleave(G, dim=2)
    logits = torch.einsum("bthd,bshd->bhts", q, kx) * c["scale"]
    i = torch.arange(T)[:, None]
    j = torch.arange(S)[None, :]
    allowed = torch.ones(T, S, dtype=torch.bool)
    if c["causal"]:
        allowed &= j <= i
    if c["window"] > 0:
        allowed &= j > i - c["window"]  # `window` keys including self
    allowed = allowed[None].expand(B, T, S)
    if "q_segment" in c:
        qs = torch.tensor(c["q_segment"]).reshape(B, T)
        ks = torch.tensor(c["kv_segment"]).reshape(B, S)
        allowed = allowed & (qs[:, :, None] == ks[:, None, :])
    logits = logits.masked_fill(~allowed[:, None], float("-inf"))
    if sinks is not None:
        logits = torch.cat([logits, sinks.reshape(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
    lse = torch.logsumexp(logits, dim=-1)  # [B, H, T]
    probs = torch.softmax(logits, dim=-1)[..., :S]
    out = torch.einsum("bhts,bshd->bthd", probs, vx)
    (out * dout).sum().backward()
    got = {"out": out, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    if sinks is not None:
        got["dsinks"] = sinks.grad
    return got


def check(path):
    with open(path) as f:
        c = json.load(f)
    want = reference(c)
    ok = True
    for name, w in want.items():
        g = torch.tensor(c["kiln_" + name], dtype=torch.float64).reshape(w.shape)
        w = w.detach()
        scale = w.abs().max().item()
        err = (g - w).abs().max().item()
        # Kiln computes in float32 with float32 statistics: 1e-4 of the largest entry.
        tol = 1e-4 * max(scale, 1e-3)
        status = "ok" if err <= tol else "MISMATCH"
        ok = ok and err <= tol
        print(f"{c['name']}: {name:6s} max |kiln - torch| = {err:.3e} (largest entry {scale:.3e}) {status}")
    return ok


def main():
    results = [check(path) for path in sys.argv[1:]]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
