// rng: Kiln's counter-based generator (ops/rng.h) spelled out in StableHLO integer and f32
// ops, so that parameters initialised on a PJRT device are bit for bit those of the CPU
// backend and the interpreter.
//
//   counter  ui64 [dims]: the element's row-major index in the GLOBAL array (uniform), or
//            64 index + attempt (normal, truncated normal); a `split` rng adds its device's
//            block offset, read from a constant table at stablehlo.replica_id
//   bits     SplitMix64's output function at `counter` of the seed's stream (ui64 wrapping
//            multiply, xor, shift_right_logical)
//   value    f32 from the bits with the very sequence of f32 operations of rng.cc (uniform
//            from 24 bits; Box-Muller with the polynomial log and cosine), then the result
//            dtype (bf16 rounds to nearest even, uniform kept below 1)
//   truncated_normal: a stablehlo.while over attempts 1..63 that redraws the elements still
//            outside [-2, 2] while any is; one still outside after 63 redraws is 0.
//
// Contraction: rng.cc is compiled with -ffp-contract=off, but XLA's CPU and GPU compilers
// let LLVM fuse a multiply feeding an add into one FMA (one rounding instead of two), which
// changes the last bit of the polynomials. Every inexact product that feeds an addition
// therefore goes through `rounded`: the product's bits xor an integer zero that no compiler
// can prove zero (below), so the addition's operand is no longer a multiplication and the
// product is rounded to f32 on its own, as in rng.cc. Products by powers of two are exact
// and need no guard.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"
#include "kiln/base/hash.h"
#include "kiln/ops/rng.h"

namespace kiln::backend::pjrt {
namespace {

constexpr uint64_t kAttempts = 64;  // rng.cc: draws per element of a normal

std::string typed(std::string_view element, std::span<const int64_t> dims) {
  std::string text = "tensor<";
  for (int64_t d : dims) text += fmt::format("{}x", d);
  return text + std::string(element) + ">";
}

// The generator's ops on tensors of one shape (the rng's local dims).
class Gen {
 public:
  Gen(Writer& w, std::vector<int64_t> dims) : w_(w), dims_(std::move(dims)) {}

  std::string u64_type() const { return typed("ui64", dims_); }
  std::string u32_type() const { return typed("ui32", dims_); }
  std::string i32_type() const { return typed("i32", dims_); }
  std::string f32_type() const { return typed("f32", dims_); }
  const std::vector<int64_t>& dims() const { return dims_; }
  Writer& w() { return w_; }

  Val u64(uint64_t v) { return constant(u64_type(), fmt::format("{}", v)); }
  Val u32(uint32_t v) { return constant(u32_type(), fmt::format("{}", v)); }
  Val i32(int32_t v) { return constant(i32_type(), fmt::format("{}", v)); }
  Val f32(float v) { return constant(f32_type(), fmt::format("0x{:08X}", std::bit_cast<uint32_t>(v))); }

  Val add(const Val& a, const Val& b) { return w_.binary("stablehlo.add", a, b); }
  Val sub(const Val& a, const Val& b) { return w_.binary("stablehlo.subtract", a, b); }
  Val mul(const Val& a, const Val& b) { return w_.binary("stablehlo.multiply", a, b); }
  Val div(const Val& a, const Val& b) { return w_.binary("stablehlo.divide", a, b); }
  Val bxor(const Val& a, const Val& b) { return w_.binary("stablehlo.xor", a, b); }
  Val band(const Val& a, const Val& b) { return w_.binary("stablehlo.and", a, b); }
  Val bor(const Val& a, const Val& b) { return w_.binary("stablehlo.or", a, b); }
  Val shr(const Val& a, const Val& b) { return w_.binary("stablehlo.shift_right_logical", a, b); }
  Val select(const Val& c, const Val& a, const Val& b) { return w_.op("stablehlo.select", {c, a, b}, a.type); }
  Val convert(const Val& x, const std::string& type) { return w_.convert(x, type); }
  Val bitcast(const Val& x, const std::string& type) { return w_.op("stablehlo.bitcast_convert", {x}, type); }

  // SplitMix64's output function at `counter` of `stream` (rng.cc's bits_at).
  Val bits_at(uint64_t stream, const Val& counter) {
    Val x = add(u64(stream), mul(counter, u64(0x9e3779b97f4a7c15ull)));
    x = mul(bxor(x, shr(x, u64(30))), u64(0xbf58476d1ce4e5b9ull));
    x = mul(bxor(x, shr(x, u64(27))), u64(0x94d049bb133111ebull));
    return bxor(x, shr(x, u64(31)));
  }

  // An integer below 2^24, as f32, times 2^-24: exact.
  Val unit_from(const Val& bits24) { return mul(convert(bits24, f32_type()), f32(0x1.0p-24f)); }

  Val uniform_from(const Val& bits) { return unit_from(shr(bits, u64(40))); }

  // a * b rounded to f32 before it meets an addition (see the file comment): the product's
  // bits xor `zero_`, an integer zero the compilers cannot see through.
  Val rounded(const Val& a, const Val& b) {
    const Val p = mul(a, b);
    if (!zero_) return p;
    return bitcast(bxor(bitcast(p, u32_type()), *zero_), f32_type());
  }

  // A ui32 tensor of zeros computed from `bits` so that no compiler proves it zero: with
  // v the low 8 bits, v^3 - v = (v - 1) v (v + 1) is a multiple of 3 (and below 2^24, so it
  // does not wrap), and its remainder by 3 is zero.
  void set_opaque_zero(const Val& bits) {
    const Val v = convert(band(bits, u64(0xff)), u32_type());
    const Val cube_minus = sub(mul(mul(v, v), v), v);
    zero_ = w_.binary("stablehlo.remainder", cube_minus, u32(3));
  }

  // rng.cc's log_unit: ln(x) for x in [2^-24, 1).
  Val log_unit(const Val& x) {
    const Val b = bitcast(x, u32_type());
    Val e = sub(convert(shr(b, u32(23)), i32_type()), i32(127));
    Val m = bitcast(bor(band(b, u32(0x007fffffu)), u32(0x3f800000u)), f32_type());  // [1, 2)
    const Val high = w_.compare(m, f32(1.41421356f), "GT");
    m = select(high, mul(m, f32(0.5f)), m);
    e = select(high, add(e, i32(1)), e);
    const Val s = div(sub(m, f32(1.0f)), add(m, f32(1.0f)));
    const Val s2 = mul(s, s);
    Val tail = add(f32(2.0f / 7.0f), rounded(s2, f32(2.0f / 9.0f)));
    tail = add(f32(2.0f / 5.0f), rounded(s2, tail));
    tail = add(f32(2.0f / 3.0f), rounded(s2, tail));
    tail = mul(s2, tail);
    const Val mantissa = add(mul(f32(2.0f), s), rounded(s, tail));
    return add(rounded(convert(e, f32_type()), f32(0.693147180559945f)), mantissa);
  }

  // rng.cc's cos_turns: cos(2 pi t) for t in [0, 1).
  Val cos_turns(const Val& t) {
    const Val q = convert(add(mul(f32(4.0f), t), f32(0.5f)), i32_type());  // truncates, as static_cast
    const Val x = mul(sub(t, mul(convert(q, f32_type()), f32(0.25f))), f32(6.28318530717958648f));
    const Val x2 = mul(x, x);
    Val sin_p = add(f32(1.0f / 120.0f), rounded(x2, add(f32(-1.0f / 5040.0f), rounded(x2, f32(1.0f / 362880.0f)))));
    sin_p = add(f32(1.0f), rounded(x2, add(f32(-1.0f / 6.0f), rounded(x2, sin_p))));
    const Val sin_x = mul(x, sin_p);
    Val cos_p = add(f32(-1.0f / 720.0f), rounded(x2, add(f32(1.0f / 40320.0f), rounded(x2, f32(-1.0f / 3628800.0f)))));
    cos_p = add(f32(-0.5f), rounded(x2, add(f32(1.0f / 24.0f), rounded(x2, cos_p))));
    const Val cos_x = add(f32(1.0f), rounded(x2, cos_p));
    const Val quadrant = band(q, i32(3));  // cos(x + quadrant pi/2)
    auto is = [&](int32_t k) { return w_.compare(quadrant, i32(k), "EQ"); };
    const Val neg_sin = w_.unary("stablehlo.negate", sin_x), neg_cos = w_.unary("stablehlo.negate", cos_x);
    return select(is(0), cos_x, select(is(1), neg_sin, select(is(2), neg_cos, sin_x)));
  }

  // rng.cc's normal_from: Box-Muller, radius from 23 bits, angle from 24 others.
  Val normal_from(const Val& bits) {
    const Val odd = add(mul(shr(bits, u64(41)), u64(2)), u64(1));
    const Val u1 = unit_from(odd);
    const Val t = unit_from(band(bits, u64(0xffffff)));
    const Val radius2 = w_.binary("stablehlo.maximum", f32(0.0f), mul(f32(-2.0f), log_unit(u1)));
    return mul(w_.unary("stablehlo.sqrt", radius2), cos_turns(t));
  }

 private:
  Val constant(const std::string& type, const std::string& element) {
    return w_.op("stablehlo.constant", {}, type, fmt::format("value = dense<{}> : {}", element, type));
  }

  Writer& w_;
  std::vector<int64_t> dims_;
  std::optional<Val> zero_;
};

// The elements' global row-major indices (ui64 [local dims]): the iota of the local block,
// strided as the global array, plus this device's block offset. The offset differs per
// device, so it is a constant table indexed by stablehlo.replica_id and one program serves
// every replica.
Val global_index(Gen& g, const ir::Instr& instr, const config::Mesh& mesh) {
  Writer& w = g.w();
  const std::vector<int64_t>& local = instr.shape().dims();
  const int rank = static_cast<int>(local.size());
  if (!instr.attrs().has("split") || rank == 0) {
    const int64_t n = instr.shape().num_elements();
    const Val flat = w.op("stablehlo.iota", {}, typed("ui64", std::vector<int64_t>{n}), "iota_dimension = 0 : i64");
    return w.reshape(flat, g.u64_type());
  }
  const ir::Sharding split = ops::parse_split(instr.attrs().get_string("split"), rank);
  std::vector<int64_t> global(local), stride(rank, 1);
  for (int d = 0; d < rank; ++d) global[d] = local[d] * mesh.size(split.dims[d]);
  for (int d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * global[d + 1];
  Val index;
  for (int d = 0; d < rank; ++d) {
    Val iota = w.op("stablehlo.iota", {}, g.u64_type(), fmt::format("iota_dimension = {} : i64", d));
    if (stride[d] != 1) iota = g.mul(iota, g.u64(static_cast<uint64_t>(stride[d])));
    index = d == 0 ? iota : g.add(index, iota);
  }
  // Device r's block starts at global element sum_d shard_index(r, axes_d) local[d] stride[d]
  // (ops::rng_block with ops::current_device(), for every device at once).
  std::vector<uint64_t> base(static_cast<size_t>(mesh.num_devices()), 0);
  for (int64_t r = 0; r < mesh.num_devices(); ++r) {
    for (int d = 0; d < rank; ++d) {
      base[r] += static_cast<uint64_t>(mesh.shard_index(r, split.dims[d]) * local[d] * stride[d]);
    }
  }
  if (std::all_of(base.begin(), base.end(), [&](uint64_t b) { return b == base[0]; })) {
    return base[0] == 0 ? index : g.add(index, g.u64(base[0]));
  }
  const std::string table_type = typed("ui64", std::vector<int64_t>{static_cast<int64_t>(base.size())});
  const Val table = w.op("stablehlo.constant", {}, table_type,
                         fmt::format("value = dense<[{}]> : {}", fmt::join(base, ", "), table_type));
  const Val replica = w.convert(w.op("stablehlo.replica_id", std::span<const Val>{}, "tensor<ui32>"), "tensor<i32>");
  const Val one = w.op("stablehlo.dynamic_slice", {table, replica}, typed("ui64", std::vector<int64_t>{1}),
                       "slice_sizes = array<i64: 1>");
  const Val offset = w.reshape(one, "tensor<ui64>");
  return g.add(index, w.broadcast(offset, g.u64_type(), {}));
}

// The truncated normal's redraws: attempts 1..63 while any element is outside [-2, 2]; the
// loop carries (attempt, any outside, index, values, outside) and reads nothing from outside.
Val truncated_redraws(Gen& g, uint64_t stream, const Val& index, const Val& first) {
  Writer& w = g.w();
  auto outside_of = [&](Gen& h, const Val& v) {
    const Val inside = h.w().compare(h.w().unary("stablehlo.abs", v), h.f32(2.0f), "LE");
    return h.w().unary("stablehlo.not", inside);  // NaN counts as outside, as !(|x| <= 2)
  };
  const Val outside = outside_of(g, first);
  auto any_of = [&](Writer& ww, const Val& mask) {
    const Val f = ww.scalar(ir::DType::kPred, 0);
    std::vector<int64_t> all(g.dims().size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
    return ww.reduce(mask, f, all, "stablehlo.or", "tensor<i1>");
  };
  const std::vector<Val> init = {w.op("stablehlo.constant", {}, "tensor<ui64>", "value = dense<1> : tensor<ui64>"),
                                 any_of(w, outside), index, first, outside};
  std::vector<std::string> types;
  for (const Val& v : init) types.push_back(v.type);
  const std::string cond = w.region(types, [&](Writer& r, std::span<const Val> a) {
    const Val limit = r.op("stablehlo.constant", {}, "tensor<ui64>", fmt::format("value = dense<{}> : tensor<ui64>", kAttempts));
    const Val more = r.compare(a[0], limit, "LT");
    return std::vector<Val>{r.binary("stablehlo.and", more, a[1])};
  });
  const std::string body = w.region(types, [&](Writer& r, std::span<const Val> a) {
    Gen h(r, g.dims());
    const Val attempt = r.broadcast(a[0], h.u64_type(), {});
    const Val bits = h.bits_at(stream, h.add(h.mul(a[2], h.u64(kAttempts)), attempt));
    h.set_opaque_zero(bits);
    const Val drawn = h.normal_from(bits);
    const Val take = r.binary("stablehlo.and", a[4], r.unary("stablehlo.not", outside_of(h, drawn)));
    const Val values = h.select(take, drawn, a[3]);
    const Val still = r.binary("stablehlo.and", a[4], r.unary("stablehlo.not", take));
    const Val next = r.binary("stablehlo.add", a[0], r.op("stablehlo.constant", {}, "tensor<ui64>", "value = dense<1> : tensor<ui64>"));
    return std::vector<Val>{next, any_of(r, still), a[2], values, still};
  });
  const std::vector<std::string> regions = {cond, body};
  const std::vector<Val> out = w.op_multi("stablehlo.while", init, types, "", regions);
  return g.select(out[4], g.f32(0.0f), out[3]);  // 63 redraws all outside (p < 1e-84): 0
}

Result<Vals> lower_rng(LowerContext& ctx, const ir::Instr& instr, std::span<const Vals>) {
  const ir::Shape& shape = instr.shape();
  const ops::RngDistribution dist = ops::rng_distribution(instr);
  const uint64_t stream = mix64(static_cast<uint64_t>(instr.attrs().get_int("seed")));
  Gen g(ctx.w, shape.dims());
  const Val index = global_index(g, instr, ctx.options.mesh);
  Val value;
  if (dist == ops::RngDistribution::kUniform) {
    value = g.uniform_from(g.bits_at(stream, index));
  } else {
    const Val bits = g.bits_at(stream, g.mul(index, g.u64(kAttempts)));
    g.set_opaque_zero(bits);
    value = g.normal_from(bits);
    if (dist == ops::RngDistribution::kTruncatedNormal) value = truncated_redraws(g, stream, index, value);
  }
  const std::string type = tensor_type(shape);
  Val out = ctx.w.convert(value, type);  // bf16: round to nearest even, as the interpreter's literal
  if (dist == ops::RngDistribution::kUniform && shape.dtype() == ir::DType::kBF16) {
    // ops::round_uniform: bf16 rounds 0.998 up to 1; such values become the largest below 1.
    const Val one = ctx.w.splat(shape.dtype(), shape.dims(), 1.0);
    const Val below = ctx.w.splat(shape.dtype(), shape.dims(), 1.0 - 0x1.0p-8);
    out = ctx.w.op("stablehlo.select", {ctx.w.compare(out, one, "GE"), below, out}, type);
  }
  return Vals{out};
}

}  // namespace

void register_rng_lowerings(LoweringTable& table) { table.add(ir::Opcode::kRng, lower_rng); }

}  // namespace kiln::backend::pjrt
