// What a Kiln step directory holds and how it becomes a checkpoint, shared by the one-shot
// save() (checkpoint.h) and the streaming CheckpointWriter (checkpoint_writer.h), so both
// write the same bytes: shard file names and their safetensors metadata, the manifest's
// tensor entries and top-level JSON, and the commit (fsync, then rename "<step>.tmp-<pid>"
// over "<step>", keeping an older "<step>" aside until the rename is done).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/shape.h"

namespace kiln::checkpoint {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr int kFormatVersion = 2;  // 1: one state.safetensors of global tensors (still read)

std::string shard_file(int64_t device);  // "shard-<device>.safetensors"
// The __metadata__ of a shard file: {"format": "kiln", "step", "device"}.
std::map<std::string, std::string> shard_metadata(int64_t step, int64_t device);
// FNV-1a 64 of a piece's bytes as the manifest writes it (16 hex digits).
std::string piece_checksum(std::string_view bytes);
// A piece larger than one block also has a checksum per kChecksumBlockBytes of its bytes
// (the last block shorter), so a read of part of it (a shard of a resharded restore) checks
// the blocks it touches: empty for a piece of one block or less. In the manifest as the
// piece's "block_fnv1a64".
inline constexpr int64_t kChecksumBlockBytes = int64_t{1} << 20;
std::vector<std::string> block_checksums(std::string_view bytes);

// A tensor's manifest entry {shape, dtype, sharding, pieces}; each owner's piece with an
// empty fnv1a64, filled in once its bytes are written. Sharding already checked.
nlohmann::ordered_json manifest_tensor_entry(const ir::Shape& shape, const ir::Sharding& sharding,
                                             const config::Mesh& mesh);
// The manifest's text (format, version, step, mesh, data_iterator, rng, tensors, config).
std::string manifest_text(int64_t step, const config::Mesh& mesh, const nlohmann::json& data_iterator,
                          const nlohmann::json& rng, const nlohmann::ordered_json& tensors,
                          const std::string& config_yaml);

// Creates, writes and fsyncs a small file (the manifest, a rank's note).
Status write_text_file(const std::string& path, const std::string& text);
Status fsync_path(const std::string& path, bool directory);
// Renames the finished temporary directory `tmp` (files and directory already fsynced) to
// checkpoints_dir/<step> and fsyncs checkpoints_dir. A checkpoint of the same step already
// there is moved aside first and removed only after the rename.
Status commit_step_dir(const std::string& tmp, const std::string& checkpoints_dir, int64_t step);

}  // namespace kiln::checkpoint
