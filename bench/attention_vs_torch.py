#!/usr/bin/env python3
"""PyTorch's side of bench/attention_bench.cc: the same attention forward+backward (f32,
causal or window 128, sinks, 8 query heads over 1 kv head, Dh 64, B 1) as GPT-OSS's
reference implementations write it (repeat kv heads, mask, sink column, softmax, drop the
column), timed with the same median of 3 after one warm-up. Compare its medians with the
`flash ms` column of attention_bench's table (run both on the same machine state).

    /usr/bin/python3 bench/attention_vs_torch.py [T ...]     (default 1024 2048 4096; slow)
"""
import os
import sys
import time

import torch


def attention(q, k, v, sinks, window):
    B, T, H, D = q.shape
    G = H // k.shape[2]
    kx, vx = k.repeat_interleave(G, dim=2), v.repeat_interleave(G, dim=2)
    logits = torch.einsum("bthd,bshd->bhts", q, kx) / D**0.5
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    if window:
        allowed &= j > i - window
    logits = logits.masked_fill(~allowed, float("-inf"))
    logits = torch.cat([logits, sinks.reshape(1, H, 1, 1).expand(B, H, T, 1)], dim=-1)
    probs = torch.softmax(logits, dim=-1)[..., :T]
    return torch.einsum("bhts,bshd->bthd", probs, vx)


def main():
    lengths = [int(x) for x in sys.argv[1:]] or [1024, 2048, 4096]
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())  # Kiln's OpenMP pool uses every core too
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; forward+backward medians of 3 (ms)")
    print(f"{'mask':10s} {'T':>6s} {'torch ms':>10s}")
    for window in (0, 128):
        for t in lengths:
            q = (torch.rand(1, t, 8, 64) * 4 - 2).requires_grad_()
            k = (torch.rand(1, t, 1, 64) * 4 - 2).requires_grad_()
            v = (torch.rand(1, t, 1, 64) * 4 - 2).requires_grad_()
            sinks = (torch.rand(8) * 2).requires_grad_()
            w = torch.rand(1, t, 8, 64) * 2 - 1
            times = []
            for it in range(4):
                t0 = time.perf_counter()
                (attention(q, k, v, sinks, window) * w).sum().backward()
                if it > 0:
                    times.append(time.perf_counter() - t0)
                for x in (q, k, v, sinks):
                    x.grad = None
            times.sort()
            print(f"{'window128' if window else 'causal':10s} {t:6d} {1e3 * times[1]:10.1f}")


if __name__ == "__main__":
    main()
