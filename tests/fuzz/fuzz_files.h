// Scratch files for the fuzz targets. Kiln's readers take paths (a user's file goes through
// open/pread/mmap), so each input is written to a file in a private scratch directory and
// the reader is given its path: the fuzzer exercises the very code a downloaded file meets.
//
// Multi-file inputs (a checkpoint step directory, a Hugging Face model directory, a token
// shard set) are one byte string cut by separator lines:
//
//   <bytes of the first file>\n--kiln-fuzz-file NAME\n<bytes of NAME>\n--kiln-fuzz-file ...
//
// NAME is reduced to [A-Za-z0-9._-] (at most 64 characters, no leading dot), so no input
// can write outside the scratch directory.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::fuzz {

inline constexpr std::string_view kFileSeparator = "\n--kiln-fuzz-file ";

// The scratch directory, emptied: $TMPDIR (or /tmp)/kiln-fuzz-<pid>/<sub>.
std::string fresh_dir(const std::string& sub);
// Writes `bytes` to dir/name and returns the path.
std::string write_file(const std::string& dir, const std::string& name, std::string_view bytes);
// Cuts an input as above; the part before the first separator is named `first_name`.
std::vector<std::pair<std::string, std::string>> split_files(std::string_view input, const std::string& first_name);
// The inverse of split_files, for seed corpora.
std::string join_files(const std::vector<std::pair<std::string, std::string>>& files);

// Reads a whole file ("" when it cannot be read).
std::string read_file(const std::string& path);

}  // namespace kiln::fuzz

// The libFuzzer entry point every target defines.
extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size);
