// The tokenizer tests read OpenAI's published .tiktoken files from a folder outside the
// project (no tokenizer data is committed): KILN_TEST_TOKENIZER_DIR, set by CMake (by default
// the shared data folder beside the checkout). Pointing KILN_TOKENIZER_DIR there lets the
// encoding names resolve, in this process and in the `kiln` commands it starts; a directory
// the user already set is kept.
#pragma once

#include <cstdlib>
#include <string>

namespace kiln::testing {

inline std::string tiktoken_test_dir() {
  static const std::string dir = [] {
    setenv("KILN_TOKENIZER_DIR", KILN_TEST_TOKENIZER_DIR, /*overwrite=*/0);
    return std::string(std::getenv("KILN_TOKENIZER_DIR"));
  }();
  return dir;
}

}  // namespace kiln::testing
