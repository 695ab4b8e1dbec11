// Kiln checkpoints (docs/checkpoints.md): one directory per step,
//
//   {base_output_directory}/{run_name}/checkpoints/<step>/
//     state.safetensors   "params/<name>", "mu/<name>", "nu/<name>" (global shapes, state dtypes)
//     manifest.json       step, resolved config YAML, mesh, data-iterator and RNG state, and
//                         per tensor: shape, dtype, FNV-1a 64 checksum of its bytes
//
// <step> is the number of completed steps: a run resumed from it runs step <step> next.
// Saving is atomic: everything goes to "<step>.tmp-<pid>", files and directory are fsynced,
// then the directory is renamed to "<step>". A directory counts as a checkpoint only when
// its name is a number and it holds manifest.json (written last), so a crash or kill -9 at
// any moment leaves the previous checkpoint as the latest one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/ir/literal.h"

namespace kiln::checkpoint {

struct CheckpointState {
  int64_t step = 0;
  std::vector<std::string> names;    // "params/<name>", "mu/<name>", "nu/<name>", in save order
  std::vector<ir::Literal> tensors;  // same order
  std::string config_yaml;           // resolved config
  nlohmann::json mesh = nlohmann::json::object();
  nlohmann::json data_iterator = nlohmann::json::object();
  nlohmann::json rng = nlohmann::json::object();

  const ir::Literal* find(const std::string& name) const;  // nullptr when absent
};

struct SaveOptions {
  int64_t max_to_keep = -1;  // max_num_checkpoints_to_keep (<= 0: keep all); pruned after a successful save
  // Test hook: called after each file of the temporary directory is written (argument:
  // the file name), before the manifest; a test can stall or kill the process there.
  std::function<void(const std::string&)> after_file;
};

// "<checkpoints_dir>/<step>".
std::string step_dir(const std::string& checkpoints_dir, int64_t step);
// Writes `state` atomically as checkpoints_dir/<state.step>; an I/O error (disk full)
// fails with a message naming the file and leaves earlier checkpoints untouched.
Status save(const std::string& checkpoints_dir, const CheckpointState& state, const SaveOptions& options = {});
// Complete checkpoints' steps, ascending.
std::vector<int64_t> list_steps(const std::string& checkpoints_dir);
// The latest complete checkpoint's directory, if any.
std::optional<std::string> latest(const std::string& checkpoints_dir);
// Reads a checkpoint directory and verifies it: every manifest tensor present with its
// shape, dtype and checksum. Errors are data_loss naming the directory and the tensor.
Result<CheckpointState> load(const std::string& dir);

// Saves in a background thread. save() waits for the previous save, then takes the state
// (already a copy of the training state) and returns at once; its status is reported by
// the next save() or wait().
class AsyncSaver {
 public:
  ~AsyncSaver();
  Status save(std::string checkpoints_dir, CheckpointState state, SaveOptions options);
  Status wait();  // the last save's status
  bool busy() const { return thread_.joinable(); }

 private:
  std::thread thread_;
  std::shared_ptr<Status> result_;
};

}  // namespace kiln::checkpoint
