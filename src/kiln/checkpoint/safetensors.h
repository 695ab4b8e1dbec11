// safetensors files (the format Hugging Face and Kiln checkpoints use): an 8-byte
// little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}
// (plus an optional "__metadata__" object of strings), then the tensors' raw little-endian
// bytes, in header order, with no gaps. Handled dtypes: F32, BF16, F64, I32 (s32), U32.
//
//   KILN_RETURN_IF_ERROR(write_safetensors(path, {{"params/x", &x}}, {{"step", "10"}}));
//   KILN_ASSIGN_OR_RETURN(SafetensorsFile f, read_safetensors(path));
//
// Sharded checkpoints and MXFP4 import read single tensors as raw bytes through an index of
// the header (index_safetensors + read_tensor_bytes), so a reader touches only the tensors it
// needs and any dtype the format names (U8 too) can be read.
//
// A truncated or corrupt file is a one-line data_loss error naming the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/literal.h"

namespace kiln::checkpoint {

// "F32", "BF16", "F64", "I32", "U32" (nullopt-like empty string for pred).
std::string safetensors_dtype(ir::DType dtype);
Result<ir::DType> parse_safetensors_dtype(const std::string& name);

// A literal's elements as raw little-endian bytes in its dtype, and back.
std::string literal_bytes(const ir::Literal& literal);
Result<ir::Literal> literal_from_bytes(const ir::Shape& shape, const std::string& bytes);

struct SafetensorsFile {
  std::vector<std::string> names;           // in file order
  std::map<std::string, ir::Literal> tensors;
  std::map<std::string, std::string> metadata;
};

using NamedTensor = std::pair<std::string, const ir::Literal*>;

// One tensor's header entry: dtype as the file names it ("F32", "U8", ...), its dims and
// its byte range within the data section.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> dims;
  uint64_t begin = 0, end = 0;
};
struct SafetensorsIndex {
  std::string path;
  uint64_t data_start = 0;          // 8 + header length
  std::vector<std::string> names;   // in data order
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
// A tensor as raw little-endian bytes in the named safetensors dtype.
struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", "U8", ...
  std::vector<int64_t> dims;
  const std::string* bytes = nullptr;
};

// Bytes per element of a safetensors dtype name (F64 F32 BF16 F16 I64 I32 U32 I16 U16 I8 U8
// BOOL), 0 when unknown.
int safetensors_dtype_size(const std::string& name);
// Reads and checks the header only (offsets against the file size, no overlaps).
Result<SafetensorsIndex> index_safetensors(const std::string& path);
// One tensor's raw bytes, read from the file at its offsets.
Result<std::string> read_tensor_bytes(const SafetensorsIndex& index, const std::string& name);
Status write_safetensors_raw(const std::string& path, const std::vector<RawTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});
// The bytes a file holding `tensors` (in this order) starts with: the 8-byte length and the
// padded JSON header, the offsets computed from dtypes and dims alone (`bytes` may be null).
// write_safetensors_raw writes exactly this, so a writer that streams the tensors' data
// after it (CheckpointWriter) makes the same file.
Result<std::string> safetensors_header(const std::string& path, const std::vector<RawTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata = {});

// Low-level I/O for the streaming readers and writers: all of `data`, retrying short writes
// and EINTR; exactly `size` bytes at `offset` (end of file: data_loss naming `what`).
Status write_fd_all(int fd, std::string_view data, const std::string& path);
Status pread_fd_all(int fd, char* out, size_t size, uint64_t offset, const std::string& path, const std::string& what);

// Writes the tensors in the given order, fsyncs the file. I/O errors (a full disk) are
// an error naming the file; a partially written file is removed.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});
Result<SafetensorsFile> read_safetensors(const std::string& path);

}  // namespace kiln::checkpoint
