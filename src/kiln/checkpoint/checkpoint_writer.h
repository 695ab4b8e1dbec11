// A checkpoint of global tensors written one tensor at a time, for producers that cannot
// hold the whole state at once (kiln convert --from hf: a GPT-OSS of tens of GB).
//
//   KILN_ASSIGN_OR_RETURN(auto w, CheckpointWriter::begin(dir, /*step=*/0, {{"params/a", shape_a}, ...}));
//   for (...) KILN_RETURN_IF_ERROR(w->write("params/a", bytes_a));     // in the declared order
//   KILN_RETURN_IF_ERROR(w->commit(config_yaml, data_iterator, rng));
//
// The tensors' names, dtypes and shapes are declared up front, so shard-0.safetensors'
// header (whose offsets depend only on them) is written first and each tensor's bytes are
// appended as they come; each piece's checksum is taken on the way and the manifest is
// written last. The files are exactly those checkpoint::save() writes for the same global
// tensors (the header, manifest and commit code is shared: step_dir.h), and the save is as
// atomic: everything goes to "<step>.tmp-<pid>", is fsynced and renamed into place by
// commit(); a writer destroyed before commit() (an error midway) removes its temporary
// directory, so a half-written checkpoint is never left where a good one is looked for.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/ir/shape.h"

namespace kiln::checkpoint {

class CheckpointWriter {
 public:
  // Creates checkpoints_dir/<step>.tmp-<pid>/ and shard-0.safetensors' header for `tensors`
  // (state names such as "params/<name>", global shapes), in the order they will be written.
  static Result<std::unique_ptr<CheckpointWriter>> begin(const std::string& checkpoints_dir, int64_t step,
                                                         std::vector<std::pair<std::string, ir::Shape>> tensors);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // The next declared tensor's bytes (row-major, little-endian, in its dtype). A name out
  // of order or a wrong size is invalid_argument naming the tensor.
  Status write(const std::string& name, std::string_view bytes);
  // After every tensor: fsyncs, writes the manifest, renames the directory to <step>.
  Status commit(const std::string& config_yaml, const nlohmann::json& data_iterator, const nlohmann::json& rng);

  int64_t written() const { return next_; }  // tensors written so far

 private:
  CheckpointWriter() = default;
  void abort();

  std::string checkpoints_dir_, tmp_, shard_path_;
  int64_t step_ = 0;
  bool made_checkpoints_dir_ = false;  // removed again on abort when it is left empty
  int fd_ = -1;
  std::vector<std::pair<std::string, ir::Shape>> tensors_;
  std::vector<std::string> checksums_;
  std::vector<std::vector<std::string>> block_checksums_;
  int64_t next_ = 0;
  bool done_ = false;
};

}  // namespace kiln::checkpoint
