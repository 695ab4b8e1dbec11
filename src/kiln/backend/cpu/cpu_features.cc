#include "kiln/backend/cpu/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "kiln/base/check.h"

namespace kiln::backend::cpu {

namespace {

// Linux's arch_prctl codes for dynamically enabled state (asm/prctl.h) and the tile data
// component's number in XCR0.
constexpr int kArchGetXcompPerm = 0x1022;
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileData = 18;

uint64_t xcr0() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;  // no OSXSAVE
  uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Whether the CPU has AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX bits 24 and 22).
bool cpu_has_amx() {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (edx & (1u << 24)) && (edx & (1u << 22));
}

// Asks the kernel for the tile data state. The permission belongs to the process (every
// thread, present and future, may then use the tiles), so asking once is enough; "" when
// granted, else why not.
std::string request_tile_permission() {
  const uint64_t x = xcr0();
  if (!(x & (1ull << 17)) || !(x & (1ull << kXfeatureXtileData))) {
    return "the OS does not enable the AMX tile state (XCR0 bits 17-18 clear: a kernel before Linux 5.16)";
  }
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) {
    return fmt::format("the kernel refused the AMX tile state: arch_prctl(ARCH_REQ_XCOMP_PERM) failed: {}",
                       std::strerror(errno));
  }
  unsigned long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !(granted & (1ul << kXfeatureXtileData))) {
    return "the kernel did not grant the AMX tile state (ARCH_GET_XCOMP_PERM lacks XTILEDATA)";
  }
  return "";
}

}  // namespace

std::string CpuFeatures::isa() const {
  std::string s = "avx2+fma";
  if (avx512f) s += "+avx512f";
  if (avx512_bf16) s += "+avx512bf16";
  if (amx_bf16) s += "+amx-bf16";
  return s;
}

CpuFeatures detect_cpu_features(const std::string& cap, std::string* error) {
  CpuFeatures f;
  f.cap = cap;
  if (!cap.empty() && cap != "avx2" && cap != "avx512" && cap != "amx") {
    if (error) *error = fmt::format("KILN_CPU_ISA={} is not a unit cap; accepted: avx2, avx512, amx (or unset)", cap);
    return f;
  }
  __builtin_cpu_init();
  const bool allow_512 = cap != "avx2";
  const bool allow_amx = cap.empty() || cap == "amx";
  f.avx512f = allow_512 && __builtin_cpu_supports("avx512f");
  f.avx512_bf16 = f.avx512f && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
  if (!cpu_has_amx()) {
    f.amx_note = "this CPU has no AMX tile units";
  } else if (!allow_amx) {
    f.amx_note = fmt::format("AMX not used: KILN_CPU_ISA={}", cap);
  } else if (!f.avx512f) {
    f.amx_note = "AMX not used: the AVX-512 state it needs is not enabled";
  } else {
    f.amx_note = request_tile_permission();
    f.amx_bf16 = f.amx_note.empty();
  }
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    const char* env = std::getenv("KILN_CPU_ISA");
    std::string error;
    CpuFeatures f = detect_cpu_features(env ? env : "", &error);
    KILN_CHECK(error.empty()) << error;
    return f;
  }();
  return features;
}

}  // namespace kiln::backend::cpu
