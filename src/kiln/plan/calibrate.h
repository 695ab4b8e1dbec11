// `kiln plan --calibrate`: measures this machine and writes the CPU target (target.h) for
// the threads one device of the config's mesh gets.
//
//   peaks            each dtype's fastest unit on those threads: f32 FMA; bf16 AMX, vdpbf16ps or FMA (cpu_peak.h)
//   memory bandwidth a triad over arrays far larger than the caches, every local device at
//                    once (each device's share is what a kernel of that device sees)
//   intra link       all-gathers between the local virtual devices over a range of sizes:
//                    latency and bandwidth fitted to the ring model of cost_model.h
//   kernel classes   the config's own step, f32 and bf16, run for a few steps with every
//                    instruction of every device timed: per class, from device 0's kernels
//                    (each at its median over the steps), fixed_us and efficiency fitted
//                    by least squares to time = fixed + roofline work / efficiency
//   GEMM shapes      the same steps' GEMMs, per shape, layout and result dtype: each its own
//                    efficiency (target.h GemmShapeRate)
//   GEMM sizes       square products alone, 512^3 to 4096^3, in each of those layouts and
//                    dtypes: each its efficiency, and how much slower the steps' largest
//                    GEMMs ran than the sweep says for their size (target.h GemmSizeModel),
//                    for GEMMs larger than any the step ran (10-20 s)
//   attention        the attention kernels alone over a sweep of head widths, lengths and
//                    windows: per op, dtype and width, a cost per query row and per visited
//                    pair (attention_cost.h), and how much slower the steps ran their own
//   host overhead    the steps' wall time not inside any instruction, per instruction
//   collectives      Kiln's CPU runtime moves a collective's data on the device's own thread
//                    (collectives_overlap false); on 2 or more virtual devices, the steps'
//                    collective time split (split_collective_time): the transfer against the
//                    link figures (target.h collective_in_step), and the devices' wait for
//                    the slowest against the compute spans before it (collective_wait)
//   inter link       all-gathers between MPI ranks (one device each), measured by a job the
//                    caller launches (CalibrateOptions::inter_link, `kiln plan --calibrate`
//                    starts `mpiexec -np 2`); without one the intra link's figures stand in
//                    and the file says so
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/plan/attention_cost.h"
#include "kiln/plan/target.h"
#include "kiln/runtime/collectives.h"

namespace kiln::plan {

struct CalibrateOptions {
  int warmup_steps = 1;
  int measured_steps = 5;
  std::function<void(const std::string&)> log;  // progress lines (may be empty)
  // Measures the link between MPI ranks (may be empty: not measured); an error is logged and
  // the intra figures stand in.
  std::function<Result<Link>()> inter_link;
};

// settings: an optional CONFIG.yml, then key=value overrides (the model and mesh to calibrate with).
Result<Target> calibrate_cpu(const std::vector<std::string>& settings, const CalibrateOptions& options = {});

// All-gathers over every device of `world` (virtual devices, or MPI ranks) for chunks of
// 4 KiB .. 32 MiB: latency per hop and bandwidth fitted to the ring model (t = (g-1) latency
// + (g-1)/g bytes / bandwidth), from the slowest of this process's devices. Every process of
// the world must call it.
Result<Link> measure_link(runtime::World& world, const std::string& name);

// One attention layer's kernels as a sweep times them: q [batch, length, heads, head_dim],
// k and v [batch, length, kv_heads, head_dim], causal, `window` keys (0: all), bf16 or f32.
struct AttentionShape {
  int64_t batch = 1, length = 256, heads = 8, kv_heads = 2, head_dim = 64, window = 0;
  bool bf16 = false;
};
struct AttentionSample {
  AttentionShape shape;
  AttentionWork work;      // rows and visited pairs on the CPU kernels' tiles
  double seconds = 0;      // device 0's best of `repeats` runs
};
// Times the attention and attention_grad kernels alone, for every shape, on `devices` local
// devices at once (each on its share of the threads, as a step's devices run them).
Result<std::vector<AttentionSample>> sweep_attention(int64_t devices, const std::vector<AttentionShape>& shapes,
                                                    int repeats = 3);

// One GEMM timed alone (calibrate_cpu's size sweep).
struct GemmSample {
  GemmShapeRate shape;  // batch 1; efficiency unset
  double seconds = 0;   // device 0's best of `repeats` runs
};
// Times each product alone, on `devices` local devices at once (each on its share of the
// threads, as a step's devices run them).
Result<std::vector<GemmSample>> time_gemms(int64_t devices, const std::vector<GemmShapeRate>& shapes, int repeats = 2);

// Non-negative least squares (relative errors) of seconds = fixed + rows * row + visited
// pairs * pair over samples of one op, dtype and head width; op, bf16 and head_dim unset.
AttentionRate fit_attention_rate(const std::vector<AttentionSample>& samples);

// One instruction a device ran in a timed step, as split_collective_time sees it.
struct TimedInstruction {
  bool collective = false;  // an async start or done, or a synchronous collective
  bool issues = false;      // a collective's start, or a synchronous collective (not a done)
  bool kernel = false;      // compute: not a collective, a view or plumbing
  double seconds = 0;
};
// A step's collective time on several devices, per step. A device that reaches a collective
// before its peers waits there for the slowest; the device that came last waited least, so
// the least time any device spent in a collective is its transfer, and the rest is waiting.
struct CollectiveSplit {
  double in_collectives_s = 0;  // the devices' mean time in collective instructions
  double transfer_s = 0;        // the sum over collectives of the least time a device spent in it
  double compute_before_s = 0;  // the devices' mean kernel time before each collective issue,
                                // counted from the step's start or the previous issue
  double wait_basis_s = 0;      // the same spans, each as Target::wait_basis weighs it, summed
};
// per_device[d]: device d's instructions over `steps` steps, in the order it ran them (every
// device runs the same program).
CollectiveSplit split_collective_time(const std::vector<std::vector<TimedInstruction>>& per_device, int steps);
// Least squares fit of t = fixed + x / efficiency over (x, t) pairs (seconds), with fixed >= 0
// and efficiency > 0; through the origin (fixed = 0) when the intercept comes out negative
// or the sizes x span less than 4x (one size cannot tell a fixed cost from a rate); fixed at
// most the median t of the tenth of the pairs with the least x (a kernel takes at least its
// fixed cost), the slope refitted when that caps it. Used by calibrate_cpu, exposed for its
// tests.
KernelRate fit_kernel_rate(const std::vector<std::pair<double, double>>& samples);
// For a class that mixes opcodes (the "other" class), opcodes[i] naming samples[i]'s: as
// fit_kernel_rate, then each opcode with at least 3 samples gets its own fixed cost, the
// least time any of its kernels took (a kernel takes at least its fixed cost), and the
// efficiency is refitted through the origin on the times less those fixed costs.
KernelRate fit_kernel_rate_by_opcode(const std::vector<std::pair<double, double>>& samples,
                                     const std::vector<std::string>& opcodes);
// For the fused class, signatures[i] naming samples[i]'s (fusion_signature): as
// fit_kernel_rate, then each signature with at least 2 samples gets its own efficiency, its
// kernels' roofline seconds over their seconds less the class's fixed cost (a ratio of sums,
// so the large kernels weigh most). Kernels of a signature the calibration did not see run
// at the class's efficiency.
KernelRate fit_kernel_rate_by_signature(const std::vector<std::pair<double, double>>& samples,
                                        const std::vector<std::string>& signatures);

}  // namespace kiln::plan
