// The timing loop the vector peak loops share (peak_loops.cc, peak_loops_avx512.cc). Included
// only by those two files, each compiled for its own instruction set: the template lives in
// an anonymous namespace, so no instantiation compiled with AVX-512 can be picked by the
// linker for a caller on an AVX2 machine.
#pragma once

#include "kiln/backend/cpu/gemm/peak_loops.h"

namespace kiln::backend::cpu::peak_loops {
namespace {

// GFLOP per CPU-second of one thread running `step` (12 vector ops of flops_per_iter FLOPs
// together per iteration).
template <class V, class Step>
double loop_rate(V init, Step step, double flops_per_iter, double seconds) {
  // Named accumulators, not an array: an array lives on the stack and every op would go
  // through memory. Twelve independent chains fill two FMA pipes of 4-cycle latency.
  V a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init, a8 = init, a9 = init,
    a10 = init, a11 = init;
  const V b = init, c = init;
  double flops = 0;
  const double t0 = thread_cpu_seconds();
  double t = t0;
  while (t - t0 < seconds) {
    for (int i = 0; i < 100000; ++i) {
      a0 = step(a0, b, c), a1 = step(a1, b, c), a2 = step(a2, b, c), a3 = step(a3, b, c);
      a4 = step(a4, b, c), a5 = step(a5, b, c), a6 = step(a6, b, c), a7 = step(a7, b, c);
      a8 = step(a8, b, c), a9 = step(a9, b, c), a10 = step(a10, b, c), a11 = step(a11, b, c);
      asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
      asm volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    flops += 1e5 * flops_per_iter;
    t = thread_cpu_seconds();
  }
  return flops / (t - t0) / 1e9;
}

}  // namespace
}  // namespace kiln::backend::cpu::peak_loops
