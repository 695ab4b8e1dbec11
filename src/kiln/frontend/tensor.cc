#include "kiln/frontend/tensor.h"

#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"

namespace kiln::frontend {

namespace {

using ir::Opcode;

ops::Builder& B(const Tensor& t) {
  KILN_CHECK(t.valid()) << "use of an empty Tensor";
  return t.graph()->builder();
}

int normalize_axis(int axis, int rank) {
  int a = axis < 0 ? axis + rank : axis;
  KILN_CHECK(a >= 0 && a < rank) << "axis " << axis << " out of range for rank " << rank;
  return a;
}

std::vector<int64_t> normalize_axes(std::vector<int64_t> axes, int rank) {
  for (auto& a : axes) a = normalize_axis(static_cast<int>(a), rank);
  std::sort(axes.begin(), axes.end());
  return axes;
}

Tensor wrap(const Tensor& like, ir::Instr* instr) { return Tensor(like.graph(), instr); }

// Brings a and b to their common broadcast shape.
std::pair<Tensor, Tensor> broadcast_pair(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dtype() == b.dtype()) << "mixing " << a.shape().to_string() << " and " << b.shape().to_string()
                                     << ": convert one with astype()";
  std::vector<int64_t> dims = broadcast_dims(a.dims(), b.dims());
  return {a.broadcast_to(dims), b.broadcast_to(dims)};
}

Tensor binary(Opcode op, const Tensor& a, const Tensor& b) {
  auto [x, y] = broadcast_pair(a, b);
  return wrap(a, B(a).binary(op, x.instr(), y.instr()));
}

Tensor scalar_like(const Tensor& t, double v) { return wrap(t, B(t).scalar(t.dtype(), v)); }

Tensor compare(const Tensor& a, const Tensor& b, const char* direction) {
  auto [x, y] = broadcast_pair(a, b);
  return wrap(a, B(a).compare(x.instr(), y.instr(), direction));
}

Tensor unary(Opcode op, const Tensor& x) { return wrap(x, B(x).unary(op, x.instr())); }

Tensor reduce(Opcode op, const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  axes = normalize_axes(std::move(axes), x.rank());
  Tensor r = wrap(x, B(x).reduce(op, x.instr(), axes));
  if (!keepdims) return r;
  std::vector<int64_t> dims = x.dims();
  for (int64_t a : axes) dims[a] = 1;
  return r.reshape(dims);
}

}  // namespace

std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1) << "cannot broadcast " << ir::dims_to_string(a) << " with "
                                               << ir::dims_to_string(b);
    out[i] = std::max(da, db);
  }
  return out;
}

int64_t Tensor::dim(int axis) const { return dims()[normalize_axis(axis, rank())]; }

Tensor Tensor::named(const std::string& name, std::source_location loc) const {
  ir::Metadata& meta = instr_->mutable_meta();
  meta.name = graph_->qualified(name);
  std::string file = loc.file_name();
  size_t src = file.rfind("src/");
  meta.loc = (src == std::string::npos ? file : file.substr(src + 4)) + ":" + std::to_string(loc.line());
  return *this;
}

Tensor Tensor::axes(std::vector<std::string> logical_axes) const {
  KILN_CHECK_EQ(static_cast<int>(logical_axes.size()), rank()) << "axes for " << shape().to_string();
  instr_->mutable_meta().axes = std::move(logical_axes);
  return *this;
}

Tensor Tensor::reshape(std::vector<int64_t> dims) const {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      KILN_CHECK(infer < 0) << "reshape with two -1 dims";
      infer = static_cast<int>(i);
    } else {
      known *= dims[i];
    }
  }
  if (infer >= 0) dims[infer] = shape().num_elements() / known;
  return wrap(*this, B(*this).reshape(instr_, std::move(dims)));
}

Tensor Tensor::transpose(std::vector<int64_t> perm) const {
  for (auto& p : perm) p = normalize_axis(static_cast<int>(p), rank());
  return wrap(*this, B(*this).transpose(instr_, std::move(perm)));
}

Tensor Tensor::broadcast_to(std::vector<int64_t> target) const {
  if (target == dims()) return *this;
  KILN_CHECK(static_cast<int>(target.size()) >= rank()) << "broadcast " << shape().to_string() << " to lower rank";
  std::vector<int64_t> map(rank());
  size_t offset = target.size() - rank();
  for (int i = 0; i < rank(); ++i) map[i] = static_cast<int64_t>(offset + i);
  return wrap(*this, B(*this).broadcast(instr_, std::move(target), std::move(map)));
}

Tensor Tensor::expand_dims(int axis) const {
  std::vector<int64_t> d = dims();
  int a = axis < 0 ? axis + rank() + 1 : axis;
  d.insert(d.begin() + a, 1);
  return reshape(d);
}

Tensor Tensor::squeeze(int axis) const {
  std::vector<int64_t> d = dims();
  int a = normalize_axis(axis, rank());
  KILN_CHECK_EQ(d[a], 1) << "squeeze of a dimension that is not 1";
  d.erase(d.begin() + a);
  return reshape(d);
}

Tensor Tensor::astype(DType dtype) const { return wrap(*this, B(*this).convert(instr_, dtype)); }

Tensor Tensor::slice(int axis, int64_t start, int64_t stop, int64_t step) const {
  int a = normalize_axis(axis, rank());
  std::vector<int64_t> lo(rank(), 0), hi = dims(), strides(rank(), 1);
  lo[a] = start;
  hi[a] = stop;
  strides[a] = step;
  return wrap(*this, B(*this).slice(instr_, lo, hi, step == 1 ? std::vector<int64_t>{} : strides));
}

Tensor Tensor::sum(std::vector<int64_t> axes, bool keepdims) const { return reduce(Opcode::kReduceSum, *this, std::move(axes), keepdims); }
Tensor Tensor::max(std::vector<int64_t> axes, bool keepdims) const { return reduce(Opcode::kReduceMax, *this, std::move(axes), keepdims); }
Tensor Tensor::min(std::vector<int64_t> axes, bool keepdims) const { return reduce(Opcode::kReduceMin, *this, std::move(axes), keepdims); }

Tensor Tensor::mean(std::vector<int64_t> axes, bool keepdims) const {
  auto norm = normalize_axes(axes, rank());
  int64_t count = 1;
  for (int64_t a : norm) count *= dims()[a];
  return sum(std::move(axes), keepdims) * (1.0 / static_cast<double>(count));
}

Tensor Tensor::sum() const {
  std::vector<int64_t> all(rank());
  for (int i = 0; i < rank(); ++i) all[i] = i;
  return sum(all);
}

Tensor Tensor::take(const Tensor& indices, int axis, int batch_dims) const {
  return wrap(*this, B(*this).gather(instr_, indices.instr(), normalize_axis(axis, rank()), batch_dims));
}

Tensor Tensor::operator-() const { return unary(Opcode::kNeg, *this); }

Tensor operator+(const Tensor& a, const Tensor& b) { return binary(Opcode::kAdd, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary(Opcode::kSub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary(Opcode::kMul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary(Opcode::kDiv, a, b); }
Tensor operator+(const Tensor& a, double b) { return a + scalar_like(a, b); }
Tensor operator-(const Tensor& a, double b) { return a - scalar_like(a, b); }
Tensor operator*(const Tensor& a, double b) { return a * scalar_like(a, b); }
Tensor operator/(const Tensor& a, double b) { return a / scalar_like(a, b); }
Tensor operator+(double a, const Tensor& b) { return scalar_like(b, a) + b; }
Tensor operator-(double a, const Tensor& b) { return scalar_like(b, a) - b; }
Tensor operator*(double a, const Tensor& b) { return scalar_like(b, a) * b; }
Tensor operator/(double a, const Tensor& b) { return scalar_like(b, a) / b; }

Tensor operator<(const Tensor& a, const Tensor& b) { return compare(a, b, "lt"); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return compare(a, b, "le"); }
Tensor operator>(const Tensor& a, const Tensor& b) { return compare(a, b, "gt"); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return compare(a, b, "ge"); }
Tensor operator<(const Tensor& a, double b) { return compare(a, scalar_like(a, b), "lt"); }
Tensor operator<=(const Tensor& a, double b) { return compare(a, scalar_like(a, b), "le"); }
Tensor operator>(const Tensor& a, double b) { return compare(a, scalar_like(a, b), "gt"); }
Tensor operator>=(const Tensor& a, double b) { return compare(a, scalar_like(a, b), "ge"); }
Tensor equal(const Tensor& a, const Tensor& b) { return compare(a, b, "eq"); }
Tensor not_equal(const Tensor& a, const Tensor& b) { return compare(a, b, "ne"); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return binary(Opcode::kAnd, a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return binary(Opcode::kOr, a, b); }
Tensor operator!(const Tensor& a) { return unary(Opcode::kNot, a); }

Tensor exp(const Tensor& x) { return unary(Opcode::kExp, x); }
Tensor log(const Tensor& x) { return unary(Opcode::kLog, x); }
Tensor log1p(const Tensor& x) { return unary(Opcode::kLog1p, x); }
Tensor sqrt(const Tensor& x) { return unary(Opcode::kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(Opcode::kRsqrt, x); }
Tensor tanh(const Tensor& x) { return unary(Opcode::kTanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(Opcode::kLogistic, x); }
Tensor sin(const Tensor& x) { return unary(Opcode::kSin, x); }
Tensor cos(const Tensor& x) { return unary(Opcode::kCos, x); }
Tensor abs(const Tensor& x) { return unary(Opcode::kAbs, x); }
Tensor square(const Tensor& x) { return x * x; }
Tensor pow(const Tensor& x, double exponent) { return binary(Opcode::kPow, x, scalar_like(x, exponent)); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(Opcode::kMax, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(Opcode::kMin, a, b); }
Tensor maximum(const Tensor& a, double b) { return maximum(a, scalar_like(a, b)); }
Tensor minimum(const Tensor& a, double b) { return minimum(a, scalar_like(a, b)); }
Tensor stop_gradient(const Tensor& x) { return unary(Opcode::kStopGradient, x); }
Tensor is_finite(const Tensor& x) { return unary(Opcode::kIsFinite, x); }

Tensor clip(const Tensor& x, double lo, double hi) {
  Tensor l = scalar_like(x, lo).broadcast_to(x.dims());
  Tensor h = scalar_like(x, hi).broadcast_to(x.dims());
  return wrap(x, B(x).clamp(l.instr(), x.instr(), h.instr()));
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  auto dims = broadcast_dims(cond.dims(), broadcast_dims(a.dims(), b.dims()));
  auto [x, y] = broadcast_pair(a.broadcast_to(dims), b.broadcast_to(dims));
  Tensor c = cond.broadcast_to(dims);
  return wrap(a, B(a).select(c.instr(), x.instr(), y.instr()));
}

Tensor where(const Tensor& cond, const Tensor& a, double b) { return where(cond, a, scalar_like(a, b)); }

Tensor concatenate(const std::vector<Tensor>& xs, int axis) {
  KILN_CHECK(!xs.empty());
  std::vector<ir::Instr*> instrs;
  for (const Tensor& t : xs) instrs.push_back(t.instr());
  return wrap(xs[0], B(xs[0]).concatenate(instrs, normalize_axis(axis, xs[0].rank())));
}

std::pair<Tensor, Tensor> top_k(const Tensor& x, int64_t k) {
  ops::Builder& b = B(x);
  ir::Instr* t = b.topk(x.instr(), k);
  return {wrap(x, b.get_tuple_element(t, 0)), wrap(x, b.get_tuple_element(t, 1))};
}

std::pair<Tensor, Tensor> sort(const Tensor& x, bool descending) {
  ops::Builder& b = B(x);
  ir::Instr* t = b.sort(x.instr(), descending);
  return {wrap(x, b.get_tuple_element(t, 0)), wrap(x, b.get_tuple_element(t, 1))};
}

Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& updates, int axis, int batch_dims) {
  return wrap(x, B(x).scatter_add(x.instr(), indices.instr(), updates.instr(), normalize_axis(axis, x.rank()), batch_dims));
}

Tensor one_hot(const Tensor& indices, int64_t n, DType dtype) {
  std::vector<int64_t> dims = indices.dims();
  dims.push_back(n);
  Tensor classes = indices.graph()->iota(dims, static_cast<int>(dims.size()) - 1, indices.dtype());
  Tensor hit = equal(indices.expand_dims(-1).broadcast_to(dims), classes);
  Graph* g = indices.graph();
  return where(hit, g->full(dims, 1.0, dtype), g->full(dims, 0.0, dtype));
}

}  // namespace kiln::frontend
