// A file's bytes as a stream, read as they are or through streaming gzip (zlib) or zstd
// (libzstd) decompression, one fixed-size input buffer at a time: memory does not grow with
// the file. Concatenated gzip members and concatenated zstd frames read as one stream (what
// `cat a.gz b.gz` and `zstd -c a b` make, and what gzip/zstd themselves decompress).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/base/status.h"

namespace kiln::data {

enum class Compression { kNone, kGzip, kZstd };

const char* compression_name(Compression compression);  // "none", "gzip", "zstd"

class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to `capacity` bytes into `buffer`; 0 only at the end of the stream. Errors name the
  // file and the offset in the (compressed) file: an unreadable file, corrupt compressed
  // data, or a file that ends inside a gzip member or zstd frame (truncated).
  virtual Result<size_t> read(char* buffer, size_t capacity) = 0;
};

// Opens `path` for reading; a missing or unreadable file is an error naming it.
Result<std::unique_ptr<ByteStream>> open_byte_stream(const std::string& path, Compression compression);

}  // namespace kiln::data
