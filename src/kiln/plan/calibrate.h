// `kiln plan --calibrate`: measures this machine and writes the CPU target (target.h) for
// the threads one device of the config's mesh gets.
//
//   peaks            f32 FMA and bf16 dot-product peaks on those threads (train/observability/peaks.h)
//   memory bandwidth a triad over arrays far larger than the caches, every local device at
//                    once (each device's share is what a kernel of that device sees)
//   intra link       all-gathers between the local virtual devices over a range of sizes:
//                    latency and bandwidth fitted to the ring model of cost_model.h
//   kernel classes   the config's own step, f32 and bf16, run for a few steps with every
//                    instruction of device 0 timed: per class, fixed_us and efficiency fitted
//                    by least squares to time = fixed + roofline work / efficiency
//   host overhead    the steps' wall time not inside any instruction, per instruction
//   inter link       all-gathers between MPI ranks (one device each), measured by a job the
//                    caller launches (CalibrateOptions::inter_link, `kiln plan --calibrate`
//                    starts `mpiexec -np 2`); without one the intra link's figures stand in
//                    and the file says so
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/config/config.h"
#include "kiln/plan/target.h"
#include "kiln/runtime/collectives.h"

namespace kiln::plan {

struct CalibrateOptions {
  int warmup_steps = 1;
  int measured_steps = 3;
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

// Least squares fit of t = fixed + x / efficiency over (x, t) pairs (seconds), with fixed >= 0
// and efficiency > 0; through the origin (fixed = 0) when the intercept comes out negative
// or the sizes x span less than 4x (one size cannot tell a fixed cost from a rate). Used by
// calibrate_cpu, exposed for its tests.
KernelRate fit_kernel_rate(const std::vector<std::pair<double, double>>& samples);

}  // namespace kiln::plan
