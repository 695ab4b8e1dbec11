// The tokenizer tests read OpenAI's published .tiktoken files from a folder outside the
// project (no tokenizer data is committed): KILN_TEST_TOKENIZER_DIR, set by CMake (by default
// the shared data folder beside the checkout). Pointing KILN_TOKENIZER_DIR there lets the
// encoding names resolve, in this process and in the `kiln` commands it starts; a directory
// the user already set is kept.
//
// Tests that read the files start with KILN_REQUIRE_TIKTOKEN_FILES(): on a developer's
// machine without them the test is skipped with one line naming what is missing and where;
// under CI=true (CI has them) a missing file fails the test instead.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::testing {

inline std::string tiktoken_test_dir() {
  static const std::string dir = [] {
    setenv("KILN_TOKENIZER_DIR", KILN_TEST_TOKENIZER_DIR, /*overwrite=*/0);
    return std::string(std::getenv("KILN_TOKENIZER_DIR"));
  }();
  return dir;
}

// "" when every published file the tests read is in tiktoken_test_dir(), else one line
// naming the missing ones.
inline std::string missing_tiktoken_files() {
  std::string missing;
  for (const char* f : {"o200k_base.tiktoken", "cl100k_base.tiktoken", "p50k_base.tiktoken", "r50k_base.tiktoken",
                        "gpt2.tiktoken"}) {
    if (!std::filesystem::exists(std::filesystem::path(tiktoken_test_dir()) / f)) missing += (missing.empty() ? "" : ", ") + std::string(f);
  }
  if (missing.empty()) return "";
  return "OpenAI's published tokenizer files are missing from " + tiktoken_test_dir() + ": " + missing +
         " (set KILN_TEST_TOKENIZER_DIR at configure time, or KILN_TOKENIZER_DIR, to a folder holding them)";
}

inline bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace kiln::testing

#define KILN_REQUIRE_TIKTOKEN_FILES()                                    \
  do {                                                                   \
    const std::string kiln_missing_ = ::kiln::testing::missing_tiktoken_files(); \
    if (!kiln_missing_.empty()) {                                        \
      if (::kiln::testing::under_ci()) FAIL() << kiln_missing_;          \
      GTEST_SKIP() << kiln_missing_;                                     \
    }                                                                    \
  } while (0)
