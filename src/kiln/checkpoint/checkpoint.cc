#include "kiln/checkpoint/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "kiln/base/hash.h"
#include "kiln/checkpoint/safetensors.h"

namespace kiln::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kStateFile = "state.safetensors";
constexpr const char* kManifestFile = "manifest.json";
constexpr int kFormatVersion = 1;

std::string checksum(const ir::Literal& t) { return fmt::format("{:016x}", fnv1a64(literal_bytes(t))); }

std::optional<int64_t> parse_step(const std::string& name) {
  if (name.empty() || name.size() > 18) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(name);
}

Status fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return io_error("opening {} to sync it: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return io_error("syncing {}: {}", path, std::strerror(err));
  return ok_status();
}

Status write_text_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("creating {}: {}", path, std::strerror(errno));
  const char* p = text.data();
  size_t left = text.size();
  Status st;
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      st = io_error("writing {}: {}", path, std::strerror(errno));
      break;
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (st.ok() && ::fsync(fd) != 0) st = io_error("syncing {}: {}", path, std::strerror(errno));
  if (::close(fd) != 0 && st.ok()) st = io_error("closing {}: {}", path, std::strerror(errno));
  return st;
}

Status save_into(const std::string& tmp, const CheckpointState& state, const SaveOptions& options) {
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) return io_error("creating {}: {}", tmp, ec.message());
  if (state.names.size() != state.tensors.size()) {
    return invalid_argument("checkpoint state has {} names for {} tensors", state.names.size(), state.tensors.size());
  }
  std::vector<NamedTensor> named;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
  for (size_t i = 0; i < state.names.size(); ++i) {
    named.emplace_back(state.names[i], &state.tensors[i]);
    const ir::Shape& s = state.tensors[i].shape();
    tensors[state.names[i]] = {{"shape", s.dims()},
                               {"dtype", std::string(ir::dtype_name(s.dtype()))},
                               {"file", kStateFile},
                               {"fnv1a64", checksum(state.tensors[i])}};
  }
  KILN_RETURN_IF_ERROR(write_safetensors((fs::path(tmp) / kStateFile).string(), named,
                                         {{"format", "kiln"}, {"step", std::to_string(state.step)}}));
  if (options.after_file) options.after_file(kStateFile);

  nlohmann::ordered_json manifest = nlohmann::ordered_json::object();
  manifest["format"] = "kiln-checkpoint";
  manifest["version"] = kFormatVersion;
  manifest["step"] = state.step;
  manifest["mesh"] = state.mesh;
  manifest["data_iterator"] = state.data_iterator;
  manifest["rng"] = state.rng;
  manifest["tensors"] = tensors;
  manifest["config"] = state.config_yaml;
  KILN_RETURN_IF_ERROR(write_text_file((fs::path(tmp) / kManifestFile).string(), manifest.dump(2) + "\n"));
  if (options.after_file) options.after_file(kManifestFile);
  return fsync_path(tmp, /*directory=*/true);
}

// Removes "<step>.tmp-<pid>" and "<step>.old-<pid>" directories whose process is gone
// (a save killed midway); a live process's save in progress is left alone.
void remove_stale_temporaries(const std::string& checkpoints_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string name = entry.path().filename().string();
    size_t at = name.find(".tmp-");
    if (at == std::string::npos) at = name.find(".old-");
    if (at == std::string::npos) continue;
    const std::string pid_text = name.substr(at + 5);
    if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) fs::remove_all(entry.path(), ec);
  }
}

void prune(const std::string& checkpoints_dir, int64_t max_to_keep) {
  if (max_to_keep <= 0) return;
  std::vector<int64_t> steps = list_steps(checkpoints_dir);
  std::error_code ec;
  for (size_t i = 0; i + static_cast<size_t>(max_to_keep) < steps.size(); ++i) {
    fs::remove_all(step_dir(checkpoints_dir, steps[i]), ec);
  }
}

}  // namespace

const ir::Literal* CheckpointState::find(const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return &tensors[i];
  }
  return nullptr;
}

std::string step_dir(const std::string& checkpoints_dir, int64_t step) {
  return (fs::path(checkpoints_dir) / std::to_string(step)).string();
}

Status save(const std::string& checkpoints_dir, const CheckpointState& state, const SaveOptions& options) {
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return io_error("creating {}: {}", checkpoints_dir, ec.message());
  const std::string final_dir = step_dir(checkpoints_dir, state.step);
  const std::string tmp = fmt::format("{}.tmp-{}", final_dir, ::getpid());
  remove_stale_temporaries(checkpoints_dir);
  Status st = save_into(tmp, state, options);
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return Status(st.code(), fmt::format("checkpoint of step {} not saved (earlier checkpoints kept): {}", state.step,
                                         st.message()));
  }
  // A checkpoint of the same step already there (a rerun): move it aside first.
  std::string old;
  if (fs::exists(final_dir, ec)) {
    old = fmt::format("{}.old-{}", final_dir, ::getpid());
    fs::remove_all(old, ec);
    fs::rename(final_dir, old, ec);
    if (ec) return io_error("moving the old checkpoint {} aside: {}", final_dir, ec.message());
  }
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    fs::remove_all(tmp, ec);
    return io_error("renaming {} to {}: {}", tmp, final_dir, ec.message());
  }
  KILN_RETURN_IF_ERROR(fsync_path(checkpoints_dir, /*directory=*/true));
  if (!old.empty()) fs::remove_all(old, ec);
  prune(checkpoints_dir, options.max_to_keep);
  return ok_status();
}

std::vector<int64_t> list_steps(const std::string& checkpoints_dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    std::optional<int64_t> step = parse_step(entry.path().filename().string());
    if (step && entry.is_directory(ec) && fs::exists(entry.path() / kManifestFile, ec)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<std::string> latest(const std::string& checkpoints_dir) {
  std::vector<int64_t> steps = list_steps(checkpoints_dir);
  if (steps.empty()) return std::nullopt;
  return step_dir(checkpoints_dir, steps.back());
}

Result<CheckpointState> load(const std::string& dir) {
  const std::string manifest_path = (fs::path(dir) / kManifestFile).string();
  std::ifstream in(manifest_path);
  if (!in.good()) return not_found("{} is not a checkpoint: no {}", dir, kManifestFile);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json manifest = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("tensors") ||
      !manifest["tensors"].is_object() || !manifest.contains("step")) {
    return data_loss("{}: corrupt manifest (not JSON with step and tensors)", manifest_path);
  }
  if (manifest.value("version", 0) != kFormatVersion) {
    return data_loss("{}: checkpoint format version {} (this Kiln reads {})", manifest_path, manifest.value("version", 0),
                     kFormatVersion);
  }
  KILN_ASSIGN_OR_RETURN(SafetensorsFile file, read_safetensors((fs::path(dir) / kStateFile).string()));
  CheckpointState state;
  state.step = manifest["step"].get<int64_t>();
  state.config_yaml = manifest.value("config", "");
  state.mesh = manifest.value("mesh", nlohmann::json::object());
  state.data_iterator = manifest.value("data_iterator", nlohmann::json::object());
  state.rng = manifest.value("rng", nlohmann::json::object());
  // Manifest order is the save order; nlohmann::json sorts keys, so follow the file's order.
  for (const std::string& name : file.names) {
    if (!manifest["tensors"].contains(name)) return data_loss("{}: tensor {} is not in the manifest", dir, name);
  }
  for (const auto& [name, info] : manifest["tensors"].items()) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) return data_loss("{}: tensor {} is missing from {}", dir, name, kStateFile);
    const ir::Shape& s = it->second.shape();
    std::vector<int64_t> dims = info.value("shape", std::vector<int64_t>{});
    if (dims != s.dims()) {
      return data_loss("{}: tensor {} has shape {} in {} but {} in the manifest", dir, name, ir::dims_to_string(s.dims()),
                       kStateFile, ir::dims_to_string(dims));
    }
    if (info.value("dtype", "") != std::string(ir::dtype_name(s.dtype()))) {
      return data_loss("{}: tensor {} has dtype {} in {} but {} in the manifest", dir, name, ir::dtype_name(s.dtype()),
                       kStateFile, info.value("dtype", ""));
    }
    if (info.value("fnv1a64", "") != checksum(it->second)) {
      return data_loss("{}: tensor {} fails its checksum (fnv1a64 {} in the manifest, {} on disk): the checkpoint is "
                       "corrupt",
                       dir, name, info.value("fnv1a64", ""), checksum(it->second));
    }
  }
  for (const std::string& name : file.names) {
    state.names.push_back(name);
    state.tensors.push_back(std::move(file.tensors.at(name)));
  }
  return state;
}

AsyncSaver::~AsyncSaver() {
  if (thread_.joinable()) thread_.join();
}

Status AsyncSaver::wait() {
  if (thread_.joinable()) thread_.join();
  Status st = result_ ? *result_ : ok_status();
  result_.reset();
  return st;
}

Status AsyncSaver::save(std::string checkpoints_dir, CheckpointState state, SaveOptions options) {
  Status previous = wait();
  auto result = std::make_shared<Status>();
  result_ = result;
  thread_ = std::thread([result, dir = std::move(checkpoints_dir), state = std::move(state),
                         options = std::move(options)]() { *result = checkpoint::save(dir, state, options); });
  return previous;
}

}  // namespace kiln::checkpoint
