#!/usr/bin/env python3
"""PyTorch's per-expert loop for the MoE layer that bench/moe_bench.cc times in Kiln.

Same layer and shapes (B=2, T=512, D=512, expert width 512; router with bias, top-k on the
logits, softmax over the k picked, clamped SwiGLU experts with biases, weighted sum),
forward + backward of sum(out * r) with respect to the input and every parameter, f32,
2 threads. For each expert: index the tokens that picked it, run its three matmuls, scale
by the routing weights and index_add the result back (the usual eager MoE loop). Prints
the median milliseconds per experts/top-k; compare with the "sparse ms" column of
moe_bench, run right before or after (the machine is shared).

Usage: /usr/bin/python3 bench/moe_vs_torch.py [--iters 5] [--threads 2] [--configs 8/2,32/4]
"""
import argparse
import statistics
import time

import torch

B, T, D, I = 2, 512, 512, 512
ALPHA, LIMIT = 1.702, 7.0


def layer(x, p, k):
    n = x.shape[0]
    logits = x @ p["gate"] + p["gate_bias"]                     # [N, E]
    top, index = torch.topk(logits, k, dim=-1)                   # [N, k]
    weights = torch.softmax(top, dim=-1)
    out = torch.zeros_like(x)
    for e in range(p["wi_0"].shape[0]):
        tok, slot = torch.nonzero(index == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        h = x[tok]
        gate = h @ p["wi_0"][e] + p["wi_0_bias"][e]
        up = h @ p["wi_1"][e] + p["wi_1_bias"][e]
        gate = gate.clamp(max=LIMIT)
        up = up.clamp(-LIMIT, LIMIT)
        hidden = gate * torch.sigmoid(gate * ALPHA) * (up + 1)
        y = hidden @ p["wo"][e] + p["wo_bias"][e]
        out = out.index_add(0, tok, y * weights[tok, slot].unsqueeze(-1))
    return out


def time_config(e, k, iters):
    g = torch.Generator().manual_seed(3)
    def t(*shape, scale=0.05):
        return (torch.randn(*shape, generator=g) * scale).requires_grad_(True)
    p = {"gate": t(D, e), "gate_bias": t(e), "wi_0": t(e, D, I), "wi_1": t(e, D, I), "wi_0_bias": t(e, I),
         "wi_1_bias": t(e, I), "wo": t(e, I, D), "wo_bias": t(e, D)}
    x = t(B * T, D, scale=1.0)
    r = torch.randn(B * T, D, generator=g)
    times = []
    for i in range(iters + 1):
        start = time.perf_counter()
        loss = (layer(x, p, k) * r).sum()
        loss.backward()
        elapsed = time.perf_counter() - start
        for v in list(p.values()) + [x]:
            v.grad = None
        if i > 0:  # the first is warm-up
            times.append(elapsed)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configs", default="8/2,8/4,16/2,16/4,32/2,32/4", help="experts/top-k list")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # Which BLAS torch got matters more than the loop: Debian's torch uses the system
    # libblas, which is the reference BLAS (~1 GFLOP/s) unless OpenBLAS is installed.
    a, b = torch.randn(1024, 512), torch.randn(512, 512)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(5):
        a @ b
    rate = 5 * 2 * 1024 * 512 * 512 / (time.perf_counter() - start) * 1e-9
    print(f"torch matmul [1024,512]x[512,512]: {rate:.1f} GFLOP/s (the BLAS torch runs on)")
    print(f"PyTorch {torch.__version__} per-expert loop, MoE layer fwd+bwd (B={B}, T={T}, D={D}, expert width {I}), "
          f"{torch.get_num_threads()} threads, f32, medians:")
    print(f"{'config':<8} {'torch ms':>9}")
    for config in args.configs.split(","):
        e, k = (int(v) for v in config.split("/"))
        print(f"E{e}/k{k:<4} {1e3 * time_config(e, k, args.iters):9.1f}", flush=True)


if __name__ == "__main__":
    main()
