// Kiln checkpoints (docs/checkpoints.md): one directory per step,
//
//   {base_output_directory}/{run_name}/checkpoints/<step>/
//     shard-<device>.safetensors  the shards device <device> owns, raw bytes in their dtype
//     manifest.json               step, resolved config YAML, mesh, data-iterator and RNG
//                                 state, and per tensor: global shape, dtype, sharding and
//                                 its pieces (file, device, region, FNV-1a 64 checksum)
//
// A tensor is saved from per-device shards given its ir::Sharding over a config::Mesh
// (shard_layout.h); each distinct shard is written once, by the lowest device holding it.
// The single-device trainer saves global tensors (no sharding, single_device_mesh()).
// Loading asks for one device's shard under any target sharding and mesh and assembles it
// from the saved pieces that overlap it (resharding on load).
//
// <step> is the number of completed steps: a run resumed from it runs step <step> next.
// Saving is atomic: everything goes to "<step>.tmp-<pid>", files and directory are fsynced,
// then the directory is renamed to "<step>". A directory counts as a checkpoint only when
// its name is a number and it holds manifest.json (written last), so a crash or kill -9 at
// any moment leaves the previous checkpoint as the latest one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/checkpoint/shard_layout.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/literal.h"

namespace kiln::checkpoint {

// One state tensor as the devices hold it.
struct StateTensor {
  std::string name;        // "params/<name>", "mu/<name>", "nu/<name>"
  ir::Shape shape;         // global shape and dtype
  ir::Sharding sharding;   // no dims: replicated on every device
  // shards[d]: device d's shard, row-major little-endian bytes in shape's dtype. Only the
  // owners' entries (shard_owners) are read; the others may be left empty.
  std::vector<std::string> shards;

  // A global tensor in the trivial layout (one device holds all of it).
  static StateTensor global(std::string name, const ir::Literal& value);
};

struct CheckpointState {
  int64_t step = 0;
  config::Mesh mesh = single_device_mesh();  // the mesh the shards are laid out on
  std::vector<StateTensor> tensors;          // in save order
  std::string config_yaml;                   // resolved config
  nlohmann::json data_iterator = nlohmann::json::object();
  nlohmann::json rng = nlohmann::json::object();

  const StateTensor* find(const std::string& name) const;  // nullptr when absent
};

struct SaveOptions {
  int64_t max_to_keep = -1;  // max_num_checkpoints_to_keep (<= 0: keep all); pruned after a successful save
  // Test hook: called after each file of the temporary directory is written (argument:
  // the file name), before the manifest; a test can stall or kill the process there.
  std::function<void(const std::string&)> after_file;
  // Several processes writing one checkpoint (MPI ranks; one process: the defaults). Each
  // rank writes the pieces owned by its devices [first_device, first_device + local_devices)
  // (the other devices' shards may be left empty) and then a note rank-<rank>.json with their
  // checksums; rank 0 waits for every rank's note (at most commit_timeout_s), then writes the
  // manifest and renames the directory. All ranks write into `tmp_dir`, which rank 0 made
  // with prepare_save() before they started (a barrier between).
  int64_t rank = 0, num_ranks = 1;
  int64_t first_device = 0, local_devices = -1;  // -1: every device of the mesh
  std::string tmp_dir;                           // empty: save() makes "<step>.tmp-<pid>"
  double commit_timeout_s = 600;
  bool progress = true;  // a Progress line for the bytes written (base/progress.h)
};

// "<checkpoints_dir>/<step>".
std::string step_dir(const std::string& checkpoints_dir, int64_t step);
// Writes `state` atomically as checkpoints_dir/<state.step>; an I/O error (disk full)
// fails with a message naming the file and leaves earlier checkpoints untouched. A shard
// of the wrong size or a sharding that does not fit is invalid_argument naming the tensor.
// With num_ranks > 1, a rank other than 0 returns once its files and note are written (rank
// 0 alone commits the checkpoint and reports a failure of any rank).
Status save(const std::string& checkpoints_dir, const CheckpointState& state, const SaveOptions& options = {});
// Rank 0 of a multi-process save, before the others start: removes temporaries of dead
// saves and creates "<checkpoints_dir>/<step>.tmp-<pid>", which it returns for tmp_dir.
Result<std::string> prepare_save(const std::string& checkpoints_dir, int64_t step);
// Complete checkpoints' steps, ascending.
std::vector<int64_t> list_steps(const std::string& checkpoints_dir);
// The latest complete checkpoint's directory, if any.
std::optional<std::string> latest(const std::string& checkpoints_dir);
// `dir` when it holds manifest.json, else its latest checkpoint; not_found otherwise.
Result<std::string> resolve_step_dir(const std::string& dir);

// One saved piece of a tensor: which file holds it, which device wrote it, where it lies.
struct SavedPiece {
  std::string file;  // in the step directory
  std::string key;   // tensor name inside the file
  int64_t device = 0;
  Region region;
  std::string fnv1a64;
  std::vector<std::string> block_fnv1a64;  // per kChecksumBlockBytes (step_dir.h); empty: one block, or an older checkpoint
};
struct SavedTensor {
  std::string name;
  ir::Shape shape;  // global
  ir::Sharding sharding;
  std::vector<SavedPiece> pieces;
};

// How read_shard reads a saved piece that overlaps the shard only in part (a global tensor
// restored on a mesh, a checkpoint resharded on load).
struct ShardReadOptions {
  // false: the whole piece is read and checked against its checksum, then the overlap kept.
  // true: only the overlap's bytes are read (pread of its rows, shard_read.h), so a device
  // of an N-way split reads 1/N of a global tensor. Pieces over one block carry a checksum
  // per block (step_dir.h), and a partial read reads and checks the blocks it touches; a
  // checkpoint written before block checksums reads partially unchecked (shape, dtype and
  // the file's bounds still are). A piece wholly inside the shard is read whole and checked.
  bool partial_reads = false;
};

// A checkpoint opened for reading: the manifest is parsed and checked (every piece named,
// pieces tiling the tensor), tensor data is read on demand. Not thread-safe (it caches the
// files' headers).
class CheckpointReader {
 public:
  static Result<CheckpointReader> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  int64_t step() const { return step_; }
  const config::Mesh& mesh() const { return mesh_; }
  const std::string& config_yaml() const { return config_yaml_; }
  const nlohmann::json& data_iterator() const { return data_iterator_; }
  const nlohmann::json& rng() const { return rng_; }
  const std::vector<SavedTensor>& tensors() const { return tensors_; }  // save order
  const SavedTensor* find(const std::string& name) const;

  // Device `device`'s shard of tensor `name` under `sharding` on `mesh` (row-major bytes in
  // its dtype), assembled from the saved pieces that overlap it, each checked against its
  // checksum. The tensor must exist with exactly `expected`'s shape and dtype: errors name
  // the checkpoint and the tensor.
  Result<std::string> read_shard(const std::string& name, const ir::Shape& expected, const ir::Sharding& sharding,
                                 const config::Mesh& mesh, int64_t device, const ShardReadOptions& options = {}) const;
  // The whole tensor, in its saved shape and dtype.
  Result<ir::Literal> read_global(const std::string& name) const;

 private:
  // The piece's file header and entry, checked against the manifest.
  Result<std::pair<const SafetensorsIndex*, const SafetensorsEntry*>> piece_entry(const SavedTensor& t,
                                                                                  const SavedPiece& p) const;
  Result<std::string> read_piece(const SavedTensor& t, const SavedPiece& p) const;

  std::string dir_;
  int64_t step_ = 0;
  config::Mesh mesh_;
  std::string config_yaml_;
  nlohmann::json data_iterator_, rng_;
  std::vector<SavedTensor> tensors_;
  std::map<std::string, size_t> by_name_;
  mutable std::map<std::string, SafetensorsIndex> files_;
};

// Reads a whole checkpoint as global tensors (the trivial layout), every checksum verified.
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
