// Runs a command line the way a user's shell does and captures what came back, for tests of
// the `kiln` subcommands (exit codes, stdout, the one-line error on stderr).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing/temp_path.h"

namespace kiln::testing {

struct CliRun {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// An empty directory `name`_<pid> under the test temp dir (removed first if a run left one).
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  std::filesystem::path p = temp_path(name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// `binary args` through the shell (so quote what needs quoting), with `stdin_text` on its
// standard input. Scratch files are per process and call: CTest runs test cases in parallel.
inline CliRun run_command(const std::string& binary, const std::string& args, const std::string& stdin_text = "") {
  static int calls = 0;
  std::string stem = ::testing::TempDir() + "kiln_cli_" + std::to_string(getpid()) + "_" + std::to_string(calls++);
  std::string in_path = stem + ".stdin", err_path = stem + ".stderr";
  std::ofstream(in_path) << stdin_text;
  CliRun r;
  FILE* p = popen((binary + " " + args + " <" + in_path + " 2>" + err_path).c_str(), "r");
  if (p) {
    std::array<char, 4096> buf;
    size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  r.err = read_text_file(err_path);
  std::remove(in_path.c_str());
  std::remove(err_path.c_str());
  return r;
}

}  // namespace kiln::testing
