// The rng, attention and attention_grad lowerings on XLA's CPU plugin against the reference
// interpreter, beyond the registry examples:
//  - rng: bit for bit the values of ops::rng_fill (the CPU backend's generator), for every
//    distribution, f32 and bf16, whole and as per-device blocks of a split array on 2- and
//    4-device meshes (one program, offsets from stablehlo.replica_id);
//  - attention forward and backward on sequences longer than one block (1100 and more keys
//    and rows against blocks of 512, so the last block is ragged): causal, sliding window
//    (blocks skipped), sinks, GQA, packed segments with rows that see no key, cross
//    attention, bf16 and f64.
//
// Tolerances: rng is exact (bits). Attention: expect_close's defaults (1e-5 relative to
// 1 + |want| for f32, whose sums over a tile run in f32 against the interpreter's double;
// 1e-2 for bf16, whose results round to bf16 on both sides), except where stated.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/pjrt/stablehlo/emitter.h"
#include "kiln/base/check.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/rng.h"
#include "tests/backend/pjrt/pjrt_testing.h"

namespace kiln::backend::pjrt {
namespace {

using ir::Literal;

std::unique_ptr<ir::Module> parse(const std::string& text) {
  auto module = ir::parse_module(text);
  EXPECT_TRUE(module.ok()) << module.status().message() << "\n" << text;
  return module.ok() ? std::move(*module) : nullptr;
}

std::string emit(const ir::Module& module, const EmitOptions& options) {
  auto emitted = emit_stablehlo(module, options);
  EXPECT_TRUE(emitted.ok()) << emitted.status().message();
  return emitted.ok() ? *emitted : "";
}

// ---- rng ----

std::string rng_module(const std::string& type, const std::string& dist, int64_t seed, const std::string& split = "") {
  return fmt::format("module @t\n\nENTRY computation @main {{\n  ROOT %r = {} rng(), distribution={}, seed={}{}\n}}\n", type,
                     dist, seed, split.empty() ? "" : fmt::format(", split=\"{}\"", split));
}

// The global array as the CPU backend draws it: rng_fill over all elements, rounded like the
// interpreter's literal (bf16 to nearest even; uniform kept below 1).
std::vector<double> global_values(const std::string& dist_name, ir::DType dtype, int64_t seed, int64_t n) {
  ops::RngDistribution dist = dist_name == "uniform" ? ops::RngDistribution::kUniform
                              : dist_name == "normal" ? ops::RngDistribution::kNormal
                                                      : ops::RngDistribution::kTruncatedNormal;
  std::vector<float> f(static_cast<size_t>(n));
  ops::rng_fill(dist, seed, 0, n, f.data());
  std::vector<double> out(f.begin(), f.end());
  for (double& v : out) {
    v = ir::round_to_dtype(dtype, v);
    if (dist == ops::RngDistribution::kUniform) v = ops::round_uniform(dtype, v);
  }
  return out;
}

// Bitwise: the f64 values hold f32 or bf16 values exactly, so equal doubles are equal bits.
void expect_bits(const std::vector<double>& want, const Literal& got, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(want.size()), got.shape().num_elements()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::bit_cast<uint64_t>(want[i]) != std::bit_cast<uint64_t>(got.at(static_cast<int64_t>(i)))) {
      if (++bad <= 5) {
        ADD_FAILURE() << what << " element " << i << ": plugin " << fmt::format("{:a}", got.at(static_cast<int64_t>(i)))
                      << ", rng_fill " << fmt::format("{:a}", want[i]);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " elements differ";
}

struct RngCase {
  std::string dist, dtype;
};
void PrintTo(const RngCase& c, std::ostream* os) { *os << c.dist << " " << c.dtype; }

class RngWhole : public ::testing::TestWithParam<RngCase> {};

// 37 x 129 elements: odd sizes; a truncated normal redraws about 220 of them, a few twice.
TEST_P(RngWhole, BitIdenticalToRngFill) {
  const RngCase& c = GetParam();
  for (int64_t seed : {11, -5}) {
    std::unique_ptr<ir::Module> module = parse(rng_module(fmt::format("{}[37,129]", c.dtype), c.dist, seed));
    ASSERT_NE(module, nullptr);
    auto got = testing::run_on_cpu_plugin(*module, EmitOptions{}, {{}});
    ASSERT_TRUE(got.ok()) << got.status().message();
    const ir::DType dtype = module->entry()->root()->shape().dtype();
    expect_bits(global_values(c.dist, dtype, seed, 37 * 129), (*got)[0][0],
                fmt::format("{} {} seed {}", c.dist, c.dtype, seed));
  }
}

INSTANTIATE_TEST_SUITE_P(Dists, RngWhole,
                         ::testing::Values(RngCase{"uniform", "f32"}, RngCase{"normal", "f32"},
                                           RngCase{"truncated_normal", "f32"}, RngCase{"uniform", "bf16"},
                                           RngCase{"normal", "bf16"}, RngCase{"truncated_normal", "bf16"}),
                         [](const auto& info) { return info.param.dist + "_" + info.param.dtype; });

// Each device's block of a split array is the matching block of the one-device array, on the
// plugin as in the interpreter.
struct SplitCase {
  std::string name;
  config::Mesh mesh;
  std::vector<int64_t> local;
  std::string split;
};

void expect_split_blocks(const SplitCase& c, const std::string& dist, const std::string& dtype) {
  std::string dims_text;
  for (size_t d = 0; d < c.local.size(); ++d) dims_text += fmt::format("{}{}", d > 0 ? "," : "", c.local[d]);
  std::unique_ptr<ir::Module> module = parse(rng_module(fmt::format("{}[{}]", dtype, dims_text), dist, 7, c.split));
  ASSERT_NE(module, nullptr);
  EmitOptions options;
  options.mesh = c.mesh;
  const std::vector<std::vector<Literal>> args(c.mesh.num_devices());
  auto got = testing::run_on_cpu_plugin(*module, options, args);
  ASSERT_TRUE(got.ok()) << got.status().message();
  auto want = testing::run_on_interpreter(*module, c.mesh, args);
  ASSERT_TRUE(want.ok()) << want.status().message();
  const std::string what = fmt::format("{} {} {} split {}", c.name, dist, dtype, c.split);
  testing::expect_close(*want, *got, what, /*relative=*/0);
  // And against the global array directly: device r's block at its shard offsets.
  const ir::Sharding split = ops::parse_split(c.split, static_cast<int>(c.local.size()));
  const int rank = static_cast<int>(c.local.size());
  std::vector<int64_t> global(c.local);
  for (int d = 0; d < rank; ++d) global[d] *= c.mesh.size(split.dims[d]);
  int64_t n = 1;
  for (int64_t g : global) n *= g;
  const ir::DType element = module->entry()->root()->shape().dtype();
  const std::vector<double> all = global_values(dist, element, 7, n);
  for (int64_t r = 0; r < c.mesh.num_devices(); ++r) {
    std::vector<double> block;
    const int64_t local_n = (*got)[r][0].shape().num_elements();
    for (int64_t e = 0; e < local_n; ++e) {
      int64_t rest = e, flat = 0, stride = 1;
      std::vector<int64_t> idx(rank);
      for (int d = rank - 1; d >= 0; --d) idx[d] = rest % c.local[d], rest /= c.local[d];
      for (int d = rank - 1; d >= 0; --d) {
        flat += (idx[d] + c.mesh.shard_index(r, split.dims[d]) * c.local[d]) * stride;
        stride *= global[d];
      }
      block.push_back(all[flat]);
    }
    expect_bits(block, (*got)[r][0], fmt::format("{} device {}", what, r));
  }
}

TEST(RngSplit, DeviceBlocksAreBlocksOfTheGlobalArray) {
  const std::vector<SplitCase> cases = {
      {"2 devices, rows", config::Mesh({"fsdp"}, {2}), {9, 33}, "fsdp;"},
      {"4 devices, both dims", config::Mesh({"fsdp", "tensor"}, {2, 2}), {8, 13}, "fsdp;tensor"},
      {"4 devices, two axes on one dim", config::Mesh({"fsdp", "tensor"}, {2, 2}), {5, 17}, ";tensor,fsdp"},
      {"4 devices, rank 3, middle dim", config::Mesh({"data", "fsdp"}, {2, 2}), {3, 7, 11}, ";fsdp;"},
  };
  for (const SplitCase& c : cases) {
    for (const std::string dist : {"uniform", "normal", "truncated_normal"}) {
      for (const std::string dtype : {"f32", "bf16"}) expect_split_blocks(c, dist, dtype);
    }
  }
}

TEST(RngText, SplitOffsetsComeFromReplicaIdAndTheGeneratorIsUnsigned64Bit) {
  std::unique_ptr<ir::Module> module = parse(rng_module("f32[8,13]", "truncated_normal", 7, "fsdp;tensor"));
  ASSERT_NE(module, nullptr);
  EmitOptions options;
  options.mesh = config::Mesh({"fsdp", "tensor"}, {2, 2});
  const std::string text = emit(*module, options);
  EXPECT_NE(text.find("stablehlo.replica_id"), std::string::npos) << text;
  EXPECT_NE(text.find("stablehlo.dynamic_slice"), std::string::npos) << text;
  EXPECT_NE(text.find("stablehlo.shift_right_logical"), std::string::npos) << text;
  EXPECT_NE(text.find("xui64>"), std::string::npos) << text;
  EXPECT_NE(text.find("stablehlo.while"), std::string::npos) << text;  // the redraws
  // Device (1, 1)'s block starts at global row 8, column 13 of a 16 x 26 array: 8 * 26 + 13.
  EXPECT_NE(text.find("dense<[0, 13, 208, 221]>"), std::string::npos) << text;
}

// ---- attention ----

struct AttentionCase {
  std::string name;
  int64_t B = 1, T = 1100, S = 1100, H = 4, K = 2, Dh = 8;
  std::string dtype = "f32";
  std::string sinks;  // the sinks' dtype; empty: no sinks
  bool segments = false;
  bool orphans = false;  // some query rows' segment has no key (they see no key at all)
  std::string attrs;
  double relative = -1;
};

std::string stats_dtype(const std::string& dtype) { return dtype == "f64" ? "f64" : "f32"; }

// The operand declarations shared by attention and attention_grad; names in operand order.
std::string attention_params(const AttentionCase& c, std::vector<std::string>& names, int& index) {
  std::string text;
  auto param = [&](const std::string& name, const std::string& type) {
    text += fmt::format("  %{} = {} parameter(), index={}\n", name, type, index++);
    names.push_back("%" + name);
  };
  param("q", fmt::format("{}[{},{},{},{}]", c.dtype, c.B, c.T, c.H, c.Dh));
  param("k", fmt::format("{}[{},{},{},{}]", c.dtype, c.B, c.S, c.K, c.Dh));
  param("v", fmt::format("{}[{},{},{},{}]", c.dtype, c.B, c.S, c.K, c.Dh));
  if (!c.sinks.empty()) param("sinks", fmt::format("{}[{}]", c.sinks, c.H));
  if (c.segments) {
    param("qseg", fmt::format("s32[{},{}]", c.B, c.T));
    param("kvseg", fmt::format("s32[{},{}]", c.B, c.S));
  }
  return text;
}

std::string forward_module(const AttentionCase& c) {
  std::vector<std::string> names;
  int index = 0;
  const std::string params = attention_params(c, names, index);
  return fmt::format(
      "module @t\n\nENTRY computation @main {{\n{}  ROOT %a = ({}[{},{},{},{}], {}[{},{},{}]) attention({}), {}\n}}\n",
      params, c.dtype, c.B, c.T, c.H, c.Dh, stats_dtype(c.dtype), c.B, c.H, c.T, fmt::join(names, ", "), c.attrs);
}

std::string backward_module(const AttentionCase& c) {
  std::vector<std::string> names;
  int index = 0;
  std::string params = attention_params(c, names, index);
  const std::string q = fmt::format("{}[{},{},{},{}]", c.dtype, c.B, c.T, c.H, c.Dh);
  const std::string kv = fmt::format("{}[{},{},{},{}]", c.dtype, c.B, c.S, c.K, c.Dh);
  const std::string lse = fmt::format("{}[{},{},{}]", stats_dtype(c.dtype), c.B, c.H, c.T);
  for (const auto& [name, type] : std::vector<std::pair<std::string, std::string>>{
           {"out", q}, {"lse", lse}, {"dout", q}, {"dlse", lse}}) {
    params += fmt::format("  %{} = {} parameter(), index={}\n", name, type, index++);
    names.push_back("%" + name);
  }
  const std::string result =
      fmt::format("({}, {}, {}{})", q, kv, kv, c.sinks.empty() ? "" : fmt::format(", {}[{}]", c.sinks, c.H));
  return fmt::format("module @t\n\nENTRY computation @main {{\n{}  ROOT %g = {} attention_grad({}), {}\n}}\n", params,
                     result, fmt::join(names, ", "), c.attrs);
}

Literal random_literal(const ir::Shape& shape, std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> values(static_cast<size_t>(shape.num_elements()));
  for (double& v : values) v = u(rng);
  return Literal(shape, std::move(values));
}

// Packed documents: ids change at a few positions, crossing block boundaries; with
// `orphans`, the queries' last 40 rows of batch row 0 belong to a document with no key.
Literal segment_ids(int64_t B, int64_t L, bool queries, bool orphans) {
  std::vector<double> ids;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < L; ++t) {
      double id = t < 300 + 50 * b ? 1 : t < 530 ? 2 : t < 1030 ? 3 : 4;
      if (queries && orphans && b == 0 && t >= L - 40) id = 9;
      ids.push_back(id);
    }
  }
  return Literal(ir::Shape(ir::DType::kS32, {B, L}), std::move(ids));
}

// The forward on both, then the backward on both at the interpreter's out and lse with a
// random dout and dlse.
void expect_attention(const AttentionCase& c) {
  SCOPED_TRACE(c.name);
  std::unique_ptr<ir::Module> forward = parse(forward_module(c));
  std::unique_ptr<ir::Module> backward = parse(backward_module(c));
  ASSERT_NE(forward, nullptr);
  ASSERT_NE(backward, nullptr);
  std::mt19937_64 rng(1234);
  std::vector<Literal> args;
  const ir::Computation& entry = *forward->entry();
  for (int i = 0; i < 3; ++i) args.push_back(random_literal(entry.param(i)->shape(), rng, -1.5, 1.5));
  if (!c.sinks.empty()) args.push_back(random_literal(entry.param(3)->shape(), rng, 1, 3));
  if (c.segments) {
    args.push_back(segment_ids(c.B, c.T, true, c.orphans));
    args.push_back(segment_ids(c.B, c.S, false, false));
  }
  auto want = testing::run_on_interpreter(*forward, config::Mesh(), {args});
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = testing::run_on_cpu_plugin(*forward, EmitOptions{}, {args});
  ASSERT_TRUE(got.ok()) << got.status().message();
  testing::expect_close(*want, *got, c.name + " forward", c.relative);

  const ir::Computation& grad_entry = *backward->entry();
  const int n = static_cast<int>(args.size());
  args.push_back((*want)[0][0]);  // out
  args.push_back((*want)[0][1]);  // lse
  args.push_back(random_literal(grad_entry.param(n + 2)->shape(), rng, -1, 1));      // dout
  args.push_back(random_literal(grad_entry.param(n + 3)->shape(), rng, -0.5, 0.5));  // dlse
  auto want_grad = testing::run_on_interpreter(*backward, config::Mesh(), {args});
  ASSERT_TRUE(want_grad.ok()) << want_grad.status().message();
  auto got_grad = testing::run_on_cpu_plugin(*backward, EmitOptions{}, {args});
  ASSERT_TRUE(got_grad.ok()) << got_grad.status().message();
  testing::expect_close(*want_grad, *got_grad, c.name + " backward", c.relative);
}

TEST(AttentionBlocked, CausalWithSinksAndGqa) {
  expect_attention({.name = "causal sinks gqa", .sinks = "f32", .attrs = "causal=1, scale=0.35"});
}

// Window 128 over 1600 rows: key blocks before a query block's window and query blocks past a
// key block's window are skipped.
TEST(AttentionBlocked, SlidingWindowSkipsBlocks) {
  expect_attention({.name = "window", .T = 1600, .S = 1600, .sinks = "f32", .attrs = "causal=1, scale=0.35, window=128"});
}

TEST(AttentionBlocked, PackedSegmentsNonCausal) {
  expect_attention({.name = "segments", .B = 2, .H = 6, .K = 2, .segments = true, .attrs = "scale=0.35"});
}

// Rows whose document has no key: out 0 and lse -inf without sinks, lse = sink with them.
TEST(AttentionBlocked, RowsThatSeeNoKey) {
  expect_attention({.name = "orphans", .segments = true, .orphans = true, .attrs = "causal=1, scale=0.35"});
  expect_attention(
      {.name = "orphans sinks", .sinks = "f32", .segments = true, .orphans = true, .attrs = "causal=1, scale=0.35"});
}

// Cross attention: one query block over three key blocks, and more rows than keys (causal).
TEST(AttentionBlocked, CrossAttention) {
  expect_attention({.name = "cross", .T = 300, .S = 1100, .H = 2, .K = 1, .sinks = "f32", .attrs = "scale=0.35"});
  expect_attention({.name = "causal T > S", .T = 1300, .S = 700, .segments = true, .attrs = "causal=1, scale=0.35"});
}

// bf16 inputs accumulate in f32; the sinks may have another dtype.
TEST(AttentionBlocked, Bf16) {
  expect_attention({.name = "bf16", .dtype = "bf16", .sinks = "f32", .attrs = "causal=1, scale=0.35, window=700"});
}

TEST(AttentionBlocked, F64) {
  expect_attention({.name = "f64", .T = 1030, .S = 1030, .H = 2, .K = 1, .Dh = 4, .dtype = "f64", .sinks = "f64",
                    .attrs = "causal=1, scale=0.5", .relative = 1e-9});
}

// One tile: no loop. Longer sequences: loops, and never a score tensor as long as the keys.
TEST(AttentionText, DirectFormForOneBlockAndLoopsBeyond) {
  AttentionCase small{.T = 300, .S = 300, .sinks = "f32", .attrs = "causal=1, scale=0.5"};
  std::unique_ptr<ir::Module> direct = parse(forward_module(small));
  ASSERT_NE(direct, nullptr);
  EXPECT_EQ(emit(*direct, EmitOptions{}).find("stablehlo.while"), std::string::npos);
  AttentionCase big{.T = 2048, .S = 2048, .sinks = "f32", .attrs = "causal=1, scale=0.5"};
  for (const std::string& text : {forward_module(big), backward_module(big)}) {
    std::unique_ptr<ir::Module> module = parse(text);
    ASSERT_NE(module, nullptr);
    const std::string emitted = emit(*module, EmitOptions{});
    EXPECT_NE(emitted.find("stablehlo.while"), std::string::npos);
    EXPECT_EQ(emitted.find("2048x2048"), std::string::npos) << "a score tensor over all rows and keys";
  }
}

}  // namespace
}  // namespace kiln::backend::pjrt
