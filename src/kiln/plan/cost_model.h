// Predicts one device's training step from its compiled program: every instruction of the
// executable's schedule, costed on a Target and run through a two-stream timeline (the
// device's compute stream and one collective engine), as the backend runs them.
//
// A kernel of class c (train::KernelKind: gemm, grouped matmul, attention, fused, other):
//   time = fixed_us(c) + roofline / efficiency(c), where the roofline is
//     max(FLOPs / peak(dtype), bytes / bandwidth)   gemm, grouped matmul, attention
//     bytes / bandwidth                             fused, other
// A calibrated CPU target refines three classes: GEMMs run at the efficiency of the nearest
// GEMM shape its calibration step timed (target.h GemmShapeRate), attention kernels by their
// rows and visited tiles (target.h AttentionModel), and fused kernels at the efficiency its
// calibration step measured for kernels of the same signature (fusion_signature below).
// FLOPs and bytes are the op registry's (ops::cost_of; a multiply-add counts 2); dtype is the
// first operand's (bf16 kernels run against the bf16 peak).
//
// A collective over a group of g devices moving B bytes (the gathered result of an
// all-gather, the summed operand otherwise, a ragged exchange's send buffer), ring
// algorithms. Within one node, on the intra link:
//   all_gather, reduce_scatter, all_to_all, ragged:  ring(g, B) = (g-1)/g * B / bw + (g-1) * latency
//   all_reduce:                                      2 ring(g, B)
// Across n nodes with k members on each, two levels (as NCCL and XLA multi-slice run them):
//   all_gather, reduce_scatter:  ring_intra(k, B) + ring_inter(n, B/k)
//   all_reduce:                  2 ring_intra(k, B) + 2 ring_inter(n, B/k)
//   all_to_all, ragged:          max((k-1)/g B / bw_intra, (g-k)/g B / bw_inter)
//                                + (k-1) latency_intra + (g-k) latency_inter
// One member per node, or members spread unevenly: the flat ring on the inter link.
// Every collective's time is scaled by target.collective_in_step(bf16 step), plus the wait
// for the slowest device after the compute since the previous collective's issue (or the
// step's start): target.collective_wait_seconds. An async start issues the
// collective on the engine (after the one before it); its done waits for it: that wait is
// the exposed time, the rest of the collective overlapped compute. A synchronous collective
// is all exposed, and so is every collective on a target whose collectives do not overlap
// compute (target.collectives_overlap false: the start waits for it). Host overhead:
// host_us_per_kernel before every instruction the device runs (kernels, views, async
// halves; not plumbing).
//
// MoE routing: with an expert axis of size e > 1, the grouped matmuls and ragged exchanges
// are compiled for the worst case (one device receives every row). `routing_load` is the
// share of those buffers the busiest device fills: 1/e balanced, 1 worst case. It scales
// the exchanges' bytes and the grouped matmuls' FLOPs and routed rows (the kernels stop at
// the rows their groups hold); elementwise kernels run over the whole buffer either way.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kiln/config/mesh.h"
#include "kiln/ir/instr.h"
#include "kiln/plan/target.h"
#include "kiln/train/observability/trace.h"

namespace kiln::plan {

struct ClassEstimate {
  int64_t count = 0;
  double flops = 0, bytes = 0;
  double seconds = 0;
};

struct CollectiveEstimate {
  int64_t count = 0;
  double bytes = 0;    // per device per step
  double seconds = 0;  // on the engine
  double exposed_s = 0;
  std::string link;    // the slowest link the (last) group crossed: inter when it spans nodes
};

struct StepPrediction {
  ClassEstimate classes[static_cast<int>(train::KernelKind::kCount)];  // kCollective unused
  std::map<std::string, CollectiveEstimate> collectives;  // "all_gather", "ragged_all_to_all", ...
  double compute_s = 0;     // every kernel, back to back
  double collective_s = 0;  // every collective on the engine
  double exposed_s = 0;     // compute stream waiting for collectives
  double host_s = 0;
  double step_s = 0;        // compute + exposed + host
  int64_t kernels = 0;       // kernels and synchronous collectives
  int64_t instructions = 0;  // everything the device runs (kernels, views, async halves)
  double routing_load = 0;  // as given (0: no expert axis)
  double overlapped_s() const { return collective_s - exposed_s; }
  const ClassEstimate& cls(train::KernelKind k) const { return classes[static_cast<int>(k)]; }
};

struct PredictOptions {
  // Share of the worst-case MoE buffers the busiest device fills (see above); <= 0: 1/e.
  double routing_load = 0;
  // The step is bf16 mixed precision (dtype=bfloat16): its kernels run at the target's
  // kernels_bf16 rates where it has them.
  bool bf16_step = false;
};

StepPrediction predict_step(std::span<const ir::Instr* const> schedule, const config::Mesh& mesh,
                            const Target& target, const PredictOptions& options = {});

// The kernel runs against the bf16 peak (its first operand is bf16).
bool computes_in_bf16(const ir::Instr& instr);
// The result's dtype ("f32", "bf16", ...); "" for a tuple result.
std::string result_dtype(const ir::Instr& instr);
// What a fused kernel's rate goes with on a calibrated CPU (KernelRate::efficiency_by_signature):
// its kind, the opcodes its body runs (sorted, once each) and its results' dtypes, e.g.
// "loop add,broadcast,clamp,logistic,min,mul,tuple -> bf16". Shapes are left out, so a
// layer's kernel in one model matches the same layer's in a wider or deeper one.
std::string fusion_signature(const ir::Instr& fusion);
// The instruction's class, FLOPs and bytes when it is a compute kernel; nullopt for plumbing,
// views, collectives and async halves.
std::optional<train::InstrInfo> describe_kernel(const ir::Instr& instr);

// The seconds one kernel of class `kind` takes on `target` (flops, bytes as above), and its
// roofline alone (efficiency 1, no fixed cost).
// bf16_kernel picks the peak (the kernel's own dtype), bf16_step the rate (Target::rate).
// opcode, when given, picks the class's fixed cost for that opcode (KernelRate::fixed_us_of).
double kernel_seconds(const Target& target, train::KernelKind kind, double flops, double bytes, bool bf16_kernel,
                      bool bf16_step, std::string_view opcode = {});
double roofline_seconds(const Target& target, train::KernelKind kind, double flops, double bytes, bool bf16);
// One instruction's seconds (`info` its describe_instruction, flops and bytes as predict_step
// scales them): a GEMM at the efficiency of the target's nearest calibrated GEMM shape where
// it has one near enough, an attention kernel by the target's attention model where it has
// one (attention_cost.h), a fused kernel at its signature's efficiency where the target has
// one, else kernel_seconds above.
double kernel_seconds(const Target& target, const ir::Instr& instr, const train::InstrInfo& info, double flops,
                      double bytes, bool bf16_step);

}  // namespace kiln::plan
