// Scratch paths for tests. CTest runs every test case as its own process, two at a time
// or more, so a path that two cases of one file share must carry the process id: a fixed
// name lets one case remove the directory another is writing.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kiln::testing {

// `<test temp dir>/<stem>_<pid>`; nothing is created.
inline std::filesystem::path temp_path(const std::string& stem) {
  return std::filesystem::path(::testing::TempDir()) / (stem + "_" + std::to_string(getpid()));
}

}  // namespace kiln::testing
