// Helpers shared by the config tests: load with the repository's configs/, and temporary
// CONFIG.yml / model files.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/config/config.h"

namespace kiln::config::testing {

inline std::string configs_dir() { return std::string(KILN_SOURCE_DIR) + "/configs"; }

inline Result<Config> load_with(std::vector<std::string> overrides, std::string config_path = "",
                                int64_t num_ranks = 1) {
  LoadOptions options;
  options.configs_dir = configs_dir();
  options.config_path = std::move(config_path);
  options.overrides = std::move(overrides);
  options.num_ranks = num_ranks;
  return load(options);
}

// The error message of a load that must fail; fails the test if it succeeded or if the
// message spans more than one line.
inline std::string load_error(std::vector<std::string> overrides, std::string config_path = "",
                              int64_t num_ranks = 1) {
  Result<Config> c = load_with(std::move(overrides), std::move(config_path), num_ranks);
  if (c.ok()) {
    ADD_FAILURE() << "load succeeded but should have failed";
    return "";
  }
  const std::string& m = c.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
  return m;
}

// A fresh directory under the test temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            (std::string("kiln_config_") + info->test_suite_name() + "_" + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  // Writes `text` to `name` (which may contain subdirectories) and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::path p = path_ / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::config::testing
