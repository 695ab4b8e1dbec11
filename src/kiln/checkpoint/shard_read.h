// Reading one device's block of a stored tensor without reading the rest of it: a run
// started on an N-device mesh from a checkpoint of global tensors (kiln convert's output,
// a single-device run's) reads 1/N of each tensor per device instead of all of it.
//
// The stored piece is row-major bytes of `stored` (a region of the global tensor) at byte
// `data_offset` of `path`; the block's bytes are a set of contiguous runs of it (one per
// row of the block's innermost dimension, merged where consecutive runs are adjacent in
// both the file and the block, so a block of whole rows is one pread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/checkpoint/shard_layout.h"

namespace kiln::checkpoint {

// Fills the part of `dst` (row-major bytes of `dst_region`) that overlaps `stored` by preading
// just those bytes from `path`. Returns the number of bytes read (0: no overlap). `what`
// names the tensor in errors.
Result<int64_t> read_block_into(const std::string& path, uint64_t data_offset, const Region& stored,
                                std::string& dst, const Region& dst_region, int elem_size, const std::string& what);

// The same, reading whole checksum blocks: the piece's bytes are blocks of `block_bytes`
// (the last shorter) whose FNV-1a 64 checksums are `block_sums` (16 hex digits each); every
// block the overlap touches is read and checked before its bytes are used. A mismatch is
// DataLoss naming `what`, the block and its byte range. Returns the bytes read.
Result<int64_t> read_block_checked(const std::string& path, uint64_t data_offset, const Region& stored,
                                   std::string& dst, const Region& dst_region, int elem_size, const std::string& what,
                                   int64_t block_bytes, const std::vector<std::string>& block_sums);

// True when `inner` lies entirely within `outer`.
bool region_contains(const Region& outer, const Region& inner);

}  // namespace kiln::checkpoint
