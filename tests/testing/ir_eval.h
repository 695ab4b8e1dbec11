// Helpers for op tests written as IR text: run a module through the verifier and the
// reference interpreter, or get the verifier's message for a module that must not verify.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/registry.h"

namespace kiln::testing {

// Parses, verifies and runs a module; returns all its outputs (empty on failure, which has
// already been reported).
inline std::vector<ir::Literal> run_module_outputs(const std::string& text, const std::vector<ir::Literal>& args) {
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string() << "\n" << text;
  if (!m.ok()) return {};
  Status v = ops::verify(**m);
  EXPECT_TRUE(v.ok()) << v.to_string();
  auto r = interp::run(**m, args);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) return {};
  return *r;
}

// The same for a module with one (array) result.
inline ir::Literal run_module(const std::string& text, const std::vector<ir::Literal>& args) {
  std::vector<ir::Literal> out = run_module_outputs(text, args);
  return out.empty() ? ir::Literal() : out[0];
}

// The verifier's message for a module that must not verify.
inline std::string verify_error(const std::string& text) {
  auto m = ir::parse_module(text);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return "";
  Status v = ops::verify(**m);
  EXPECT_FALSE(v.ok()) << "verified but should not:\n" << text;
  return v.message();
}

}  // namespace kiln::testing
