#include "kiln/checkpoint/step_dir.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "kiln/base/hash.h"
#include "kiln/checkpoint/shard_layout.h"

namespace kiln::checkpoint {

namespace fs = std::filesystem;

std::string shard_file(int64_t device) { return fmt::format("shard-{}.safetensors", device); }

std::map<std::string, std::string> shard_metadata(int64_t step, int64_t device) {
  return {{"format", "kiln"}, {"step", std::to_string(step)}, {"device", std::to_string(device)}};
}

std::string piece_checksum(std::string_view bytes) { return fmt::format("{:016x}", fnv1a64(bytes)); }

std::vector<std::string> block_checksums(std::string_view bytes) {
  std::vector<std::string> out;
  if (static_cast<int64_t>(bytes.size()) <= kChecksumBlockBytes) return out;
  for (size_t at = 0; at < bytes.size(); at += static_cast<size_t>(kChecksumBlockBytes)) {
    out.push_back(piece_checksum(bytes.substr(at, static_cast<size_t>(kChecksumBlockBytes))));
  }
  return out;
}

nlohmann::ordered_json manifest_tensor_entry(const ir::Shape& shape, const ir::Sharding& sharding,
                                             const config::Mesh& mesh) {
  const std::vector<int64_t>& dims = shape.dims();
  nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
  for (int64_t dev : shard_owners(dims, sharding, mesh)) {
    const Region r = shard_region(dims, sharding, mesh, dev);
    pieces.push_back({{"file", shard_file(dev)}, {"device", dev}, {"offset", r.offset}, {"dims", r.dims},
                      {"fnv1a64", ""}});
  }
  return {{"shape", dims},
          {"dtype", std::string(ir::dtype_name(shape.dtype()))},
          {"sharding", sharding.dims},
          {"pieces", pieces}};
}

namespace {

nlohmann::ordered_json mesh_to_json(const config::Mesh& mesh) {
  return {{"axes", mesh.axes()}, {"ici", mesh.ici()}, {"dcn", mesh.dcn()}, {"shape", mesh.sizes()},
          {"num_devices", mesh.num_devices()}};
}

}  // namespace

std::string manifest_text(int64_t step, const config::Mesh& mesh, const nlohmann::json& data_iterator,
                          const nlohmann::json& rng, const nlohmann::ordered_json& tensors,
                          const std::string& config_yaml) {
  nlohmann::ordered_json manifest = nlohmann::ordered_json::object();
  manifest["format"] = "kiln-checkpoint";
  manifest["version"] = kFormatVersion;
  manifest["step"] = step;
  manifest["mesh"] = mesh_to_json(mesh);
  manifest["data_iterator"] = data_iterator;
  manifest["rng"] = rng;
  manifest["tensors"] = tensors;
  manifest["config"] = config_yaml;
  return manifest.dump(2) + "\n";
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

Status commit_step_dir(const std::string& tmp, const std::string& checkpoints_dir, int64_t step) {
  std::error_code ec;
  const std::string final_dir = (fs::path(checkpoints_dir) / std::to_string(step)).string();
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
  return ok_status();
}

}  // namespace kiln::checkpoint
