// Contractions: dot_general, the one matrix-product primitive (XLA's DotGeneral).
//
//   dot_general(lhs, rhs), lhs_batch={..}, rhs_batch={..}, lhs_contract={..}, rhs_contract={..}
//   result dims = batch dims (lhs_batch order), lhs free dims, rhs free dims (operand order)
//
// Batch lists pair up element by element (equal sizes), contract lists likewise. The result
// dtype is the operands' dtype, or a declared floating dtype of the same dims (bf16 x bf16
// -> f32, JAX's preferred_element_type). The reference evaluation accumulates in double.
#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/ops/op_helpers.h"

namespace kiln::ops {
namespace {

using internal::check_array;
using internal::same_size_dims;
using internal::check_dims;

// The four dimension lists of a dot_general and the sizes they imply.
struct DotDims {
  std::vector<int64_t> lhs_batch, rhs_batch, lhs_contract, rhs_contract;
  std::vector<int64_t> lhs_free, rhs_free;  // the remaining dims, ascending
};

std::vector<int64_t> free_dims(int rank, const std::vector<int64_t>& batch, const std::vector<int64_t>& contract) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
        std::find(contract.begin(), contract.end(), d) == contract.end()) {
      out.push_back(d);
    }
  }
  return out;
}

DotDims dot_dims(const ir::Attrs& attrs, int lhs_rank, int rhs_rank) {
  DotDims d;
  d.lhs_batch = attrs.get_ints("lhs_batch");
  d.rhs_batch = attrs.get_ints("rhs_batch");
  d.lhs_contract = attrs.get_ints("lhs_contract");
  d.rhs_contract = attrs.get_ints("rhs_contract");
  d.lhs_free = free_dims(lhs_rank, d.lhs_batch, d.lhs_contract);
  d.rhs_free = free_dims(rhs_rank, d.rhs_batch, d.rhs_contract);
  return d;
}

std::vector<int64_t> concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The inverse of a permutation: when dim i of x stands for dim order[i] of some operand,
// transpose(x, argsort(order)) puts those dims back in the operand's order.
std::vector<int64_t> argsort(const std::vector<int64_t>& order) {
  std::vector<int64_t> perm(order.size());
  for (size_t i = 0; i < order.size(); ++i) perm[order[i]] = static_cast<int64_t>(i);
  return perm;
}

int64_t product(const ir::Shape& s, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= s.dim(static_cast<int>(d));
  return n;
}

// ---- shape rule ----

Result<Shape> infer_dot(const InferContext& ctx) {
  const Shape& lhs = ctx.operands[0];
  const Shape& rhs = ctx.operands[1];
  KILN_RETURN_IF_ERROR(check_array("dot_general", lhs));
  KILN_RETURN_IF_ERROR(check_array("dot_general", rhs));
  if (lhs.dtype() != rhs.dtype()) {
    return invalid_argument("dot_general operands must share a dtype, got lhs {} and rhs {} (convert one first)",
                            lhs.to_string(), rhs.to_string());
  }
  if (lhs.dtype() == DType::kPred) return invalid_argument("dot_general needs numeric operands, got {}", lhs.to_string());
  DotDims d = dot_dims(ctx.attrs, lhs.rank(), rhs.rank());
  KILN_RETURN_IF_ERROR(check_dims("dot_general", "lhs_batch + lhs_contract", concat(d.lhs_batch, d.lhs_contract), lhs.rank()));
  KILN_RETURN_IF_ERROR(check_dims("dot_general", "rhs_batch + rhs_contract", concat(d.rhs_batch, d.rhs_contract), rhs.rank()));
  if (d.lhs_batch.size() != d.rhs_batch.size()) {
    return invalid_argument("dot_general lhs_batch {} and rhs_batch {} must have the same length",
                            ir::dims_to_string(d.lhs_batch), ir::dims_to_string(d.rhs_batch));
  }
  if (d.lhs_contract.size() != d.rhs_contract.size()) {
    return invalid_argument("dot_general lhs_contract {} and rhs_contract {} must have the same length",
                            ir::dims_to_string(d.lhs_contract), ir::dims_to_string(d.rhs_contract));
  }
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    int64_t a = lhs.dim(static_cast<int>(d.lhs_batch[i])), b = rhs.dim(static_cast<int>(d.rhs_batch[i]));
    if (a != b) {
      return invalid_argument("dot_general batch sizes differ: lhs dim {} is {} but rhs dim {} is {} (lhs {}, rhs {})",
                              d.lhs_batch[i], a, d.rhs_batch[i], b, lhs.to_string(), rhs.to_string());
    }
  }
  for (size_t i = 0; i < d.lhs_contract.size(); ++i) {
    int64_t a = lhs.dim(static_cast<int>(d.lhs_contract[i])), b = rhs.dim(static_cast<int>(d.rhs_contract[i]));
    if (a != b) {
      return invalid_argument("dot_general contracted sizes differ: lhs dim {} is {} but rhs dim {} is {} (lhs {}, rhs {})",
                              d.lhs_contract[i], a, d.rhs_contract[i], b, lhs.to_string(), rhs.to_string());
    }
  }
  std::vector<int64_t> dims;
  for (int64_t x : d.lhs_batch) dims.push_back(lhs.dim(static_cast<int>(x)));
  for (int64_t x : d.lhs_free) dims.push_back(lhs.dim(static_cast<int>(x)));
  for (int64_t x : d.rhs_free) dims.push_back(rhs.dim(static_cast<int>(x)));
  return internal::declared_float_result(ctx, Shape(lhs.dtype(), std::move(dims)), "dot_general");
}

// ---- reference evaluation ----

// x's values with its dims permuted: result dim i is operand dim perm[i] (row-major).
std::vector<double> permuted_values(const ir::Literal& x, const std::vector<int64_t>& perm) {
  const std::vector<int64_t>& dims = x.shape().dims();
  int64_t total = x.shape().num_elements();
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity || total <= 1) return x.values();
  std::vector<int64_t> strides = ir::row_major_strides(dims);
  int r = static_cast<int>(perm.size());
  std::vector<int64_t> out_dims(r), src_strides(r);
  for (int i = 0; i < r; ++i) {
    out_dims[i] = dims[perm[i]];
    src_strides[i] = strides[perm[i]];
  }
  std::vector<double> out(total);
  const double* src = x.values().data();
  int64_t inner = out_dims[r - 1], inner_stride = src_strides[r - 1];
  std::vector<int64_t> index(r, 0);
  int64_t offset = 0;
  for (int64_t o = 0; o < total; o += inner) {
    const double* s = src + offset;
    double* d = out.data() + o;
    for (int64_t j = 0; j < inner; ++j) d[j] = s[j * inner_stride];
    for (int i = r - 2; i >= 0; --i) {  // odometer over the outer dims
      offset += src_strides[i];
      if (++index[i] < out_dims[i]) break;
      offset -= src_strides[i] * out_dims[i];
      index[i] = 0;
    }
  }
  return out;
}

// Reorganizes to [B, M, K] x [B, K, N] and multiplies with a contiguous inner loop over N.
ir::Literal eval_dot(const Instr& instr, std::span<const ir::Literal* const> args) {
  const ir::Literal& lhs = *args[0];
  const ir::Literal& rhs = *args[1];
  DotDims d = dot_dims(instr.attrs(), lhs.shape().rank(), rhs.shape().rank());
  int64_t B = product(lhs.shape(), d.lhs_batch);
  int64_t M = product(lhs.shape(), d.lhs_free);
  int64_t K = product(lhs.shape(), d.lhs_contract);
  int64_t N = product(rhs.shape(), d.rhs_free);
  std::vector<double> a = permuted_values(lhs, concat(concat(d.lhs_batch, d.lhs_free), d.lhs_contract));
  std::vector<double> b = permuted_values(rhs, concat(concat(d.rhs_batch, d.rhs_contract), d.rhs_free));
  std::vector<double> out(B * M * N, 0.0);
  for (int64_t bi = 0; bi < B; ++bi) {
    for (int64_t m = 0; m < M; ++m) {
      double* o = out.data() + (bi * M + m) * N;
      const double* arow = a.data() + (bi * M + m) * K;
      for (int64_t k = 0; k < K; ++k) {
        double av = arow[k];
        const double* brow = b.data() + (bi * K + k) * N;
        for (int64_t n = 0; n < N; ++n) o[n] += av * brow[n];
      }
    }
  }
  return ir::Literal(instr.shape(), std::move(out));
}

// ---- gradient rule ----

DType wider(DType a, DType b) { return ir::dtype_size(a) >= ir::dtype_size(b) ? a : b; }

// Gradient of one operand ("this") of dot_general, as JAX's _dot_general_transpose_lhs:
// contract g's dims that came from the other operand's free dims with those free dims,
// keep the batch dims as batch; the product's dims are [batch, this free, this contract
// (ordered by the other's contract dims)], transposed back to this operand's dim order.
// `other_free_in_g` are the positions of the other operand's free dims in g.
Instr* dot_operand_grad(Builder& b, Instr* g, Instr* self, Instr* other, const std::vector<int64_t>& self_batch,
                        const std::vector<int64_t>& self_contract, const std::vector<int64_t>& self_free,
                        const std::vector<int64_t>& other_batch, const std::vector<int64_t>& other_contract,
                        const std::vector<int64_t>& other_free, const std::vector<int64_t>& other_free_in_g) {
  DType self_dtype = self->shape().dtype();
  // Compute in the wider of the two dtypes (bf16 operands upcast exactly to an f32 g).
  DType compute = wider(g->shape().dtype(), self_dtype);
  Instr* gc = b.convert(g, compute);
  Instr* oc = b.convert(other, compute);
  std::vector<int64_t> g_batch = internal::iota_vector(static_cast<int64_t>(self_batch.size()));
  Instr* prod = b.dot_general(gc, oc, g_batch, other_batch, other_free_in_g, other_free);
  // The product's trailing dims are the other's contract dims in ascending order; the
  // matching dims of self are self_contract sorted by other_contract.
  std::vector<int64_t> order_by_other = internal::iota_vector(static_cast<int64_t>(other_contract.size()));
  std::sort(order_by_other.begin(), order_by_other.end(),
            [&](int64_t x, int64_t y) { return other_contract[x] < other_contract[y]; });
  std::vector<int64_t> self_contract_sorted;
  for (int64_t i : order_by_other) self_contract_sorted.push_back(self_contract[i]);
  std::vector<int64_t> order = concat(concat(self_batch, self_free), self_contract_sorted);
  Instr* grad = b.transpose(prod, argsort(order));
  return b.convert(grad, self_dtype);
}

std::vector<Instr*> vjp_dot(VjpContext& c) {
  Instr* lhs = c.operand(0);
  Instr* rhs = c.operand(1);
  if (!ir::is_floating(lhs->shape().dtype())) return {nullptr, nullptr};
  DotDims d = dot_dims(c.instr->attrs(), lhs->shape().rank(), rhs->shape().rank());
  int64_t nb = static_cast<int64_t>(d.lhs_batch.size());
  int64_t nlf = static_cast<int64_t>(d.lhs_free.size());
  int64_t nrf = static_cast<int64_t>(d.rhs_free.size());
  std::vector<int64_t> lhs_free_in_g, rhs_free_in_g;
  for (int64_t i = 0; i < nlf; ++i) lhs_free_in_g.push_back(nb + i);
  for (int64_t i = 0; i < nrf; ++i) rhs_free_in_g.push_back(nb + nlf + i);
  Instr* g = c.dout();
  Instr* dlhs = dot_operand_grad(c.b, g, lhs, rhs, d.lhs_batch, d.lhs_contract, d.lhs_free, d.rhs_batch,
                                 d.rhs_contract, d.rhs_free, rhs_free_in_g);
  Instr* drhs = dot_operand_grad(c.b, g, rhs, lhs, d.rhs_batch, d.rhs_contract, d.rhs_free, d.lhs_batch,
                                 d.lhs_contract, d.lhs_free, lhs_free_in_g);
  return {dlhs, drhs};
}

// ---- sharding rule and cost ----

std::vector<std::vector<int>> dot_dim_map(const Instr& instr) {
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  DotDims d = dot_dims(instr.attrs(), lhs.rank(), rhs.rank());
  std::vector<int> lm(lhs.rank(), -1), rm(rhs.rank(), -1);
  int pos = 0;
  for (size_t i = 0; i < d.lhs_batch.size(); ++i, ++pos) {
    lm[d.lhs_batch[i]] = pos;
    rm[d.rhs_batch[i]] = pos;
  }
  for (int64_t x : d.lhs_free) lm[x] = pos++;
  for (int64_t x : d.rhs_free) rm[x] = pos++;
  return {lm, rm};
}

Cost dot_cost(const Instr& instr) {
  Cost c = internal::memory_cost(instr);
  const Shape& lhs = instr.operand(0)->shape();
  const Shape& rhs = instr.operand(1)->shape();
  DotDims d = dot_dims(instr.attrs(), lhs.rank(), rhs.rank());
  c.flops = 2.0 * static_cast<double>(product(lhs, d.lhs_batch)) * static_cast<double>(product(lhs, d.lhs_free)) *
            static_cast<double>(product(rhs, d.rhs_free)) * static_cast<double>(product(lhs, d.lhs_contract));
  return c;
}

// ---- examples ----

std::string dot_example(const std::string& lhs, const std::string& rhs, const std::string& out, const std::string& attrs) {
  return fmt::format(
      "module @ex\n\nENTRY computation @main {{\n"
      "  %a = {} parameter(), index=0\n"
      "  %b = {} parameter(), index=1\n"
      "  ROOT %d = {} dot_general(%a, %b), {}\n}}\n",
      lhs, rhs, out, attrs);
}

std::vector<OpExample> dot_examples() {
  return {
      // matmul [m,k] x [k,n]
      {dot_example("f32[2,3]", "f32[3,4]", "f32[2,4]", "lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}")},
      // x @ W^T: [m,k] x [n,k]
      {dot_example("f32[3,4]", "f32[2,4]", "f32[3,2]", "lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}")},
      // batched matmul [b,m,k] x [b,k,n]
      {dot_example("f32[2,2,3]", "f32[2,3,2]", "f32[2,2,2]",
                   "lhs_batch={0}, lhs_contract={2}, rhs_batch={0}, rhs_contract={1}")},
      // contraction over 2 dims given out of order: lhs [3,2,2] dims {2,0} with rhs [2,3,4] dims {0,1}
      {dot_example("f32[3,2,2]", "f32[2,3,4]", "f32[2,4]",
                   "lhs_batch={}, lhs_contract={2,0}, rhs_batch={}, rhs_contract={0,1}")},
      // attention scores: q [b,t,h,d] x k [b,s,h,d] -> [b,h,t,s]
      {dot_example("f32[1,3,2,2]", "f32[1,4,2,2]", "f32[1,2,3,4]",
                   "lhs_batch={0,2}, lhs_contract={3}, rhs_batch={0,2}, rhs_contract={3}")},
      // attention output: probs [b,h,t,s] x v [b,s,h,d] -> [b,h,t,d]
      {dot_example("f32[1,2,3,4]", "f32[1,4,2,2]", "f32[1,2,3,2]",
                   "lhs_batch={0,1}, lhs_contract={3}, rhs_batch={0,2}, rhs_contract={1}")},
      // batch dim last in the rhs: [b,k] x [n,k,b] -> [b,n]
      {dot_example("f32[2,3]", "f32[4,3,2]", "f32[2,4]", "lhs_batch={0}, lhs_contract={1}, rhs_batch={2}, rhs_contract={1}")},
      // vector dot product and outer product
      {dot_example("f32[5]", "f32[5]", "f32[]", "lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}")},
      {dot_example("f32[3]", "f32[4]", "f32[3,4]", "lhs_batch={}, lhs_contract={}, rhs_batch={}, rhs_contract={}")},
      // mixed precision: bf16 x bf16 -> f32 (preferred_element_type)
      {dot_example("bf16[2,3]", "bf16[3,2]", "f32[2,2]", "lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}")},
  };
}

}  // namespace

void register_dot_ops(OpTable& table) {
  OpDef d;
  d.opcode = Opcode::kDotGeneral;
  d.kernel_class = KernelClass::kGemm;
  d.min_operands = d.max_operands = 2;
  d.attrs = {{"lhs_batch", AttrKind::kInts, true, {}},
             {"rhs_batch", AttrKind::kInts, true, {}},
             {"lhs_contract", AttrKind::kInts, true, {}},
             {"rhs_contract", AttrKind::kInts, true, {}}};
  d.infer = infer_dot;
  d.declared_result_dtype = true;
  d.eval = eval_dot;
  d.grad = GradKind::kRule;
  d.vjp = vjp_dot;
  d.dim_map = dot_dim_map;
  d.split_map = same_size_dims(dot_dim_map);
  d.cost = dot_cost;
  d.examples = dot_examples();
  table.add(std::move(d));
}

}  // namespace kiln::ops
