// What the PJRT backend's tests share: run an IR module (a per-device program) on XLA's CPU
// plugin with one replica per mesh device, in a child process (malformed input can abort the
// plugin's process instead of returning an error), and run the same program on the reference
// interpreter over virtual devices, to compare the two.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/instr.h"
#include "kiln/ir/literal.h"

namespace kiln::backend::pjrt::testing {

// outputs[d] = device d's results (a tuple root gives one literal per element).
using Outputs = std::vector<std::vector<ir::Literal>>;

// An entry computation @main of `params` then `body` (IR lines, each ending in a newline).
std::string module_text(std::string_view params, std::string_view body);
// `text` parsed, or null with a gtest failure naming the parse error and the text.
std::unique_ptr<ir::Module> parse(const std::string& text);

// Emits `module` with `options` (its mesh sets the replica count), then, in a child process,
// loads the CPU plugin (pjrt_plugin=cpu), compiles, uploads args[d] to device d, runs and
// brings the results back. An emitter error, a compile or run error, and a child that dies by
// a signal are all errors (the last names the signal and the StableHLO file kept for it).
Result<Outputs> run_on_cpu_plugin(const ir::Module& module, const EmitOptions& options,
                                  const std::vector<std::vector<ir::Literal>>& args);
// The same from StableHLO text (driver tests and hand-written programs).
Result<Outputs> run_stablehlo_on_cpu_plugin(const std::string& stablehlo, int num_devices,
                                            const std::vector<std::vector<ir::Literal>>& args);

// The reference interpreter on every device of `mesh` (virtual devices with in-process
// collectives), args[d] for device d.
Result<Outputs> run_on_interpreter(const ir::Module& module, const config::Mesh& mesh,
                                   const std::vector<std::vector<ir::Literal>>& args);

// Random arguments for the entry's parameters (ranges[i] for parameter i where given, else
// [-2, 2] for floats and [0, 4) for integers), seeded.
std::vector<ir::Literal> random_args(const ir::Module& module, uint64_t seed,
                                     const std::vector<std::pair<double, double>>& ranges = {});

// gtest expectations: every output of every device within `relative` of the interpreter's
// (|got - want| <= relative * (1 + |want|)); NaN where the interpreter has NaN, the same
// infinity where it has one. relative < 0 picks the default for the dtype (1e-5 f32, 1e-2
// bf16, 1e-12 f64, exact for integers and pred).
void expect_close(const Outputs& want, const Outputs& got, const std::string& what, double relative = -1);

}  // namespace kiln::backend::pjrt::testing
