// Builder: appends instructions to a computation, inferring each result shape from the op
// registry. Low-level and exact (no implicit broadcasting: that is the frontend's job);
// used by the frontend, by gradient rules and by passes that create instructions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/ir/instr.h"
#include "kiln/ops/registry.h"

namespace kiln::ops {

using ir::DType;
using ir::Instr;
using ir::Opcode;
using ir::Shape;

class Builder {
 public:
  explicit Builder(ir::Computation* computation) : comp_(computation) {}
  ir::Computation* computation() const { return comp_; }

  // Metadata stamped on every instruction created from now on (empty: none).
  void set_name(std::string name) { name_ = std::move(name); }
  void set_loc(std::string loc) { loc_ = std::move(loc); }
  const std::string& name() const { return name_; }

  // Generic: a shape error is an invariant violation here (aborts with the message).
  Instr* emit(Opcode opcode, std::vector<Instr*> operands, ir::Attrs attrs = {},
              std::optional<Shape> declared = std::nullopt);
  // Same, returning the shape error instead (for user-facing construction).
  Result<Instr*> try_emit(Opcode opcode, std::vector<Instr*> operands, ir::Attrs attrs = {},
                          std::optional<Shape> declared = std::nullopt);

  // Sources.
  Instr* parameter(int index, Shape shape, std::string name = "");
  Instr* constant(ir::Literal literal);
  Instr* scalar(DType dtype, double value);
  Instr* full(Shape shape, double value);  // broadcast of a scalar constant
  Instr* zeros(Shape shape) { return full(std::move(shape), 0.0); }
  Instr* zeros_like(const Instr* x) { return zeros(x->shape()); }
  Instr* iota(Shape shape, int64_t dim);
  // distribution: "uniform" in [0,1), "normal" (standard), "truncated_normal" (standard,
  // truncated to [-2, 2]). Counter-based: element i is a function of (seed, i) alone.
  Instr* rng(Shape shape, const std::string& distribution, int64_t seed);

  // Elementwise (operands must have equal shapes; scalars are not broadcast here).
  Instr* unary(Opcode opcode, Instr* x);
  Instr* binary(Opcode opcode, Instr* a, Instr* b);
  Instr* add(Instr* a, Instr* b) { return binary(Opcode::kAdd, a, b); }
  Instr* sub(Instr* a, Instr* b) { return binary(Opcode::kSub, a, b); }
  Instr* mul(Instr* a, Instr* b) { return binary(Opcode::kMul, a, b); }
  Instr* div(Instr* a, Instr* b) { return binary(Opcode::kDiv, a, b); }
  Instr* max(Instr* a, Instr* b) { return binary(Opcode::kMax, a, b); }
  Instr* min(Instr* a, Instr* b) { return binary(Opcode::kMin, a, b); }
  Instr* neg(Instr* x) { return unary(Opcode::kNeg, x); }
  Instr* exp(Instr* x) { return unary(Opcode::kExp, x); }
  Instr* log(Instr* x) { return unary(Opcode::kLog, x); }
  Instr* compare(Instr* a, Instr* b, const std::string& direction);  // eq ne lt le gt ge
  Instr* select(Instr* pred, Instr* on_true, Instr* on_false);
  Instr* clamp(Instr* lo, Instr* x, Instr* hi);
  Instr* convert(Instr* x, DType dtype);
  // x (op) scalar constant, broadcast to x's shape.
  Instr* mul_scalar(Instr* x, double value);
  Instr* add_scalar(Instr* x, double value);

  // Shapes and data movement.
  // Operand dimension i becomes result dimension dims[i] (size equal, or 1 to expand).
  Instr* broadcast(Instr* x, std::vector<int64_t> result_dims, std::vector<int64_t> dims);
  Instr* reshape(Instr* x, std::vector<int64_t> dims);
  Instr* transpose(Instr* x, std::vector<int64_t> perm);  // result dim i = operand dim perm[i]
  Instr* slice(Instr* x, std::vector<int64_t> start, std::vector<int64_t> limit,
               std::vector<int64_t> strides = {});
  Instr* pad(Instr* x, Instr* value, std::vector<int64_t> low, std::vector<int64_t> high,
             std::vector<int64_t> interior = {});
  Instr* concatenate(std::vector<Instr*> xs, int64_t dim);
  Instr* dynamic_slice(Instr* x, std::vector<Instr*> starts, std::vector<int64_t> sizes);
  Instr* dynamic_update_slice(Instr* x, Instr* update, std::vector<Instr*> starts);

  // Reductions over `dims` (removed from the result).
  Instr* reduce(Opcode opcode, Instr* x, std::vector<int64_t> dims);
  Instr* reduce_sum(Instr* x, std::vector<int64_t> dims) { return reduce(Opcode::kReduceSum, x, std::move(dims)); }

  // Result dims: batch, then lhs free dims, then rhs free dims (each in operand order).
  Instr* dot_general(Instr* lhs, Instr* rhs, std::vector<int64_t> lhs_batch, std::vector<int64_t> rhs_batch,
                     std::vector<int64_t> lhs_contract, std::vector<int64_t> rhs_contract,
                     std::optional<DType> result_dtype = std::nullopt);

  // gather(x, idx, axis, batch_dims): result = x.dims[:axis] + idx.dims[batch_dims:] +
  // x.dims[axis+1:], taking x along `axis` at idx (the first batch_dims dims of x and idx
  // are shared batch dimensions). Out-of-range indices are clamped.
  Instr* gather(Instr* x, Instr* indices, int64_t axis, int64_t batch_dims = 0);
  // The adjoint of gather: adds `updates` (shaped like the gather result) into x at the
  // gathered positions; out-of-range indices are skipped.
  Instr* scatter_add(Instr* x, Instr* indices, Instr* updates, int64_t axis, int64_t batch_dims = 0);

  // Along the last dimension. Each returns a tuple (values, s32 indices); stable (ties keep
  // index order).
  Instr* sort(Instr* x, bool descending);
  Instr* topk(Instr* x, int64_t k);

  // Fused attention (ops/attention_ops.cc): q [B,T,H,Dh], k and v [B,S,K,Dh], optional sinks [H]
  // and s32 segment ids [B,T] / [B,S] (null when absent) -> tuple (out [B,T,H,Dh], lse [B,H,T]
  // f32). Query i sees key j when (!causal or j <= i), (window == 0 or j > i - window: window
  // keys including self) and the segments match; the sink s_h is one more logit in every
  // row's softmax whose probability is dropped. Query head h reads kv head h / (H/K).
  Instr* attention(Instr* q, Instr* k, Instr* v, Instr* sinks, Instr* q_segment, Instr* kv_segment, double scale,
                   bool causal, int64_t window);

  // Ragged per-group products (ops/grouped_matmul_ops.cc): x [M, K] rows group after group
  // (s32 group_sizes [G]) times w [G, K, N] ([G, N, K] with transpose_rhs) -> [M, N]; and
  // the per-group weight gradient x_g^T dy_g -> [G, K, N].
  Instr* grouped_matmul(Instr* x, Instr* w, Instr* group_sizes, bool transpose_rhs = false);
  Instr* grouped_matmul_weight_grad(Instr* x, Instr* dy, Instr* group_sizes);

  Instr* tuple(std::vector<Instr*> xs);
  Instr* get_tuple_element(Instr* t, int64_t index);

 private:
  ir::Computation* comp_;
  std::string name_;
  std::string loc_;
};

// What a gradient rule sees. dout() is the gradient of the instruction's (array) result;
// dout(i) the gradient of element i of a tuple result, materialized as zeros if no
// gradient reached it.
struct VjpContext {
  Builder& b;
  Instr* instr;                    // the forward instruction
  std::vector<Instr*> douts;       // one per tuple element (size 1 for arrays); may hold nullptr

  Instr* operand(int i) const { return instr->operand(i); }
  Instr* dout(int i = 0);
};

}  // namespace kiln::ops
