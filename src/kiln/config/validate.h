// Validation of a resolved config and computation of its derived values (internal to the
// config module; users get both through config::load).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"

namespace kiln::config {

// Keys whose value must be one of a fixed set ("dtype": float32, bfloat16, ...). For a list
// key (mlp_activations) the rule applies to each element.
const std::vector<std::pair<std::string, std::vector<std::string>>>& enum_keys();

// MaxText keys Kiln accepts at one value only, the one it implements: any other value is
// refused in one line saying what Kiln does instead, so no key is silently ignored.
struct SingleValueKey {
  std::string key;
  std::string value;  // as YAML writes it: "1", "true", "0.0", "float32"
  std::string why;    // what Kiln does, the reason the other values are refused
};
const std::vector<SingleValueKey>& single_value_keys();

// Keys every value of which gives the same program, with why (MaxText's kernel choices that
// Kiln's one kernel serves both ways, with the same math).
const std::vector<std::pair<std::string, std::string>>& same_program_keys();

// Checks every rule and computes Derived. The first broken rule is returned as a one-line
// message naming the key, its value and what is accepted.
Result<Derived> validate_and_derive(const Config& config, int64_t num_ranks);

}  // namespace kiln::config
