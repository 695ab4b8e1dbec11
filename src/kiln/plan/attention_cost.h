// Flash attention's work as its tiles see it, for a target that times its attention kernels
// by what they visit (Target::attention, from `kiln plan --calibrate`'s attention sweep).
//
//   attention(q [B,T,H,Dh], k, v [B,S,K,Dh], ...) and attention_grad (the same operands
//   first), attrs causal and window W (ops/attention_ops.cc).
//
// A flash kernel walks, per (batch, query head), blocks of tile_q queries and, per block,
// every block of tile_k keys that holds a key one of the block's queries may see. A visited
// tile costs all its columns whatever the mask (a partial key block is padded), so a window
// shorter than a tile, or a short sequence, costs more per allowed pair than a long one; and
// each query row pays for its softmax statistics and output however many keys it sees.
// Hence the two terms the calibration fits: rows (B T H) and visited pairs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/ir/instr.h"

namespace kiln::plan {

struct AttentionWork {
  std::string op;         // "attention" or "attention_grad"
  bool bf16 = false;      // q's dtype
  int64_t head_dim = 0;   // Dh
  double rows = 0;        // query rows: B * T * H
  double visited_pairs = 0;  // (query, key) pairs of the visited tiles, over B and H
};

// Pairs of the tiles a flash kernel visits for one (batch, head): `queries` x `keys`, query i
// seeing key j when (not causal or j <= i) and (window == 0 or j > i - window).
double visited_pairs(int64_t queries, int64_t keys, bool causal, int64_t window, int64_t tile_q, int64_t tile_k);

// The work of an attention or attention_grad instruction; nullopt for any other.
std::optional<AttentionWork> attention_work(const ir::Instr& instr, int64_t tile_q, int64_t tile_k);

}  // namespace kiln::plan
