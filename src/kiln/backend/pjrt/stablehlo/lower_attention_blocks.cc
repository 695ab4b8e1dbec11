#include "kiln/backend/pjrt/stablehlo/lower_attention_blocks.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"

namespace kiln::backend::pjrt::attention {

std::string Info::acc_type(std::initializer_list<int64_t> dims) const {
  return tensor_type(acc, std::vector<int64_t>(dims));
}

Info info_of(const ir::Instr& instr, bool grad) {
  Info a;
  const ir::Shape& q = instr.operand(0)->shape();
  const ir::Shape& k = instr.operand(1)->shape();
  a.B = q.dim(0), a.T = q.dim(1), a.H = q.dim(2), a.Dh = q.dim(3), a.S = k.dim(1), a.K = k.dim(2);
  a.G = a.H / a.K;
  a.in = q.dtype();
  a.acc = a.in == ir::DType::kF64 ? ir::DType::kF64 : ir::DType::kF32;
  a.scale = instr.attrs().get_float("scale");
  a.causal = instr.attrs().get_int_or("causal", 0) != 0;
  a.window = instr.attrs().get_int_or("window", 0);
  // Optional operands follow from the count (3: none, 4: sinks, 5: segments, 6: both).
  const int n = instr.num_operands();
  const int opt = grad ? n - 7 : n - 3;
  int i = 3;
  if (opt == 1 || opt == 3) a.sinks = i++;
  if (opt >= 2) {
    a.q_seg = i++;
    a.kv_seg = i++;
  }
  if (grad) {
    a.out = i++;
    a.lse = i++;
    a.dout = i++;
    a.dlse = i++;
  }
  a.bq = std::min(a.T, kBlock), a.bk = std::min(a.S, kBlock);
  a.nq = a.bq == 0 ? 0 : (a.T + a.bq - 1) / a.bq;
  a.nk = a.bk == 0 ? 0 : (a.S + a.bk - 1) / a.bk;
  return a;
}

Val i32(Writer& w, int64_t v) { return w.scalar(ir::DType::kS32, static_cast<double>(v)); }

Val transpose(Writer& w, const Val& x, std::initializer_list<int64_t> permutation, const std::string& type) {
  return w.op("stablehlo.transpose", {x}, type,
              "permutation = " + i64_array(std::vector<int64_t>(permutation)));
}

Val dot(Writer& w, const Val& lhs, const Val& rhs, std::initializer_list<int64_t> lhs_batch,
        std::initializer_list<int64_t> rhs_batch, std::initializer_list<int64_t> lhs_contract,
        std::initializer_list<int64_t> rhs_contract, const std::string& type) {
  return w.op("stablehlo.dot_general", {lhs, rhs}, type,
              fmt::format("dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [{}], "
                          "rhs_batching_dimensions = [{}], lhs_contracting_dimensions = [{}], "
                          "rhs_contracting_dimensions = [{}]>, precision_config = "
                          "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
                          fmt::join(lhs_batch, ", "), fmt::join(rhs_batch, ", "), fmt::join(lhs_contract, ", "),
                          fmt::join(rhs_contract, ", ")));
}

Val dynamic_slice(Writer& w, const Val& x, std::span<const Val> starts, std::span<const int64_t> sizes,
                  const std::string& type) {
  std::vector<Val> operands = {x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return w.op("stablehlo.dynamic_slice", operands, type, "slice_sizes = " + i64_array(sizes));
}

Val dynamic_update_slice(Writer& w, const Val& x, const Val& update, std::span<const Val> starts) {
  std::vector<Val> operands = {x, update};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return w.op("stablehlo.dynamic_update_slice", operands, x.type);
}

Val add_at(Writer& w, const Val& x, const Val& update, std::span<const Val> starts, std::span<const int64_t> sizes) {
  const Val old = dynamic_slice(w, x, starts, sizes, update.type);
  return dynamic_update_slice(w, x, w.binary("stablehlo.add", old, update), starts);
}

Val block_start(Writer& w, const Val& index, int64_t block, int64_t length) {
  const Val nominal = w.binary("stablehlo.multiply", index, i32(w, block));
  return w.binary("stablehlo.minimum", nominal, i32(w, length - block));
}

Val heads_major(Writer& w, const Info& a, const Val& x) {
  const Val converted = w.convert(x, tensor_type(a.acc, std::vector<int64_t>{a.B, a.T, a.H, a.Dh}));
  const Val split = w.reshape(converted, a.acc_type({a.B, a.T, a.K, a.G, a.Dh}));
  return transpose(w, split, {0, 2, 3, 1, 4}, a.acc_type({a.B, a.K, a.G, a.T, a.Dh}));
}

Val heads_minor(Writer& w, const Info& a, const Val& x, ir::DType dtype) {
  const Val t = transpose(w, x, {0, 3, 1, 2, 4}, a.acc_type({a.B, a.T, a.K, a.G, a.Dh}));
  const Val merged = w.reshape(t, a.acc_type({a.B, a.T, a.H, a.Dh}));
  return w.convert(merged, tensor_type(dtype, std::vector<int64_t>{a.B, a.T, a.H, a.Dh}));
}

std::optional<Val> tile_mask(Writer& w, const Info& a, int64_t bq, int64_t bk, const Val& q0, const Val* qmin,
                             const Val& k0, const Val* kmin, const Val* qseg, const Val* kvseg) {
  const std::string pair_i32 = tensor_type(ir::DType::kS32, std::vector<int64_t>{bq, bk});
  const std::string tile_pred = tensor_type(ir::DType::kPred, std::vector<int64_t>{a.B, a.K, a.G, bq, bk});
  std::optional<Val> mask;
  auto both = [&](const Val& m) { mask = mask ? w.binary("stablehlo.and", *mask, m) : m; };
  if (a.causal || qmin != nullptr || kmin != nullptr) {
    const Val i = w.binary("stablehlo.add", w.op("stablehlo.iota", {}, pair_i32, "iota_dimension = 0 : i64"),
                           w.broadcast(q0, pair_i32, {}));
    const Val j = w.binary("stablehlo.add", w.op("stablehlo.iota", {}, pair_i32, "iota_dimension = 1 : i64"),
                           w.broadcast(k0, pair_i32, {}));
    if (qmin != nullptr) both(w.compare(i, w.broadcast(*qmin, pair_i32, {}), "GE"));
    if (kmin != nullptr) both(w.compare(j, w.broadcast(*kmin, pair_i32, {}), "GE"));
    if (a.causal) both(w.compare(j, i, "LE"));
    if (a.window > 0) {  // j > i - W: the W keys up to and including i
      both(w.compare(j, w.binary("stablehlo.subtract", i, w.splat(ir::DType::kS32, std::vector<int64_t>{bq, bk}, static_cast<double>(a.window))), "GT"));
    }
  }
  if (mask) mask = w.broadcast(*mask, tile_pred, std::vector<int64_t>{3, 4});
  if (qseg != nullptr) {
    const std::string seg_pair = tensor_type(ir::DType::kS32, std::vector<int64_t>{a.B, bq, bk});
    const Val same = w.compare(w.broadcast(*qseg, seg_pair, std::vector<int64_t>{0, 1}),
                               w.broadcast(*kvseg, seg_pair, std::vector<int64_t>{0, 2}), "EQ");
    both(w.broadcast(same, tile_pred, std::vector<int64_t>{0, 3, 4}));
  }
  return mask;
}

Val tile_scores(Writer& w, const Info& a, const Val& qblk, const Val& kblk, int64_t bq, int64_t bk) {
  const std::string type = a.acc_type({a.B, a.K, a.G, bq, bk});
  const Val z = dot(w, qblk, kblk, {0, 1}, {0, 2}, {4}, {3}, type);
  return w.binary("stablehlo.multiply", z, w.splat(a.acc, std::vector<int64_t>{a.B, a.K, a.G, bq, bk}, a.scale));
}

std::vector<Val> counted_loop(Writer& w, const Val& lo, const Val& hi, const std::vector<Val>& state,
                              const LoopBody& body) {
  std::vector<Val> carried = {lo, hi};
  carried.insert(carried.end(), state.begin(), state.end());
  std::vector<std::string> types;
  for (const Val& v : carried) types.push_back(v.type);
  const std::string cond = w.region(types, [](Writer& r, std::span<const Val> args) {
    return std::vector<Val>{r.compare(args[0], args[1], "LT")};
  });
  const std::string step = w.region(types, [&](Writer& r, std::span<const Val> args) {
    std::vector<Val> next = body(r, args[0], args.subspan(2));
    KILN_CHECK(next.size() == state.size()) << "a loop body gave " << next.size() << " values for " << state.size();
    for (size_t i = 0; i < next.size(); ++i) {
      KILN_CHECK(next[i].type == state[i].type) << "loop value " << i << ": " << next[i].type << " for " << state[i].type;
    }
    std::vector<Val> out = {r.binary("stablehlo.add", args[0], i32(r, 1)), args[1]};
    out.insert(out.end(), next.begin(), next.end());
    return out;
  });
  const std::vector<std::string> regions = {cond, step};
  std::vector<Val> results = w.op_multi("stablehlo.while", carried, types, "", regions);
  return std::vector<Val>(results.begin() + 2, results.end());
}

}  // namespace kiln::backend::pjrt::attention
