// safetensors files (the format Hugging Face and Kiln checkpoints use): an 8-byte
// little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}
// (plus an optional "__metadata__" object of strings), then the tensors' raw little-endian
// bytes, in header order, with no gaps. Handled dtypes: F32, BF16, F64, I32 (s32), U32.
//
//   KILN_RETURN_IF_ERROR(write_safetensors(path, {{"params/x", &x}}, {{"step", "10"}}));
//   KILN_ASSIGN_OR_RETURN(SafetensorsFile f, read_safetensors(path));
//
// A truncated or corrupt file is a one-line data_loss error naming the file and tensor.
#pragma once

#include <cstdint>
#include <map>
#include <string>
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

// Writes the tensors in the given order, fsyncs the file. I/O errors (a full disk) are
// an error naming the file; a partially written file is removed.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});
Result<SafetensorsFile> read_safetensors(const std::string& path);

}  // namespace kiln::checkpoint
