// A Hugging Face model directory read one tensor at a time: the streaming half of
// `kiln convert --from hf` (apps/cmd_convert.cc), whose peak memory is one Kiln tensor plus
// a bounded read buffer instead of the whole model as float64 literals.
//
//   KILN_ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(dir));      // headers only
//   KILN_ASSIGN_OR_RETURN(auto plan, plan_gpt_oss_from_hf(hf.shapes(), heads));
//   for (const KilnFromHf& t : plan) { KILN_ASSIGN_OR_RETURN(std::string bytes, hf.produce(t)); ... }
//
// open() reads model.safetensors.index.json (or takes model.safetensors alone) and every
// file's header, and checks them against each other, so a missing file, a tensor the index
// names but its file lacks, a tensor in two files or half an MXFP4 pair fails before
// anything is converted, with one line naming the file and tensor. produce() preads only its
// source's byte ranges, kChunkBytes of them at a time, and transforms them in their dtype
// (bf16 stays 2 bytes; MXFP4 blocks are dequantized chunk by chunk straight into the
// output), giving the bytes gpt_oss_from_hf + literal_bytes would (NaN payloads excepted:
// they are kept here, where the float64 route may quiet them).
#pragma once

#include <atomic>
#include <memory>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/checkpoint/shard_layout.h"

namespace kiln::checkpoint {

// Source bytes read at once by produce() beyond the output tensor (at least one row).
inline constexpr int64_t kHfImportChunkBytes = int64_t{16} << 20;

class HfCheckpoint {
 public:
  static Result<HfCheckpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const HfShapes& shapes() const { return shapes_; }
  int64_t file_bytes() const { return file_bytes_; }  // all the safetensors files' sizes

  // One planned Kiln tensor's bytes (row-major, little-endian, in t.shape's dtype).
  Result<std::string> produce(const KilnFromHf& t) const;
  // The bytes of `block` (a region of t.shape) alone, as copy_overlap would cut them from
  // produce(t): only the source rows the block touches are read, kHfImportChunkBytes at a
  // time (MXFP4: one expert's rows at a time), so the process holds the block and one chunk,
  // never the whole tensor; of each row, only the band of columns it needs when that is at
  // most half the row (a transposed tensor split along the source's columns).
  Result<std::string> produce_block(const KilnFromHf& t, const Region& block) const;
  // Bytes of plain (not MXFP4) tensor data produce_block has read so far, from every thread.
  int64_t block_bytes_read() const { return bytes_read_->load(); }

 private:
  // Where a tensor's bytes lie: one file entry, or for MXFP4 its blocks and scales.
  struct Location {
    const SafetensorsIndex* file = nullptr;
    std::string key;
    const SafetensorsIndex* scales_file = nullptr;  // MXFP4 only
    std::string scales_key;
  };
  Result<std::string> produce_plain(const KilnFromHf& t, const Location& at) const;
  Result<std::string> produce_mxfp4(const KilnFromHf& t, const Location& at) const;
  Result<std::string> produce_mxfp4_block(const KilnFromHf& t, const Location& at, const Region& block) const;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsIndex>> files_;  // stable addresses for Location
  std::map<std::string, Location> where_;
  HfShapes shapes_;
  int64_t file_bytes_ = 0;
  std::shared_ptr<std::atomic<int64_t>> bytes_read_ = std::make_shared<std::atomic<int64_t>>(0);
};

// Everything `kiln convert --from hf` reads and checks before it writes anything:
// config.json, every safetensors file's header, the planned Kiln tensors and the Kiln
// config they make. Any malformed or missing piece is one error naming the file.
struct HfImportPlan {
  nlohmann::json config;  // config.json
  HfCheckpoint checkpoint;
  std::vector<KilnFromHf> tensors;  // in writing order
  std::string config_yaml;          // the model's Kiln config
};
Result<HfImportPlan> plan_hf_import(const std::string& dir);

// A directory in the Hugging Face layout: config.json beside model.safetensors.index.json
// or model.safetensors (what load_parameters_path accepts besides a Kiln checkpoint).
bool is_hf_dir(const std::string& dir);

}  // namespace kiln::checkpoint
