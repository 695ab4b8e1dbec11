// The arithmetic loops behind the measured peaks (cpu_peak.h), one per unit. Each runs on the
// calling thread for `seconds` of its own CPU time and returns GFLOP per CPU-second. The
// caller checks cpu_features() first: a loop for a unit the CPU lacks dies of SIGILL.
//
// Each loop keeps enough independent accumulators in flight to cover the unit's latency:
// 12 vector chains for the FMA and dot-product pipes, 4 tile accumulators for AMX.
// FLOPs: an FMA lane is 2, a bf16 dot-product lane (two products summed into f32) is 4, a
// tdpbf16ps on 16x32 by 32x16 bf16 tiles is 16 * 16 * 32 * 2.
#pragma once

namespace kiln::backend::cpu::peak_loops {

double fma256(double seconds);        // AVX2 FMA (peak_loops.cc)
double fma512(double seconds);        // AVX-512F FMA (peak_loops_avx512.cc)
double dpbf16(double seconds);        // AVX512_BF16 vdpbf16ps (peak_loops_avx512.cc)
double amx_dpbf16(double seconds);    // AMX tdpbf16ps; needs the tile permission (peak_loops.cc)

// CPU seconds of the calling thread.
double thread_cpu_seconds();

}  // namespace kiln::backend::cpu::peak_loops
