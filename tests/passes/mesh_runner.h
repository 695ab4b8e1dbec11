// Runs one IR module on every device of a mesh of virtual devices, interpreted or compiled,
// each device with its own random inputs, and compares the devices' outputs of two such runs
// bit for bit: the check the collective passes (async pairs, token exchanges, combiners)
// share, "the rewritten program gives the original's results on every device".
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/config/mesh.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes::testing {

// Outputs[d] = device d's results.
using Outputs = std::vector<std::vector<ir::Literal>>;

struct MeshRun {
  bool compiled = false;
  backend::CompileOptions options;  // when compiled (set cache_dir)
  uint64_t seed = 70;               // device d's inputs: random_inputs(module, seed + d)
  int runs = 1;                     // compiled: runs of each executable (a second reuses its arena); the last counts
  backend::CompileReport* report = nullptr;  // compiled: device 0's report
};

inline Outputs run_on_mesh(const config::Mesh& mesh, const ir::Module& module, const MeshRun& how) {
  const int64_t n = mesh.num_devices();
  runtime::LocalWorld world(n);
  std::vector<std::unique_ptr<backend::Executable>> exes(n);
  for (int64_t d = 0; how.compiled && d < n; ++d) {
    auto made = backend::compile_cpu(module, how.options);
    KILN_CHECK_OK(made);
    exes[d] = std::move(*made);
  }
  if (how.compiled && how.report != nullptr) *how.report = exes[0]->report();
  Outputs out(n);
  Status s = runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::vector<ir::Literal> args = random_inputs(module, how.seed + static_cast<uint64_t>(d));
    if (!how.compiled) {
      KILN_ASSIGN_OR_RETURN(out[d], interp::run(module, args));
      return ok_status();
    }
    std::vector<backend::Buffer> inputs;
    for (const ir::Literal& a : args) inputs.push_back(backend::Buffer::from_literal(a));
    for (int run = 0; run < how.runs; ++run) {
      KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> got, exes[d]->run(inputs));
      out[d].clear();
      for (const backend::Buffer& b : got) out[d].push_back(b.to_literal());
    }
    return ok_status();
  });
  KILN_CHECK_OK(s);
  return out;
}

// Every device's every output bit-equal; `want_name`/`got_name` label the two in messages.
inline void expect_identical(const Outputs& want, const Outputs& got, const std::string& what,
                             const char* want_name = "want", const char* got_name = "got") {
  ASSERT_EQ(want.size(), got.size());
  for (size_t d = 0; d < want.size(); ++d) {
    ASSERT_EQ(want[d].size(), got[d].size());
    for (size_t i = 0; i < want[d].size(); ++i) {
      EXPECT_TRUE(want[d][i] == got[d][i]) << what << ": device " << d << " output " << i << "\n  " << want_name
                                           << ": " << want[d][i].to_string() << "\n  " << got_name << ": "
                                           << got[d][i].to_string();
    }
  }
}

// check_pass's contract for a pass whose rewrite sums in another order or dtype: `pass`
// changes `input` into `expected` (printed), which verifies and reads back as printed, runs
// again without a change, and gives every device of `mesh` the original's outputs within
// `tolerance` relative (interpreted, each device with its own random inputs).
inline void check_pass_on_mesh(Pass& pass, std::string_view input, std::string_view expected, const config::Mesh& mesh,
                               double tolerance) {
  std::unique_ptr<ir::Module> module = parse_or_die(input);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> original = module->clone();
  auto changed = pass.run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_TRUE(*changed) << pass.name() << " did not change the module";
  const std::string printed = ir::print_module(*module);
  EXPECT_EQ(printed, expected);
  Status s = ops::verify(*module);
  ASSERT_TRUE(s.ok()) << s.to_string() << "\n" << printed;
  std::unique_ptr<ir::Module> reparsed = parse_or_die(printed);
  ASSERT_NE(reparsed, nullptr);
  EXPECT_EQ(ir::print_module(*reparsed), printed);
  const Outputs want = run_on_mesh(mesh, *original, MeshRun{}), got = run_on_mesh(mesh, *module, MeshRun{});
  ASSERT_EQ(want.size(), got.size());
  for (size_t d = 0; d < want.size(); ++d) {
    ASSERT_EQ(want[d].size(), got[d].size());
    for (size_t o = 0; o < want[d].size(); ++o) {
      const auto& w = want[d][o].values();
      const auto& g = got[d][o].values();
      ASSERT_EQ(w.size(), g.size());
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_NEAR(w[i], g[i], tolerance * (1.0 + std::abs(w[i]))) << "device " << d << " output " << o << " " << i;
      }
    }
  }
  auto again = pass.run(*module);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(*again) << pass.name() << " changed its own output:\n" << ir::print_module(*module);
}

}  // namespace kiln::passes::testing
