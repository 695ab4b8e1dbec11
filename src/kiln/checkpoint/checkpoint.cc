#include "kiln/checkpoint/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include "kiln/base/hash.h"
#include "kiln/base/progress.h"
#include "kiln/base/sizes.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/checkpoint/shard_read.h"
#include "kiln/checkpoint/step_dir.h"

namespace kiln::checkpoint {

namespace fs = std::filesystem;

namespace {

std::optional<int64_t> parse_step(const std::string& name) {
  if (name.empty() || name.size() > 18) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::stoll(name);
}

// JSON integers only: nlohmann's get<int64_t>() converts a float, which is undefined when
// it is out of range. Throws (caught by the manifest readers) on anything else.
int64_t json_int(const nlohmann::ordered_json& j) {
  if (!j.is_number_integer()) throw std::invalid_argument("expected an integer, got " + j.dump());
  return j.get<int64_t>();
}

std::vector<int64_t> json_ints(const nlohmann::ordered_json& j) {
  if (!j.is_array()) throw std::invalid_argument("expected a list of integers, got " + j.dump());
  std::vector<int64_t> out;
  for (const auto& v : j) out.push_back(json_int(v));
  return out;
}

Result<config::Mesh> mesh_from_json(const nlohmann::ordered_json& j, const std::string& where) {
  if (!j.is_object()) return data_loss("{}: mesh is not an object", where);
  std::vector<std::string> axes;
  std::vector<int64_t> ici, dcn;
  try {
    axes = j.value("axes", std::vector<std::string>{});
    ici = j.contains("ici") ? json_ints(j["ici"]) : std::vector<int64_t>(axes.size(), 1);
    dcn = j.contains("dcn") ? json_ints(j["dcn"]) : std::vector<int64_t>(axes.size(), 1);
  } catch (const std::exception& e) {
    return data_loss("{}: corrupt mesh: {}", where, e.what());
  }
  if (ici.size() != axes.size() || dcn.size() != axes.size()) {
    return data_loss("{}: corrupt mesh (axes, ici and dcn differ in length)", where);
  }
  // More devices than any machine has is a corrupt file (and the product must not overflow).
  constexpr int64_t kMaxDevices = int64_t{1} << 24;
  int64_t devices = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (ici[i] < 1 || dcn[i] < 1) return data_loss("{}: corrupt mesh (axis {} of size < 1)", where, axes[i]);
    if (ici[i] > kMaxDevices || dcn[i] > kMaxDevices || devices > kMaxDevices / (ici[i] * dcn[i])) {
      return data_loss("{}: corrupt mesh (more than {} devices)", where, kMaxDevices);
    }
    devices *= ici[i] * dcn[i];
  }
  return config::Mesh(std::move(axes), std::move(ici), std::move(dcn));
}

bool is_local(const SaveOptions& o, int64_t device) {
  return o.local_devices < 0 || (device >= o.first_device && device < o.first_device + o.local_devices);
}

std::string note_file(int64_t rank) { return fmt::format("rank-{}.json", rank); }

// A rank's note to rank 0: its pieces' checksums ({tensor: {device: fnv1a64}}) or its error.
// Written to a temporary name and renamed, so rank 0 never reads half of it.
Status write_note(const std::string& tmp, int64_t rank, const nlohmann::ordered_json& checksums, const Status& st) {
  nlohmann::ordered_json note = {{"rank", rank}, {"ok", st.ok()}, {"error", st.ok() ? "" : st.to_string()},
                                 {"checksums", checksums}};
  const std::string path = (fs::path(tmp) / note_file(rank)).string();
  KILN_RETURN_IF_ERROR(write_text_file(path + ".partial", note.dump() + "\n"));
  std::error_code ec;
  fs::rename(path + ".partial", path, ec);
  if (ec) return io_error("renaming {}.partial: {}", path, ec.message());
  return ok_status();
}

// Rank 0: waits for the note of every other rank and merges their checksums into `checksums`.
Status collect_notes(const std::string& tmp, const SaveOptions& o, nlohmann::ordered_json& checksums) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.commit_timeout_s);
  for (int64_t r = 1; r < o.num_ranks; ++r) {
    const fs::path path = fs::path(tmp) / note_file(r);
    std::error_code ec;
    while (!fs::exists(path, ec)) {
      if (std::chrono::steady_clock::now() > deadline) {
        return io_error("rank {} did not finish writing its shards into {} within {} s", r, tmp,
                                 o.commit_timeout_s);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::ordered_json note = nlohmann::ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (note.is_discarded() || !note.is_object()) return data_loss("{}: corrupt note of rank {}", path.string(), r);
    if (!note.value("ok", false)) return internal_error("rank {}: {}", r, note.value("error", std::string("unknown error")));
    const nlohmann::ordered_json sums = note.value("checksums", nlohmann::ordered_json::object());
    for (const auto& [name, devices] : sums.items()) {
      for (const auto& [dev, sum] : devices.items()) checksums[name][dev] = sum;
    }
    fs::remove(path, ec);
  }
  return ok_status();
}

// Writes this process's files (its devices' pieces) into `tmp`; on rank 0 (the only rank of
// a one-process save) also the manifest, once every rank's pieces are there.
Status save_into(const std::string& tmp, const CheckpointState& state, const SaveOptions& options) {
  std::error_code ec;
  fs::create_directories(tmp, ec);
  if (ec) return io_error("creating {}: {}", tmp, ec.message());
  const int64_t devices = state.mesh.num_devices();
  // Per owner device, the pieces it writes; per tensor, its manifest entry (checksums of
  // other ranks' pieces come from their notes).
  std::map<int64_t, std::vector<RawTensor>> files;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
  nlohmann::ordered_json checksums = nlohmann::ordered_json::object();
  int64_t total_bytes = 0;
  for (const StateTensor& t : state.tensors) {
    const std::vector<int64_t>& dims = t.shape.dims();
    KILN_RETURN_IF_ERROR(check_sharding(t.name, dims, t.sharding, state.mesh));
    if (tensors.contains(t.name)) return invalid_argument("tensor {} is saved twice", t.name);
    const std::string dtype = safetensors_dtype(t.shape.dtype());
    if (dtype.empty()) return invalid_argument("tensor {} has dtype {}, which checkpoints do not hold", t.name,
                                               ir::dtype_name(t.shape.dtype()));
    for (int64_t dev : shard_owners(dims, t.sharding, state.mesh)) {
      const Region r = shard_region(dims, t.sharding, state.mesh, dev);
      if (!is_local(options, dev)) continue;
      const size_t want = static_cast<size_t>(r.num_elements() * ir::dtype_size(t.shape.dtype()));
      if (dev >= static_cast<int64_t>(t.shards.size()) || t.shards[dev].size() != want) {
        return invalid_argument("tensor {}: device {} of {} must hand over its {} shard {} ({} bytes), got {} bytes",
                                t.name, dev, devices, ir::dtype_name(t.shape.dtype()), ir::dims_to_string(r.dims), want,
                                dev < static_cast<int64_t>(t.shards.size()) ? t.shards[dev].size() : 0);
      }
      files[dev].push_back({t.name, dtype, r.dims, &t.shards[dev]});
      checksums[t.name][std::to_string(dev)] = {{"whole", piece_checksum(t.shards[dev])},
                                                {"blocks", block_checksums(t.shards[dev])}};
      total_bytes += static_cast<int64_t>(want);
    }
    tensors[t.name] = manifest_tensor_entry(t.shape, t.sharding, state.mesh);
  }
  {
    Progress progress(fmt::format("save checkpoint {}", state.step), total_bytes,
                      Progress::Options{.unit = Progress::Unit::kBytes,
                                        .mode = options.progress ? Progress::Mode::kAuto : Progress::Mode::kOff});
    for (const auto& [dev, raw] : files) {
      KILN_RETURN_IF_ERROR(
          write_safetensors_raw((fs::path(tmp) / shard_file(dev)).string(), raw, shard_metadata(state.step, dev)));
      if (options.after_file) options.after_file(shard_file(dev));
      for (const RawTensor& t : raw) progress.advance(static_cast<int64_t>(t.bytes->size()));
    }
  }
  if (options.rank != 0) return write_note(tmp, options.rank, checksums, ok_status());
  KILN_RETURN_IF_ERROR(collect_notes(tmp, options, checksums));
  for (auto& [name, entry] : tensors.items()) {
    for (auto& piece : entry["pieces"]) {
      const std::string dev = std::to_string(piece["device"].get<int64_t>());
      if (!checksums.contains(name) || !checksums[name].contains(dev)) {
        return internal_error("tensor {}: no rank wrote the piece of device {}", name, dev);
      }
      piece["fnv1a64"] = checksums[name][dev]["whole"];
      if (!checksums[name][dev]["blocks"].empty()) piece["block_fnv1a64"] = checksums[name][dev]["blocks"];
    }
  }

  KILN_RETURN_IF_ERROR(write_text_file((fs::path(tmp) / kManifestFile).string(),
                                       manifest_text(state.step, state.mesh, state.data_iterator, state.rng, tensors,
                                                     state.config_yaml)));
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
    if (pid_text.empty() || pid_text.size() > 9 || pid_text.find_first_not_of("0123456789") != std::string::npos) continue;
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

StateTensor StateTensor::global(std::string name, const ir::Literal& value) {
  StateTensor t;
  t.name = std::move(name);
  t.shape = value.shape();
  t.shards.push_back(literal_bytes(value));
  return t;
}

const StateTensor* CheckpointState::find(const std::string& name) const {
  for (const StateTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string step_dir(const std::string& checkpoints_dir, int64_t step) {
  return (fs::path(checkpoints_dir) / std::to_string(step)).string();
}

Result<std::string> prepare_save(const std::string& checkpoints_dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return io_error("creating {}: {}", checkpoints_dir, ec.message());
  remove_stale_temporaries(checkpoints_dir);
  const std::string tmp = fmt::format("{}.tmp-{}", step_dir(checkpoints_dir, step), ::getpid());
  fs::create_directories(tmp, ec);
  if (ec) return io_error("creating {}: {}", tmp, ec.message());
  return tmp;
}

Status save(const std::string& checkpoints_dir, const CheckpointState& state, const SaveOptions& options) {
  std::error_code ec;
  std::string tmp = options.tmp_dir;
  if (options.num_ranks > 1 && tmp.empty()) {
    return invalid_argument("a save by {} ranks needs the temporary directory of prepare_save()", options.num_ranks);
  }
  if (tmp.empty()) {
    Result<std::string> made = prepare_save(checkpoints_dir, state.step);
    if (!made.ok()) return made.status();
    tmp = *made;
  }
  Status st = save_into(tmp, state, options);
  if (options.rank != 0) {
    // Rank 0 removes the directory and reports the error (from this note) to the run.
    if (!st.ok()) (void)write_note(tmp, options.rank, nlohmann::ordered_json::object(), st);
    return st;
  }
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return Status(st.code(), fmt::format("checkpoint of step {} not saved (earlier checkpoints kept): {}", state.step,
                                         st.message()));
  }
  KILN_RETURN_IF_ERROR(commit_step_dir(tmp, checkpoints_dir, state.step));
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

Result<std::string> resolve_step_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / kManifestFile, ec)) return dir;
  std::optional<std::string> last = latest(dir);
  if (!last) return not_found("{} holds no complete checkpoint (no manifest.json, no <step>/manifest.json)", dir);
  return *last;
}

Result<CheckpointReader> CheckpointReader::open(const std::string& dir) {
  const std::string manifest_path = (fs::path(dir) / kManifestFile).string();
  std::ifstream in(manifest_path);
  if (!in.good()) return not_found("{} is not a checkpoint: no {}", dir, kManifestFile);
  std::stringstream ss;
  ss << in.rdbuf();
  // ordered_json keeps the save order of the tensors.
  nlohmann::ordered_json manifest = nlohmann::ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded() || !manifest.is_object() || !manifest.contains("tensors") ||
      !manifest["tensors"].is_object() || !manifest.contains("step") || !manifest["step"].is_number_integer()) {
    return data_loss("{}: corrupt manifest (not JSON with step and tensors)", manifest_path);
  }
  int version = 0;
  CheckpointReader r;
  r.dir_ = dir;
  // value() throws when a field has another type than its default: the manifest is corrupt.
  try {
    version = manifest.contains("version") ? static_cast<int>(std::clamp<int64_t>(json_int(manifest["version"]), -1, 1000)) : 0;
    if (version != 1 && version != kFormatVersion) {
      return data_loss("{}: checkpoint format version {} (this Kiln reads 1 and {})", manifest_path, version,
                       kFormatVersion);
    }
    r.step_ = manifest["step"].get<int64_t>();
    r.config_yaml_ = manifest.value("config", "");
    r.data_iterator_ = nlohmann::json::parse(manifest.value("data_iterator", nlohmann::ordered_json::object()).dump());
    r.rng_ = nlohmann::json::parse(manifest.value("rng", nlohmann::ordered_json::object()).dump());
    // Version 1 saved global tensors in one file; its "mesh" described the run's config.
    if (version == 1) {
      r.mesh_ = single_device_mesh();
    } else {
      KILN_ASSIGN_OR_RETURN(r.mesh_, mesh_from_json(manifest.value("mesh", nlohmann::ordered_json::object()), manifest_path));
    }
  } catch (const std::exception& e) {
    return data_loss("{}: corrupt manifest ({})", manifest_path, e.what());
  }
  for (const auto& [name, info] : manifest["tensors"].items()) {
    SavedTensor t;
    t.name = name;
    try {
      std::optional<ir::DType> dtype = ir::parse_dtype(info.at("dtype").get<std::string>());
      if (!dtype) return data_loss("{}: tensor {} has unknown dtype {}", manifest_path, name, info.at("dtype").dump());
      const std::vector<int64_t> dims = json_ints(info.at("shape"));
      if (!checked_element_count(dims)) {
        return data_loss("{}: tensor {}: shape {} is negative or has more than {} elements", manifest_path, name,
                         info.at("shape").dump(), kMaxFileTensorElements);
      }
      t.shape = ir::Shape(*dtype, dims);
      if (version == 1) {
        t.pieces.push_back({info.at("file").get<std::string>(), name, 0,
                            Region{std::vector<int64_t>(t.shape.rank(), 0), t.shape.dims()},
                            info.at("fnv1a64").get<std::string>()});
      } else {
        t.sharding.dims = info.at("sharding").get<std::vector<std::vector<std::string>>>();
        for (const auto& p : info.at("pieces")) {
          t.pieces.push_back({p.at("file").get<std::string>(), name, json_int(p.at("device")),
                              Region{json_ints(p.at("offset")), json_ints(p.at("dims"))},
                              p.at("fnv1a64").get<std::string>(),
                              p.value("block_fnv1a64", std::vector<std::string>{})});
        }
      }
    } catch (const std::exception& e) {
      return data_loss("{}: tensor {}: corrupt manifest entry ({})", manifest_path, name, e.what());
    }
    // The pieces must lie inside the tensor and cover it exactly once.
    int64_t covered = 0;
    for (const SavedPiece& p : t.pieces) {
      if (p.region.offset.size() != t.shape.dims().size() || p.region.dims.size() != t.shape.dims().size()) {
        return data_loss("{}: tensor {}: a piece's rank differs from the tensor's", manifest_path, name);
      }
      for (size_t d = 0; d < p.region.dims.size(); ++d) {
        // Written without a sum: offsets and dims come from the file and may be near 2^63.
        if (p.region.offset[d] < 0 || p.region.dims[d] < 0 || p.region.offset[d] > t.shape.dims()[d] ||
            p.region.dims[d] > t.shape.dims()[d] - p.region.offset[d]) {
          return data_loss("{}: tensor {}: a piece lies outside {}", manifest_path, name, t.shape.to_string());
        }
      }
      // Each piece is inside the tensor (at most 2^44 elements), so stopping once the sum
      // passes the tensor keeps it from overflowing.
      covered += p.region.num_elements();
      if (covered > t.shape.num_elements()) break;
    }
    if (covered != t.shape.num_elements()) {
      return data_loss("{}: tensor {}: its pieces hold {} of its {} elements", manifest_path, name, covered,
                       t.shape.num_elements());
    }
    r.by_name_[name] = r.tensors_.size();
    r.tensors_.push_back(std::move(t));
  }
  return r;
}

const SavedTensor* CheckpointReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Result<std::pair<const SafetensorsIndex*, const SafetensorsEntry*>> CheckpointReader::piece_entry(
    const SavedTensor& t, const SavedPiece& p) const {
  auto it = files_.find(p.file);
  if (it == files_.end()) {
    Result<SafetensorsIndex> index = index_safetensors((fs::path(dir_) / p.file).string());
    if (!index.ok()) return Status(index.status().code(), fmt::format("checkpoint {}: tensor {}: {}", dir_, t.name, index.status().message()));
    it = files_.emplace(p.file, std::move(*index)).first;
  }
  const SafetensorsIndex& index = it->second;
  auto entry = index.entries.find(p.key);
  if (entry == index.entries.end()) return data_loss("checkpoint {}: tensor {} is missing from {}", dir_, t.name, p.file);
  if (entry->second.dims != p.region.dims || entry->second.dtype != safetensors_dtype(t.shape.dtype())) {
    return data_loss("checkpoint {}: tensor {} is {} {} in {} but the manifest says {} {}", dir_, t.name,
                     entry->second.dtype, ir::dims_to_string(entry->second.dims), p.file,
                     safetensors_dtype(t.shape.dtype()), ir::dims_to_string(p.region.dims));
  }
  return std::make_pair(&index, &entry->second);
}

Result<std::string> CheckpointReader::read_piece(const SavedTensor& t, const SavedPiece& p) const {
  KILN_ASSIGN_OR_RETURN(auto found, piece_entry(t, p));
  const SafetensorsIndex& index = *found.first;
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_tensor_bytes(index, p.key));
  if (piece_checksum(bytes) != p.fnv1a64) {
    return data_loss("checkpoint {}: tensor {} fails its checksum in {} (fnv1a64 {} in the manifest, {} on disk): the "
                     "checkpoint is corrupt",
                     dir_, t.name, p.file, p.fnv1a64, piece_checksum(bytes));
  }
  return bytes;
}

Result<std::string> CheckpointReader::read_shard(const std::string& name, const ir::Shape& expected,
                                                 const ir::Sharding& sharding, const config::Mesh& mesh,
                                                 int64_t device, const ShardReadOptions& options) const {
  const SavedTensor* t = find(name);
  if (t == nullptr) return failed_precondition("checkpoint {}: tensor {} is missing (a different model?)", dir_, name);
  if (t->shape.dims() != expected.dims() || t->shape.dtype() != expected.dtype()) {
    return failed_precondition("checkpoint {}: tensor {} is {} but this run needs {} (a different model config?)", dir_,
                               name, t->shape.to_string(), expected.to_string());
  }
  KILN_RETURN_IF_ERROR(check_sharding(name, expected.dims(), sharding, mesh));
  if (device < 0 || device >= mesh.num_devices()) {
    return invalid_argument("tensor {}: device {} is not in the mesh ({} devices)", name, device, mesh.num_devices());
  }
  const int elem = ir::dtype_size(expected.dtype());
  const Region want = shard_region(expected.dims(), sharding, mesh, device);
  std::string out(static_cast<size_t>(want.num_elements() * elem), '\0');
  for (const SavedPiece& p : t->pieces) {
    bool overlaps = true;
    for (size_t d = 0; d < want.dims.size(); ++d) {
      overlaps &= p.region.offset[d] < want.offset[d] + want.dims[d] && want.offset[d] < p.region.offset[d] + p.region.dims[d];
    }
    if (!overlaps) continue;
    // A piece of one block or less is read whole and checked: a partial read saves little.
    const bool small = p.region.num_elements() * elem <= kChecksumBlockBytes;
    if (options.partial_reads && !small && !region_contains(want, p.region)) {
      KILN_ASSIGN_OR_RETURN(auto found, piece_entry(*t, p));
      const uint64_t at = found.first->data_start + found.second->begin;
      // With block checksums only the blocks the shard touches are read, each checked; a
      // checkpoint written before them reads just the shard's bytes, unchecked.
      Result<int64_t> read =
          p.block_fnv1a64.empty()
              ? read_block_into(found.first->path, at, p.region, out, want, elem, "tensor " + name)
              : read_block_checked(found.first->path, at, p.region, out, want, elem,
                                   fmt::format("tensor {} in {}", name, p.file), kChecksumBlockBytes, p.block_fnv1a64);
      if (!read.ok()) return Status(read.status().code(), fmt::format("checkpoint {}: {}", dir_, read.status().message()));
      continue;
    }
    KILN_ASSIGN_OR_RETURN(std::string bytes, read_piece(*t, p));
    copy_overlap(bytes, p.region, out, want, elem);
  }
  return out;
}

Result<ir::Literal> CheckpointReader::read_global(const std::string& name) const {
  const SavedTensor* t = find(name);
  if (t == nullptr) return not_found("checkpoint {}: no tensor {}", dir_, name);
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_shard(name, t->shape, ir::Sharding{}, single_device_mesh(), 0));
  return literal_from_bytes(t->shape, bytes);
}

Result<CheckpointState> load(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(CheckpointReader r, CheckpointReader::open(dir));
  CheckpointState state;
  state.step = r.step();
  state.config_yaml = r.config_yaml();
  state.data_iterator = r.data_iterator();
  state.rng = r.rng();
  for (const SavedTensor& t : r.tensors()) {
    StateTensor s;
    s.name = t.name;
    s.shape = t.shape;
    KILN_ASSIGN_OR_RETURN(std::string bytes, r.read_shard(t.name, t.shape, ir::Sharding{}, single_device_mesh(), 0));
    s.shards.push_back(std::move(bytes));
    state.tensors.push_back(std::move(s));
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
