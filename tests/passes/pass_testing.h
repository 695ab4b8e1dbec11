// Pass tests are IR text in, IR text out: parse a module, run a pass, compare the printed
// result with the expected text, check that the result verifies and round-trips through the
// parser, and check with the interpreter that it computes the same outputs as the input on
// seeded random inputs (bit for bit: every rewrite here is exact on such inputs).
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"
#include "kiln/passes/pass.h"
#include "tests/testing/random_literals.h"

namespace kiln::passes::testing {

inline std::unique_ptr<ir::Module> parse_or_die(std::string_view text) {
  auto module = ir::parse_module(text);
  EXPECT_TRUE(module.ok()) << module.status().to_string() << "\n" << text;
  if (!module.ok()) return nullptr;
  Status s = ops::verify(**module);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return std::move(module).value();
}

// Floats in [-2, 2), integers in [0, 4): never all zeros or ones.
inline std::vector<ir::Literal> random_inputs(const ir::Module& module, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ir::Literal> args;
  const ir::Computation& entry = *module.entry();
  for (int i = 0; i < entry.num_params(); ++i) {
    const ir::Shape& s = entry.param(i)->shape();
    bool fp = ir::is_floating(s.dtype());
    args.push_back(kiln::testing::random_literal(s, rng, fp ? -2.0 : 0.0, fp ? 2.0 : 4.0));
  }
  return args;
}

// The interpreter gives identical outputs for `before` and `after` on three input draws.
inline void expect_same_outputs(const ir::Module& before, const ir::Module& after) {
  for (uint64_t seed : {1, 2, 3}) {
    std::vector<ir::Literal> args = random_inputs(before, seed);
    auto want = interp::run(before, args);
    auto got = interp::run(after, args);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(want->size(), got->size());
    for (size_t i = 0; i < want->size(); ++i) {
      EXPECT_TRUE((*want)[i] == (*got)[i]) << "output " << i << " differs after the pass\n  before: "
                                           << (*want)[i].to_string() << "\n  after:  " << (*got)[i].to_string();
    }
  }
}

// Runs `pass` on `input` and checks the whole contract. `expected` is the printed module
// after the pass; for a case that must not change, pass the input itself.
inline void check_pass(Pass& pass, std::string_view input, std::string_view expected, bool expect_changed) {
  std::unique_ptr<ir::Module> module = parse_or_die(input);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> original = module->clone();
  auto changed = pass.run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_EQ(*changed, expect_changed) << pass.name() << " " << (*changed ? "changed" : "did not change")
                                      << " the module:\n" << ir::print_module(*module);
  std::string printed = ir::print_module(*module);
  EXPECT_EQ(printed, expected);
  Status s = ops::verify(*module);
  ASSERT_TRUE(s.ok()) << s.to_string() << "\n" << printed;
  // Text round trip of the result.
  auto reparsed = ir::parse_module(printed);
  ASSERT_TRUE(reparsed.ok()) << reparsed.status().to_string() << "\n" << printed;
  EXPECT_EQ(ir::print_module(**reparsed), printed);
  expect_same_outputs(*original, *module);
  // A second run finds nothing left to do (the pass reaches its own fixed point).
  auto again = pass.run(*module);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE(*again) << pass.name() << " changed its own output:\n" << ir::print_module(*module);
}

}  // namespace kiln::passes::testing
