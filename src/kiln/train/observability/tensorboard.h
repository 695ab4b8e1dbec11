// TensorBoard event files, written by hand: TFRecord framing around `Event` protobufs.
//
// File: {dir}/events.out.tfevents.{unix seconds}.{hostname}, the name TensorBoard globs for.
// Record (TFRecord, little-endian):
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
//   masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 over CRC-32C (Castagnoli).
// Data: tensorflow.Event (tensorflow/core/util/event.proto), of which we write
//   1 wall_time double (fixed64) | 2 step int64 (varint) | 3 file_version string ("brain.Event:2",
//   first record only) | 5 summary Summary { repeated Value value = 1 { 1 tag string,
//   2 simple_value float (fixed32) } } | 7 session_log SessionLog { 1 status enum (START = 1) }
// A run that resumes at step S into a directory that already holds event files writes a
// SessionLog START at step S: TensorBoard then discards the earlier files' events at steps
// >= S (an attempt past the restored checkpoint), so the curve stays one curve.
// Why by hand rather than libprotobuf-generated code: the schema subset is five fields, the
// encoder is ~40 lines, and the trainer then needs no protoc at build time nor the
// TensorFlow .proto files in the tree. The test reads the files back with Debian's
// python3-protobuf and a .proto of the published schema (tests/reference/), so the encoder
// is checked by an independent implementation.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::train {

uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

// One Event record's protobuf bytes (exposed for tests).
struct Scalar {
  std::string tag;
  float value = 0;
};
std::string encode_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars,
                         std::string_view file_version = "");
// An Event holding only SessionLog{status: START} at `step`.
std::string encode_session_start(double wall_time, int64_t step);
// TFRecord framing of one record.
std::string frame_record(std::string_view data);

class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // Creates `dir` and a new event file in it, writes the file_version record.
  Status open(const std::string& dir);
  // Buffers one Event with these scalars at `step` (wall time: now).
  Status add(int64_t step, const std::vector<Scalar>& scalars);
  // Marks a restart at `step` (SessionLog START): readers drop earlier events at steps >= it.
  Status add_session_start(int64_t step);
  // Whether the directory held other event files when this one was opened (a restart).
  bool continues_earlier_files() const { return earlier_files_; }
  Status flush();
  void close();
  bool is_open() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  Status write_record(const std::string& data);
  std::FILE* file_ = nullptr;
  std::string path_;
  bool earlier_files_ = false;
};

}  // namespace kiln::train
