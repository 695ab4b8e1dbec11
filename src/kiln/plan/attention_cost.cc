#include "kiln/plan/attention_cost.h"

#include <algorithm>

#include "kiln/ir/opcode.h"

namespace kiln::plan {

double visited_pairs(int64_t queries, int64_t keys, bool causal, int64_t window, int64_t tile_q, int64_t tile_k) {
  if (queries <= 0 || keys <= 0 || tile_q <= 0 || tile_k <= 0) return 0;
  double pairs = 0;
  for (int64_t q0 = 0; q0 < queries; q0 += tile_q) {
    const int64_t q1 = std::min(queries, q0 + tile_q) - 1;  // the block's last query
    // The keys the block's queries may see: [lo, hi].
    const int64_t hi = causal ? std::min(keys - 1, q1) : keys - 1;
    const int64_t lo = causal && window > 0 ? std::max<int64_t>(0, q0 - window + 1) : 0;
    if (hi < lo) continue;
    const int64_t blocks = hi / tile_k - lo / tile_k + 1;
    pairs += static_cast<double>((q1 - q0 + 1) * blocks * tile_k);
  }
  return pairs;
}

std::optional<AttentionWork> attention_work(const ir::Instr& instr, int64_t tile_q, int64_t tile_k) {
  if (instr.opcode() != ir::Opcode::kAttention && instr.opcode() != ir::Opcode::kAttentionGrad) return std::nullopt;
  if (instr.num_operands() < 3) return std::nullopt;
  const ir::Shape& q = instr.operand(0)->shape();
  const ir::Shape& k = instr.operand(1)->shape();
  if (q.is_tuple() || k.is_tuple() || q.rank() != 4 || k.rank() != 4) return std::nullopt;
  AttentionWork w;
  w.op = std::string(ir::opcode_name(instr.opcode()));
  w.bf16 = q.dtype() == ir::DType::kBF16;
  w.head_dim = q.dim(3);
  const int64_t batch = q.dim(0), length = q.dim(1), heads = q.dim(2);
  w.rows = static_cast<double>(batch * length * heads);
  const bool causal = instr.attrs().get_int_or("causal", 0) != 0;
  const int64_t window = instr.attrs().get_int_or("window", 0);
  w.visited_pairs =
      static_cast<double>(batch * heads) * visited_pairs(length, k.dim(1), causal, window, tile_q, tile_k);
  return w;
}

}  // namespace kiln::plan
