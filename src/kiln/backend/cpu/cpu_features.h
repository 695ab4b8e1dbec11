// What this CPU can run, asked at run time: the arithmetic units the peak measurement and the
// kernels choose between. One binary runs on machines whose processors differ (AVX2 only,
// AVX-512 with bf16 dot products, AMX tiles), so every choice of unit is made here, not by
// the compiler's target.
//
//   fma256   AVX2 FMA, f32                  every x86-64 machine Kiln runs on
//   fma512   AVX-512F FMA, f32
//   dpbf16   AVX512_BF16 vdpbf16ps, bf16 pairs summed into f32
//   amx      AMX-BF16 tdpbf16ps on 16x16 f32 tile accumulators, where the CPU has the tile
//            units AND the kernel lets this process use their state (Linux asks for it per
//            process: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA))
//
// KILN_CPU_ISA caps what is used, so the fallbacks stay testable on a machine that has more:
//   KILN_CPU_ISA=avx2     FMA on 256-bit vectors only
//   KILN_CPU_ISA=avx512   AVX-512 (FMA, bf16 dot products), no AMX
//   KILN_CPU_ISA=amx      everything the CPU has (the default)
// A cap never enables a unit the CPU lacks. Any other value is a one-line error at the first
// question (cpu_features() aborts with it: a typo must not silently measure another peak).
#pragma once

#include <string>

namespace kiln::backend::cpu {

struct CpuFeatures {
  bool avx512f = false;      // 512-bit FMA
  bool avx512_bf16 = false;  // vdpbf16ps (with AVX512BW for the bf16 kernels' loads)
  bool amx_bf16 = false;     // AMX tiles usable: the CPU has AMX-TILE and AMX-BF16 and the OS granted the state
  std::string amx_note;      // why amx_bf16 is false on a CPU that has the units ("" otherwise)
  std::string cap;           // KILN_CPU_ISA's value, "" when unset

  // "avx2+fma", "avx2+fma+avx512f+avx512bf16+amx-bf16": the units in use, a cache key.
  std::string isa() const;
};

// Detected once per process (CPUID, XGETBV, the AMX permission request) and capped by
// KILN_CPU_ISA; thread-safe.
const CpuFeatures& cpu_features();

// The same detection with `cap` in place of the environment's (tests). Throws nothing; an
// invalid cap is reported in the returned error string and leaves the features empty.
CpuFeatures detect_cpu_features(const std::string& cap, std::string* error);

}  // namespace kiln::backend::cpu
