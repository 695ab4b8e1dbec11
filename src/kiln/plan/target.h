// A hardware target of `kiln plan`: what one device computes, holds and moves, from its
// vendor's published figures (configs/targets/NAME.yml, each figure with its source) or, for
// this machine's CPU, measured by `kiln plan --calibrate`.
//
// The cost model (cost_model.h) reads:
//   peak_tflops        per compute dtype (float32, bfloat16), per device
//   memory             capacity (GiB) and bandwidth (GB/s) per device
//   links              intra (within a node or slice: NVLink, ICI; on this CPU, shared
//                      memory between virtual devices) and inter (across: InfiniBand, DCN,
//                      MPI between ranks): bandwidth per direction (GB/s) and latency (us)
//   devices_per_node   how many devices share the intra link
//   kernels            per kernel class: efficiency (share of the dtype's peak for gemm,
//                      grouped_matmul and attention; of memory bandwidth for fused and other)
//                      and fixed_us, a cost every kernel of that class pays (a calibrated
//                      CPU may exceed 1 on byte classes: small kernels run from cache), with
//                      optional fixed_us_by_opcode overriding it per opcode
//   host_us_per_kernel host time between two kernels that the device does not hide
//   attention          optional (a calibrated CPU): flash attention timed by its visited
//                      tiles instead of the attention class's roofline (see AttentionModel)
//   gemm_shapes        optional (a calibrated CPU): the efficiency of each GEMM shape its
//                      calibration step timed (see GemmShapeRate)
//   collectives_overlap, collective_in_step, collective_wait
//                      optional: whether collectives hide behind compute, and how much
//                      longer they take in a step than the links say (see below)
#pragma once

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/train/observability/trace.h"

namespace kiln::plan {

struct Link {
  std::string name;
  double bandwidth_gbs = 0;  // one direction, per device
  double latency_us = 0;     // per message hop
};

struct KernelRate {
  double efficiency = 1;  // of the peak (FLOP classes) or of memory bandwidth (byte classes)
  double fixed_us = 0;    // per kernel
  // Optional, per opcode (a calibrated CPU's "other" class): that opcode's own fixed cost,
  // in place of fixed_us. The class mixes ops whose smallest kernels take 1-2 us (a
  // broadcast) to 40 us (a sort), so no one fixed cost fits them all.
  std::map<std::string, double, std::less<>> fixed_us_by_opcode;

  // Optional, per fusion signature (a calibrated CPU's "fused" class; fusion_signature in
  // cost_model.h): that kind of fused kernel's own efficiency, in place of `efficiency`. A
  // fused kernel's time goes with what its body computes, not only its bytes: the same
  // step's SwiGLU activations ran at 15 GB/s and its optimizer updates at 70, in every shape.
  std::map<std::string, double, std::less<>> efficiency_by_signature;

  double fixed_us_of(std::string_view opcode) const {
    auto it = fixed_us_by_opcode.find(opcode);
    return it != fixed_us_by_opcode.end() ? it->second : fixed_us;
  }
  double efficiency_of(std::string_view signature) const {
    auto it = efficiency_by_signature.find(signature);
    return it != efficiency_by_signature.end() ? it->second : efficiency;
  }
};

// The kernel classes a target rates: train::KernelKind without kCollective.
inline constexpr std::array<train::KernelKind, 5> kKernelClasses = {
    train::KernelKind::kGemm, train::KernelKind::kGroupedMatmul, train::KernelKind::kAttention,
    train::KernelKind::kFused, train::KernelKind::kOther};
// "gemm", "grouped_matmul", "attention", "fused", "other": the keys of a target file.
const char* kernel_class_key(train::KernelKind kind);
// Whether the class is rated against FLOPs (else against bytes moved).
bool rated_by_flops(train::KernelKind kind);

// A flash attention kernel's time by what it visits (attention_cost.h), fitted to a sweep of
// the kernels alone: per op (attention, attention_grad), q's dtype and head width,
//   seconds = in_step * (fixed_us + rows * row_ns + visited pairs * pair_ns)
// where in_step (per step dtype) is how much slower the calibration step's own attention
// kernels ran than the sweep's fit says (inputs cold in cache, the step's other threads).
// A head width the sweep did not time takes the nearest one's rate, its pair term scaled
// by the width (a pair's dot products grow with it).
struct AttentionRate {
  std::string op;  // "attention", "attention_grad"
  bool bf16 = false;
  int64_t head_dim = 0;
  double fixed_us = 0, row_ns = 0, pair_ns = 0;
};
struct AttentionModel {
  int64_t tile_q = 0, tile_k = 0;  // queries x keys per tile
  double in_step_f32 = 1, in_step_bf16 = 1;
  std::vector<AttentionRate> rates;
  bool empty() const { return rates.empty(); }
  // Seconds of a kernel of `op` with q's dtype bf16 or not, head width `head_dim`, `rows`
  // query rows and `visited` pairs, in a bf16 step or an f32 one; nullopt when no rate
  // has that op and dtype.
  std::optional<double> seconds(const std::string& op, bool bf16, int64_t head_dim, double rows, double visited,
                                bool bf16_step) const;
};

// A GEMM shape the calibration timed in its own step (optional list `gemm_shapes`): its
// efficiency (roofline / measured time, its fixed costs included). A GEMM of the same dtype
// and transposes within a factor 4 over its dimensions together (the sum of |log2| of the
// batch, m, n and k ratios <= 2) runs at the nearest one's efficiency instead of its class's:
// a CPU library's rate moves with the shape and the layout more than one fitted line says.
// The result's dtype is part of the shape where recorded (out_dtype): a bf16 product writing
// a bf16 result is another oneDNN kernel than one writing f32 (a model's layers write bf16,
// its logits and their gradients f32), and alone on 2 threads of a Zen 4 EPYC the
// 2048 x 32000 x 512 one writing bf16 ran at 0.62 of the peak.
struct GemmShapeRate {
  std::string dtype;      // "f32", "bf16" (the kernel's operands)
  std::string out_dtype;  // the result's; "" where not recorded (matches any)
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  double efficiency = 1;
  double flops() const {
    return 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
};

// GEMMs larger than every one the calibration's step ran (optional `gemm_sizes`): square
// products timed alone (calibrate.h: the GEMM size sweep), per operand and result dtype and
// layout, each its efficiency. A larger GEMM that no step shape is near runs at the
// efficiency interpolated over the sweep's products of its dtypes and layout (any layout
// when the sweep has none of its own) in log FLOPs, constant beyond the ends, divided by
// in_step: how much slower the step's own largest GEMMs ran than the sweep says for their
// size (their inputs cold in cache, the step's other devices on the shared cores). Without
// it, a class efficiency fitted on a small model's GEMMs (0.69 of the peak) predicted
// 67-GFLOP logits products that ran at 0.85.
struct GemmSizeModel {
  double in_step_f32 = 1, in_step_bf16 = 1;  // by the kernel's operand dtype
  std::vector<GemmShapeRate> products;
  bool empty() const { return products.empty(); }
  // The efficiency alone (in_step not applied); nullopt when no product has these dtypes.
  std::optional<double> alone(const std::string& dtype, const std::string& out_dtype, bool trans_a, bool trans_b,
                              double flops) const;
  double in_step(const std::string& dtype) const { return dtype == "bf16" ? in_step_bf16 : in_step_f32; }
};

struct Target {
  std::string name;         // "h100", "cpu"
  std::string description;  // one line
  std::vector<std::string> sources;
  double peak_tflops_f32 = 0, peak_tflops_bf16 = 0;
  double memory_gib = 0;
  double memory_bandwidth_gbs = 0;
  Link intra, inter;
  int64_t devices_per_node = 1;
  KernelRate kernels[static_cast<int>(train::KernelKind::kCount)];
  // Optional (kernels_bf16 in the file): the rates of a bf16 mixed-precision step's kernels
  // (dtype=bfloat16), every class, where they differ from an f32 step's (a calibrated CPU:
  // its bf16 kernels convert, and without bf16 instructions its products widen).
  bool bf16_rates = false;
  KernelRate kernels_bf16[static_cast<int>(train::KernelKind::kCount)];
  double host_us_per_kernel = 0;
  // Whether a collective's transfer runs beside the compute (optional `collectives_overlap`,
  // default true: a DMA engine or NIC moves it). Kiln's CPU runtime moves the data on the
  // device's own thread (virtual devices copy in the start and the done; MPI progresses only
  // while the device polls it), so on a calibrated CPU it is false and every collective's
  // time is on the compute stream.
  bool collectives_overlap = true;
  // How much longer a collective's transfer takes inside an f32 or a bf16 step than the link
  // figures say (optional `collective_in_step`: float32, bfloat16; default 1): on a calibrated
  // CPU's virtual devices, the contention for the shared cores and caches, fitted on the
  // calibration's steps.
  double collective_in_step_f32 = 1, collective_in_step_bf16 = 1;
  double collective_in_step(bool bf16_step) const {
    return bf16_step ? collective_in_step_bf16 : collective_in_step_f32;
  }
  // How long a device waits at a collective for the slowest device, after c seconds of
  // compute since the previous collective's issue (or the step's start):
  //   wait = collective_wait x kWaitReferenceS x (c / kWaitReferenceS)^kWaitExponent
  // (optional `collective_wait`: float32, bfloat16; default 0): the fraction of 10 ms of
  // compute it waits, a smaller fraction of longer spans. Devices that share a CPU's cores
  // drift apart between collectives (one is descheduled, or slowed by the other's memory
  // traffic), and the one ahead waits for the one behind; over long spans the slowdowns
  // partly even out: traces of 8 fsdp 2 runs (bench/plan_vs_measured.py's workloads, about
  // 1,700 spans of 2 ms to 2.7 s) gave the devices' drift growing as the span to the power
  // 0.70-1.06 per run, 0.84 on average. Dedicated accelerators in lockstep do not drift,
  // and the published targets leave it 0.
  static constexpr double kWaitReferenceS = 0.010, kWaitExponent = 0.8;
  double collective_wait_f32 = 0, collective_wait_bf16 = 0;
  double collective_wait(bool bf16_step) const { return bf16_step ? collective_wait_bf16 : collective_wait_f32; }
  // The wait above for `compute_s` seconds of compute since the previous collective, and
  // the same for collective_wait = 1 (what the calibration fits collective_wait against).
  double collective_wait_seconds(bool bf16_step, double compute_s) const {
    return collective_wait(bf16_step) * wait_basis(compute_s);
  }
  static double wait_basis(double compute_s);
  AttentionModel attention;  // empty: attention kernels by their class's rate
  std::vector<GemmShapeRate> gemm_shapes;  // empty: GEMMs by their class's rate
  GemmSizeModel gemm_sizes;                // empty: GEMMs beyond gemm_shapes by their class's rate
  std::string calibrated;  // "" for a published target; else when and on what it was measured

  double peak_tflops(bool bf16) const { return bf16 ? peak_tflops_bf16 : peak_tflops_f32; }
  const KernelRate& rate(train::KernelKind kind) const { return kernels[static_cast<int>(kind)]; }
  KernelRate& rate(train::KernelKind kind) { return kernels[static_cast<int>(kind)]; }
  // The efficiency of the calibrated GEMM shape nearest to `gemm` (a kGemm InstrInfo), as
  // GemmShapeRate says; nullopt when none is near enough.
  std::optional<double> gemm_shape_efficiency(const train::InstrInfo& gemm, const std::string& out_dtype = "") const;
  // The efficiency gemm_sizes gives `gemm` (result `out_dtype`) when it has more FLOPs than
  // every calibrated step shape of its operand dtype; nullopt otherwise.
  std::optional<double> large_gemm_efficiency(const train::InstrInfo& gemm, const std::string& out_dtype) const;
  // The rate a kernel of `kind` runs at in a bf16 step (or an f32 one).
  const KernelRate& rate(train::KernelKind kind, bool bf16_step) const {
    return bf16_step && bf16_rates ? kernels_bf16[static_cast<int>(kind)] : rate(kind);
  }
};

// A target file's text; `where` names it in errors ("configs/targets/h100.yml").
Result<Target> parse_target(const std::string& yaml_text, const std::string& where);
// The file as calibrate writes it (parse_target reads it back to the same values).
std::string target_to_yaml(const Target& target);

// Where the published targets live: <configs dir>/targets.
std::string targets_dir();
// Where `kiln plan --calibrate` writes this CPU's target: $KILN_CACHE_DIR or ~/.cache/kiln,
// under targets/cpu-<threads per device>t.yml (one per thread count a device gets).
std::string calibrated_cpu_path(int threads_per_device);
// The names `target=` accepts: "cpu" and every file in targets_dir(), sorted.
std::vector<std::string> available_targets();
// `name` is a name from available_targets() or a path to a .yml file. "cpu" reads this
// machine's calibration for `threads_per_device` threads, and says to run
// `kiln plan --calibrate` when there is none.
Result<Target> load_target(const std::string& name, int threads_per_device);

}  // namespace kiln::plan
