#include "kiln/checkpoint/checkpoint_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/checkpoint/shard_layout.h"
#include "kiln/checkpoint/step_dir.h"

namespace kiln::checkpoint {

namespace fs = std::filesystem;

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::begin(const std::string& checkpoints_dir, int64_t step,
                                                                  std::vector<std::pair<std::string, ir::Shape>> tensors) {
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter());
  w->checkpoints_dir_ = checkpoints_dir;
  w->step_ = step;
  std::error_code ec;
  w->made_checkpoints_dir_ = !fs::exists(checkpoints_dir, ec);
  std::vector<RawTensor> header_entries;
  for (const auto& [name, shape] : tensors) {
    const std::string dtype = safetensors_dtype(shape.dtype());
    if (dtype.empty()) {
      return invalid_argument("tensor {} has dtype {}, which checkpoints do not hold", name, ir::dtype_name(shape.dtype()));
    }
    header_entries.push_back({name, dtype, shape.dims(), nullptr});
  }
  KILN_ASSIGN_OR_RETURN(w->tmp_, prepare_save(checkpoints_dir, step));
  w->tensors_ = std::move(tensors);
  w->shard_path_ = (fs::path(w->tmp_) / shard_file(0)).string();
  // From here on the destructor removes the temporary directory unless commit() succeeds.
  KILN_ASSIGN_OR_RETURN(std::string header, safetensors_header(w->shard_path_, header_entries, shard_metadata(step, 0)));
  w->fd_ = ::open(w->shard_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return io_error("creating {}: {}", w->shard_path_, std::strerror(errno));
  KILN_RETURN_IF_ERROR(write_fd_all(w->fd_, header, w->shard_path_));
  return w;
}

CheckpointWriter::~CheckpointWriter() {
  if (!done_) abort();
}

void CheckpointWriter::abort() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  if (!tmp_.empty()) fs::remove_all(tmp_, ec);
  if (made_checkpoints_dir_ && fs::is_empty(checkpoints_dir_, ec)) fs::remove(checkpoints_dir_, ec);
  done_ = true;
}

Status CheckpointWriter::write(const std::string& name, std::string_view bytes) {
  if (done_ || fd_ < 0) return failed_precondition("checkpoint {}: tensor {} written after the writer finished", tmp_, name);
  if (next_ >= static_cast<int64_t>(tensors_.size()) || tensors_[next_].first != name) {
    return invalid_argument("checkpoint {}: tensor {} written out of order (expected {})", tmp_, name,
                            next_ < static_cast<int64_t>(tensors_.size()) ? tensors_[next_].first : "none");
  }
  const ir::Shape& shape = tensors_[next_].second;
  if (static_cast<int64_t>(bytes.size()) != shape.byte_size()) {
    return invalid_argument("checkpoint {}: tensor {} is {} ({} bytes), got {} bytes", tmp_, name, shape.to_string(),
                            shape.byte_size(), bytes.size());
  }
  KILN_RETURN_IF_ERROR(write_fd_all(fd_, bytes, shard_path_));
  checksums_.push_back(piece_checksum(bytes));
  block_checksums_.push_back(block_checksums(bytes));
  ++next_;
  return ok_status();
}

Status CheckpointWriter::commit(const std::string& config_yaml, const nlohmann::json& data_iterator,
                                const nlohmann::json& rng) {
  if (done_ || fd_ < 0) return failed_precondition("checkpoint {}: committed twice", tmp_);
  if (next_ != static_cast<int64_t>(tensors_.size())) {
    return failed_precondition("checkpoint {}: committed after {} of {} tensors (next: {})", tmp_, next_,
                               tensors_.size(), tensors_[next_].first);
  }
  const int fd = fd_;
  fd_ = -1;
  Status st = ::fsync(fd) == 0 ? ok_status() : io_error("syncing {}: {}", shard_path_, std::strerror(errno));
  if (::close(fd) != 0 && st.ok()) st = io_error("closing {}: {}", shard_path_, std::strerror(errno));
  KILN_RETURN_IF_ERROR(st);
  const config::Mesh mesh = single_device_mesh();
  nlohmann::ordered_json entries = nlohmann::ordered_json::object();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    nlohmann::ordered_json entry = manifest_tensor_entry(tensors_[i].second, ir::Sharding{}, mesh);
    entry["pieces"][0]["fnv1a64"] = checksums_[i];  // a global tensor: one piece, device 0's
    if (!block_checksums_[i].empty()) entry["pieces"][0]["block_fnv1a64"] = block_checksums_[i];
    entries[tensors_[i].first] = std::move(entry);
  }
  KILN_RETURN_IF_ERROR(write_text_file((fs::path(tmp_) / kManifestFile).string(),
                                       manifest_text(step_, mesh, data_iterator, rng, entries, config_yaml)));
  KILN_RETURN_IF_ERROR(fsync_path(tmp_, /*directory=*/true));
  KILN_RETURN_IF_ERROR(commit_step_dir(tmp_, checkpoints_dir_, step_));
  done_ = true;
  return ok_status();
}

}  // namespace kiln::checkpoint
