// What the attention and attention_grad lowerings share: the instruction's facts (dims,
// operand slots, block sizes), the blocked layout, the mask of one (query block, key block)
// tile, and a counted loop.
//
// Layout. Query-side tensors are handled as [B, K, G, T, ...] (H = K G query heads, head
// h = kh G + g reads kv head kh, ops/attention_ops.cc), so a score tile is
// [B, K, G, bq, bk] and the per-row statistics [B, K, G, bq] are the lse's [B, H, T] layout
// already; k and v stay [B, S, K, Dh] and are sliced along S. Everything is computed in
// `acc` (f32, f64 for f64 inputs): bf16 inputs accumulate in f32, as Kiln's kernels do.
//
// Blocks. T and S are cut into blocks of kBlock rows and keys (the whole length when it is
// shorter). A last, ragged block starts at length - block instead (a dynamic_slice keeps its
// size static), so it overlaps the block before it: the forward recomputes the overlapped
// query rows (same values), and wherever a sum runs over a block the overlapped keys or rows
// are masked out (`kmin`, `qmin`: the block's nominal first index).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"

namespace kiln::backend::pjrt {
// attention_grad's entry of the table (lower_attention_grad.cc), added by
// register_attention_lowerings.
void register_attention_grad_lowering(LoweringTable& table);
}  // namespace kiln::backend::pjrt

namespace kiln::backend::pjrt::attention {

// Keys (and query rows) per block: a [B, H, 512, 512] f32 tile is 1 MiB per (batch, head).
inline constexpr int64_t kBlock = 512;
// A masked score, and the statistics of a row that sees no key.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Info {
  int64_t B = 0, T = 0, H = 0, Dh = 0, S = 0, K = 0, G = 0;
  ir::DType in = ir::DType::kF32;   // q, k, v
  ir::DType acc = ir::DType::kF32;  // accumulation and lse dtype
  double scale = 1;
  bool causal = false;
  int64_t window = 0;
  // Operand positions, -1 when absent (ops/attention_ops.cc's slots).
  int sinks = -1, q_seg = -1, kv_seg = -1, out = -1, lse = -1, dout = -1, dlse = -1;
  int64_t bq = 0, bk = 0, nq = 0, nk = 0;  // block sizes and counts
  // One tile covers everything: no loop.
  bool direct() const { return nq <= 1 && nk <= 1; }
  // Whether the last block overlaps the one before it (its overlap must be masked).
  bool ragged_q() const { return nq > 1 && T % bq != 0; }
  bool ragged_k() const { return nk > 1 && S % bk != 0; }

  std::string acc_type(std::initializer_list<int64_t> dims) const;
};
Info info_of(const ir::Instr& instr, bool grad);

// Small ops.
Val i32(Writer& w, int64_t v);  // tensor<i32> constant
Val transpose(Writer& w, const Val& x, std::initializer_list<int64_t> permutation, const std::string& type);
// dot_general at f32 (f64) precision: HIGHEST, so no backend rounds f32 operands to bf16/tf32.
Val dot(Writer& w, const Val& lhs, const Val& rhs, std::initializer_list<int64_t> lhs_batch,
        std::initializer_list<int64_t> rhs_batch, std::initializer_list<int64_t> lhs_contract,
        std::initializer_list<int64_t> rhs_contract, const std::string& type);
Val dynamic_slice(Writer& w, const Val& x, std::span<const Val> starts, std::span<const int64_t> sizes,
                  const std::string& type);
Val dynamic_update_slice(Writer& w, const Val& x, const Val& update, std::span<const Val> starts);
// x[starts...] += update (of dims `sizes`).
Val add_at(Writer& w, const Val& x, const Val& update, std::span<const Val> starts, std::span<const int64_t> sizes);
// The start of block `index` (i32) of `block` elements of `length`: min(index block, length - block).
Val block_start(Writer& w, const Val& index, int64_t block, int64_t length);

// q [B,T,H,Dh] (any float dtype) -> acc [B,K,G,T,Dh]; and back (to `dtype`).
Val heads_major(Writer& w, const Info& a, const Val& x);
Val heads_minor(Writer& w, const Info& a, const Val& x, ir::DType dtype);

// Which pairs of the tile (rows q0 + [0, bq), keys k0 + [0, bk)) may attend: causal, window,
// rows >= *qmin and keys >= *kmin where given, equal segment ids (qseg [B, bq], kvseg
// [B, bk] s32) where given. pred [B,K,G,bq,bk]; nullopt when every pair may.
std::optional<Val> tile_mask(Writer& w, const Info& a, int64_t bq, int64_t bk, const Val& q0, const Val* qmin,
                             const Val& k0, const Val* kmin, const Val* qseg, const Val* kvseg);

// S q k^T over a tile: qblk acc [B,K,G,bq,Dh], kblk acc [B,bk,K,Dh] -> acc [B,K,G,bq,bk].
Val tile_scores(Writer& w, const Info& a, const Val& qblk, const Val& kblk, int64_t bq, int64_t bk);

// Positions in a loop's carried values (-1: absent).
struct Carry {
  std::vector<Val> values;
  int add(const Val& v) {
    values.push_back(v);
    return static_cast<int>(values.size()) - 1;
  }
  int add_if(const std::optional<Val>& v) { return v ? add(*v) : -1; }
};
inline const Val* at(std::span<const Val> state, int i) { return i >= 0 ? &state[i] : nullptr; }
inline const Val* ptr(const std::optional<Val>& v) { return v ? &*v : nullptr; }

// for (i = lo; i < hi; ++i) state = body(i, state), as a stablehlo.while carrying (i, hi,
// state...). The body sees nothing from outside its region: whatever it reads must be in
// `state` (and come back unchanged), the form every XLA version exports. Bodies name their
// writer `w` too, shadowing the enclosing one on purpose: no op can land outside its region.
using LoopBody = std::function<std::vector<Val>(Writer& w, const Val& i, std::span<const Val> state)>;
std::vector<Val> counted_loop(Writer& w, const Val& lo, const Val& hi, const std::vector<Val>& state,
                              const LoopBody& body);

}  // namespace kiln::backend::pjrt::attention
