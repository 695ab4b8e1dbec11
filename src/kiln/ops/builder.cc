#include "kiln/ops/builder.h"

#include "kiln/base/check.h"

namespace kiln::ops {

Result<Instr*> Builder::try_emit(Opcode opcode, std::vector<Instr*> operands, ir::Attrs attrs,
                                 std::optional<Shape> declared) {
  std::vector<Shape> shapes;
  shapes.reserve(operands.size());
  for (Instr* o : operands) shapes.push_back(o->shape());
  KILN_ASSIGN_OR_RETURN(Shape shape, infer_shape(opcode, shapes, attrs, declared ? &*declared : nullptr));
  Instr* instr = comp_->add(opcode, std::move(shape), std::move(operands), std::move(attrs));
  if (!name_.empty()) instr->mutable_meta().name = name_;
  if (!loc_.empty()) instr->mutable_meta().loc = loc_;
  return instr;
}

Instr* Builder::emit(Opcode opcode, std::vector<Instr*> operands, ir::Attrs attrs, std::optional<Shape> declared) {
  std::string operand_text;
  for (Instr* o : operands) operand_text += " " + o->shape().to_string();
  auto result = try_emit(opcode, std::move(operands), std::move(attrs), std::move(declared));
  KILN_CHECK(result.ok()) << "building " << ir::opcode_name(opcode) << " on" << operand_text << ": "
                          << result.status().message();
  return *result;
}

Instr* Builder::parameter(int index, Shape shape, std::string name) {
  Instr* p = emit(Opcode::kParameter, {}, {{"index", int64_t{index}}}, std::move(shape));
  if (!name.empty()) p->mutable_meta().name = std::move(name);
  return p;
}

Instr* Builder::constant(ir::Literal literal) {
  Instr* c = comp_->add_constant(std::move(literal));
  if (!name_.empty()) c->mutable_meta().name = name_;
  if (!loc_.empty()) c->mutable_meta().loc = loc_;
  return c;
}

Instr* Builder::scalar(DType dtype, double value) { return constant(ir::Literal::scalar(dtype, value)); }

Instr* Builder::full(Shape shape, double value) {
  Instr* s = scalar(shape.dtype(), value);
  if (shape.rank() == 0) return s;
  return broadcast(s, shape.dims(), {});
}

Instr* Builder::iota(Shape shape, int64_t dim) { return emit(Opcode::kIota, {}, {{"dim", dim}}, std::move(shape)); }

Instr* Builder::rng(Shape shape, const std::string& distribution, int64_t seed) {
  return emit(Opcode::kRng, {}, {{"distribution", distribution}, {"seed", seed}}, std::move(shape));
}

Instr* Builder::unary(Opcode opcode, Instr* x) { return emit(opcode, {x}); }
Instr* Builder::binary(Opcode opcode, Instr* a, Instr* b) { return emit(opcode, {a, b}); }

Instr* Builder::compare(Instr* a, Instr* b, const std::string& direction) {
  return emit(Opcode::kCompare, {a, b}, {{"direction", direction}});
}

Instr* Builder::select(Instr* pred, Instr* on_true, Instr* on_false) {
  return emit(Opcode::kSelect, {pred, on_true, on_false});
}

Instr* Builder::clamp(Instr* lo, Instr* x, Instr* hi) { return emit(Opcode::kClamp, {lo, x, hi}); }

Instr* Builder::convert(Instr* x, DType dtype) {
  if (x->shape().dtype() == dtype) return x;
  return emit(Opcode::kConvert, {x}, {}, x->shape().with_dtype(dtype));
}

Instr* Builder::mul_scalar(Instr* x, double value) { return mul(x, full(x->shape(), value)); }
Instr* Builder::add_scalar(Instr* x, double value) { return add(x, full(x->shape(), value)); }

Instr* Builder::broadcast(Instr* x, std::vector<int64_t> result_dims, std::vector<int64_t> dims) {
  Shape out(x->shape().dtype(), std::move(result_dims));
  if (out == x->shape() && static_cast<int>(dims.size()) == x->shape().rank()) {
    bool identity = true;
    for (size_t i = 0; i < dims.size(); ++i) identity = identity && dims[i] == static_cast<int64_t>(i);
    if (identity) return x;
  }
  return emit(Opcode::kBroadcast, {x}, {{"dims", std::move(dims)}}, std::move(out));
}

Instr* Builder::reshape(Instr* x, std::vector<int64_t> dims) {
  if (x->shape().dims() == dims) return x;
  return emit(Opcode::kReshape, {x}, {}, x->shape().with_dims(std::move(dims)));
}

Instr* Builder::transpose(Instr* x, std::vector<int64_t> perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity && static_cast<int>(perm.size()) == x->shape().rank()) return x;
  return emit(Opcode::kTranspose, {x}, {{"perm", std::move(perm)}});
}

Instr* Builder::slice(Instr* x, std::vector<int64_t> start, std::vector<int64_t> limit, std::vector<int64_t> strides) {
  ir::Attrs attrs{{"start", std::move(start)}, {"limit", std::move(limit)}};
  if (!strides.empty()) attrs.set("strides", std::move(strides));
  return emit(Opcode::kSlice, {x}, std::move(attrs));
}

Instr* Builder::pad(Instr* x, Instr* value, std::vector<int64_t> low, std::vector<int64_t> high,
                    std::vector<int64_t> interior) {
  ir::Attrs attrs{{"low", std::move(low)}, {"high", std::move(high)}};
  if (!interior.empty()) attrs.set("interior", std::move(interior));
  return emit(Opcode::kPad, {x, value}, std::move(attrs));
}

Instr* Builder::concatenate(std::vector<Instr*> xs, int64_t dim) {
  if (xs.size() == 1) return xs[0];
  return emit(Opcode::kConcatenate, std::move(xs), {{"dim", dim}});
}

Instr* Builder::dynamic_slice(Instr* x, std::vector<Instr*> starts, std::vector<int64_t> sizes) {
  std::vector<Instr*> operands = {x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit(Opcode::kDynamicSlice, std::move(operands), {{"sizes", std::move(sizes)}});
}

Instr* Builder::dynamic_update_slice(Instr* x, Instr* update, std::vector<Instr*> starts) {
  std::vector<Instr*> operands = {x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return emit(Opcode::kDynamicUpdateSlice, std::move(operands));
}

Instr* Builder::reduce(Opcode opcode, Instr* x, std::vector<int64_t> dims) {
  if (dims.empty()) return x;
  return emit(opcode, {x}, {{"dims", std::move(dims)}});
}

Instr* Builder::dot_general(Instr* lhs, Instr* rhs, std::vector<int64_t> lhs_batch, std::vector<int64_t> rhs_batch,
                            std::vector<int64_t> lhs_contract, std::vector<int64_t> rhs_contract,
                            std::optional<DType> result_dtype) {
  ir::Attrs attrs{{"lhs_batch", std::move(lhs_batch)},
                  {"rhs_batch", std::move(rhs_batch)},
                  {"lhs_contract", std::move(lhs_contract)},
                  {"rhs_contract", std::move(rhs_contract)}};
  if (!result_dtype || *result_dtype == lhs->shape().dtype()) return emit(Opcode::kDotGeneral, {lhs, rhs}, std::move(attrs));
  // The shape rule computes the dims; ask it once with the operand dtype, then declare ours.
  std::vector<Shape> shapes = {lhs->shape(), rhs->shape()};
  auto inferred = infer_shape(Opcode::kDotGeneral, shapes, attrs, nullptr);
  KILN_CHECK(inferred.ok()) << inferred.status().message();
  return emit(Opcode::kDotGeneral, {lhs, rhs}, std::move(attrs), inferred->with_dtype(*result_dtype));
}

Instr* Builder::gather(Instr* x, Instr* indices, int64_t axis, int64_t batch_dims) {
  return emit(Opcode::kGather, {x, indices}, {{"axis", axis}, {"batch_dims", batch_dims}});
}

Instr* Builder::scatter_add(Instr* x, Instr* indices, Instr* updates, int64_t axis, int64_t batch_dims) {
  return emit(Opcode::kScatterAdd, {x, indices, updates}, {{"axis", axis}, {"batch_dims", batch_dims}});
}

Instr* Builder::sort(Instr* x, bool descending) {
  return emit(Opcode::kSort, {x}, {{"descending", int64_t{descending ? 1 : 0}}});
}

Instr* Builder::topk(Instr* x, int64_t k) { return emit(Opcode::kTopK, {x}, {{"k", k}}); }

Instr* Builder::attention(Instr* q, Instr* k, Instr* v, Instr* sinks, Instr* q_segment, Instr* kv_segment,
                          double scale, bool causal, int64_t window) {
  std::vector<Instr*> operands = {q, k, v};
  if (sinks) operands.push_back(sinks);
  KILN_CHECK((q_segment == nullptr) == (kv_segment == nullptr)) << "attention wants both segment ids or neither";
  if (q_segment) {
    operands.push_back(q_segment);
    operands.push_back(kv_segment);
  }
  ir::Attrs attrs = {{"scale", scale}, {"causal", int64_t{causal ? 1 : 0}}};
  if (window > 0) attrs.set("window", window);
  return emit(Opcode::kAttention, std::move(operands), std::move(attrs));
}

Instr* Builder::grouped_matmul(Instr* x, Instr* w, Instr* group_sizes, bool transpose_rhs) {
  ir::Attrs attrs;
  if (transpose_rhs) attrs.set("transpose_rhs", int64_t{1});
  return emit(Opcode::kGroupedMatmul, {x, w, group_sizes}, std::move(attrs));
}

Instr* Builder::grouped_matmul_weight_grad(Instr* x, Instr* dy, Instr* group_sizes) {
  return emit(Opcode::kGroupedMatmulWeightGrad, {x, dy, group_sizes});
}

Instr* Builder::tuple(std::vector<Instr*> xs) { return emit(Opcode::kTuple, std::move(xs)); }

Instr* Builder::get_tuple_element(Instr* t, int64_t index) {
  return emit(Opcode::kGetTupleElement, {t}, {{"index", index}});
}

Instr* VjpContext::dout(int i) {
  KILN_CHECK(i >= 0 && i < static_cast<int>(douts.size()));
  if (!douts[i]) {
    const Shape& s = instr->shape().is_tuple() ? instr->shape().element(i) : instr->shape();
    douts[i] = b.zeros(s);
  }
  return douts[i];
}

}  // namespace kiln::ops
