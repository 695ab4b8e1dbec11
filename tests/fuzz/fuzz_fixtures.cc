#include "tests/fuzz/fuzz_fixtures.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "kiln/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_files.h"

namespace kiln::fuzz {

namespace fs = std::filesystem;

std::string small_checkpoint_dir() {
  static const std::string dir = [] {
    const std::string root = fresh_dir("fixture_checkpoint");
    checkpoint::CheckpointState state;
    state.step = 3;
    state.mesh = config::Mesh{{"fsdp"}, {2}, {1}};
    state.config_yaml = "model_name: gpt-oss-tiny\n";
    state.data_iterator = {{"type", "synthetic"}, {"step", 3}};
    const ir::Shape matrix(ir::DType::kF32, {4, 3}), vector(ir::DType::kBF16, {5}), scalar(ir::DType::kS32, {});
    auto bytes = [](size_t n, char base) {
      std::string s(n, '\0');
      for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(base + i);
      return s;
    };
    // Row-split matrix: device d holds rows [2d, 2d + 2).
    state.tensors.push_back({"params/w", matrix, ir::Sharding{{{"fsdp"}, {}}}, {bytes(24, 1), bytes(24, 40)}});
    state.tensors.push_back({"params/scale", vector, ir::Sharding{}, {bytes(10, 90), bytes(10, 90)}});
    state.tensors.push_back({"mu/count", scalar, ir::Sharding{}, {bytes(4, 7), bytes(4, 7)}});
    checkpoint::SaveOptions options;
    options.progress = false;
    const Status saved = checkpoint::save(root, state, options);
    if (!saved.ok()) {
      std::fprintf(stderr, "fuzz fixture: %s\n", saved.to_string().c_str());
      std::abort();
    }
    return checkpoint::step_dir(root, state.step);
  }();
  return dir;
}

std::vector<std::pair<std::string, std::string>> step_dir_files(const std::string& step_dir) {
  std::vector<std::pair<std::string, std::string>> files = {{"manifest.json", read_file(step_dir + "/manifest.json")}};
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    if (entry.path().filename() != "manifest.json") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) files.emplace_back(name, read_file(step_dir + "/" + name));
  return files;
}

}  // namespace kiln::fuzz
