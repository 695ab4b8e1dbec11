// Valid files made by Kiln's own writers: what the fuzz targets that mutate one file of a
// set keep fixed, and what the seed corpora (make_fuzz_seeds) start from.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln::fuzz {

// A two-device checkpoint (fsdp 2: an f32 matrix split by rows, a bf16 vector replicated,
// an s32 scalar) written by checkpoint::save; returns its step directory, made once per
// process.
std::string small_checkpoint_dir();

// The files of a step directory, manifest.json first (a fuzz_checkpoint_dir input).
std::vector<std::pair<std::string, std::string>> step_dir_files(const std::string& step_dir);

}  // namespace kiln::fuzz
