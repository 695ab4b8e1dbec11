// The attention and attention_grad ops: hand-computed values (sink weight, sliding window
// of one key, a row with no visible key, the sign of the sink's gradient), and the CPU
// flash kernels against the reference evaluation on shapes that span several tiles
// (partial tiles, windows shorter and longer than a tile and than the sequence, packed
// segments, GQA, non-causal cross attention, bf16). The op-table test checks the
// gradients of every example against finite differences.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/registry.h"
#include "tests/testing/random_literals.h"

namespace kiln {
namespace {

std::vector<ir::Literal> run(const std::string& text, const std::vector<ir::Literal>& args) {
  auto module = ir::parse_module(text);
  KILN_CHECK_OK(module);
  KILN_CHECK_OK(ops::verify(**module));
  auto out = interp::run(**module, args);
  KILN_CHECK_OK(out);
  return *out;
}

ir::Literal f32(std::vector<int64_t> dims, std::vector<double> v) {
  return ir::Literal(ir::Shape(ir::DType::kF32, std::move(dims)), std::move(v));
}

// One query, one key: out = p v with p = e^z / (e^z + e^s), lse = log(e^z + e^s); and the
// backward with dout = 1: dsink = -p_sink (dout . out) = -(1 - p) 3 p < 0 (a larger sink
// takes weight from every key), dv = p.
TEST(AttentionOps, SinkTakesItsShareOfTheSoftmax) {
  const std::string program = R"(module @m
ENTRY computation @main {
  %q = f32[1,1,1,1] parameter(), index=0
  %k = f32[1,1,1,1] parameter(), index=1
  %v = f32[1,1,1,1] parameter(), index=2
  %s = f32[1] parameter(), index=3
  %a = (f32[1,1,1,1], f32[1,1,1]) attention(%q, %k, %v, %s), causal=1, scale=0.5
  %o = f32[1,1,1,1] get_tuple_element(%a), index=0
  %l = f32[1,1,1] get_tuple_element(%a), index=1
  %one = f32[] constant(1)
  %do = f32[1,1,1,1] broadcast(%one), dims={}
  %zero = f32[] constant(0)
  %dl = f32[1,1,1] broadcast(%zero), dims={}
  %g = (f32[1,1,1,1], f32[1,1,1,1], f32[1,1,1,1], f32[1]) attention_grad(%q, %k, %v, %s, %o, %l, %do, %dl), causal=1, scale=0.5
  %dq = f32[1,1,1,1] get_tuple_element(%g), index=0
  %dk = f32[1,1,1,1] get_tuple_element(%g), index=1
  %dv = f32[1,1,1,1] get_tuple_element(%g), index=2
  %ds = f32[1] get_tuple_element(%g), index=3
  ROOT %t = (f32[1,1,1,1], f32[1,1,1], f32[1,1,1,1], f32[1,1,1,1], f32[1,1,1,1], f32[1]) tuple(%o, %l, %dq, %dk, %dv, %ds)
}
)";
  auto out = run(program, {f32({1, 1, 1, 1}, {1}), f32({1, 1, 1, 1}, {2}), f32({1, 1, 1, 1}, {3}), f32({1}, {0.5})});
  const double z = 1.0, s = 0.5, p = std::exp(z) / (std::exp(z) + std::exp(s));
  EXPECT_NEAR(out[0].at(0), 3 * p, 1e-6);
  EXPECT_NEAR(out[1].at(0), std::log(std::exp(z) + std::exp(s)), 1e-6);
  // A single key: dout . v = dout . out / p, so ds = p (3 - 3p) scale = 0.5 * 3p(1-p).
  EXPECT_NEAR(out[2].at(0), 0.5 * 3 * p * (1 - p) * 2, 1e-6);  // dq = ds k
  EXPECT_NEAR(out[3].at(0), 0.5 * 3 * p * (1 - p) * 1, 1e-6);  // dk = ds q
  EXPECT_NEAR(out[4].at(0), p, 1e-6);
  EXPECT_LT(out[5].at(0), 0.0);
  EXPECT_NEAR(out[5].at(0), -(1 - p) * 3 * p, 1e-6);
}

// window=1 keeps exactly one key, the query itself: without sinks out_i = v_i whatever the
// logits (the diagonal is always visible, so a causal or sliding row is never empty).
TEST(AttentionOps, WindowOfOneSeesOnlyItself) {
  const std::string program = R"(module @m
ENTRY computation @main {
  %q = f32[1,3,2,2] parameter(), index=0
  %k = f32[1,3,1,2] parameter(), index=1
  %v = f32[1,3,1,2] parameter(), index=2
  %a = (f32[1,3,2,2], f32[1,2,3]) attention(%q, %k, %v), causal=1, scale=0.3, window=1
  ROOT %o = f32[1,3,2,2] get_tuple_element(%a), index=0
}
)";
  std::mt19937_64 rng(3);
  std::vector<ir::Literal> args = {testing::random_literal(ir::Shape(ir::DType::kF32, {1, 3, 2, 2}), rng, -2, 2),
                                   testing::random_literal(ir::Shape(ir::DType::kF32, {1, 3, 1, 2}), rng, -2, 2),
                                   testing::random_literal(ir::Shape(ir::DType::kF32, {1, 3, 1, 2}), rng, -2, 2)};
  auto out = run(program, args);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t e = 0; e < 2; ++e) EXPECT_NEAR(out[0].at((i * 2 + h) * 2 + e), args[2].at(i * 2 + e), 1e-6);
    }
  }
}

// Segments can leave a row with no visible key (its id appears nowhere among the keys):
// such a row gives out = 0 and lse = the sink (-inf without sinks), with no NaN.
TEST(AttentionOps, RowWithoutVisibleKeysIsZero) {
  const std::string program = R"(module @m
ENTRY computation @main {
  %q = f32[1,2,1,2] parameter(), index=0
  %k = f32[1,2,1,2] parameter(), index=1
  %v = f32[1,2,1,2] parameter(), index=2
  %s = f32[1] parameter(), index=3
  %qs = s32[1,2] constant({1, 3})
  %ks = s32[1,2] constant({1, 1})
  ROOT %a = (f32[1,2,1,2], f32[1,1,2]) attention(%q, %k, %v, %s, %qs, %ks), scale=1
}
)";
  std::mt19937_64 rng(4);
  std::vector<ir::Literal> args;
  for (int i = 0; i < 3; ++i) args.push_back(testing::random_literal(ir::Shape(ir::DType::kF32, {1, 2, 1, 2}), rng, -1, 1));
  args.push_back(f32({1}, {0.25}));
  auto out = run(program, args);
  EXPECT_EQ(out[0].at(2), 0.0);
  EXPECT_EQ(out[0].at(3), 0.0);
  EXPECT_NEAR(out[1].at(1), 0.25, 1e-7);
  EXPECT_NE(out[0].at(0), 0.0);
  // The CPU kernel agrees.
  auto module = ir::parse_module(program);
  ASSERT_TRUE(module.ok());
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_attention_kernel_cache";
  auto exe = backend::compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<backend::Buffer> buffers;
  for (const auto& a : args) buffers.push_back(backend::Buffer::from_literal(a));
  auto got = (*exe)->run(buffers);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].get(2), 0.0);
  EXPECT_EQ((*got)[0].get(3), 0.0);
  EXPECT_NEAR((*got)[1].get(1), 0.25, 1e-7);
  EXPECT_NEAR((*got)[0].get(0), out[0].at(0), 1e-5);
}

// ---- the CPU kernels against the reference evaluation ----

struct KernelCase {
  std::string name;
  int64_t B, T, S, H, K, Dh;
  bool causal, sinks, segments;
  int64_t window;
  ir::DType dtype = ir::DType::kF32;
};

std::string kernel_program(const KernelCase& c) {
  const char* dt = c.dtype == ir::DType::kBF16 ? "bf16" : "f32";
  std::string q = fmt::format("{}[{},{},{},{}]", dt, c.B, c.T, c.H, c.Dh);
  std::string kv = fmt::format("{}[{},{},{},{}]", dt, c.B, c.S, c.K, c.Dh);
  std::string lse = fmt::format("f32[{},{},{}]", c.B, c.H, c.T);
  std::string text = "module @m\nENTRY computation @main {\n";
  int index = 0;
  std::vector<std::string> ops = {"%q", "%k", "%v"};
  text += fmt::format("  %q = {} parameter(), index={}\n", q, index++);
  text += fmt::format("  %k = {} parameter(), index={}\n", kv, index++);
  text += fmt::format("  %v = {} parameter(), index={}\n", kv, index++);
  if (c.sinks) {
    text += fmt::format("  %s = f32[{}] parameter(), index={}\n", c.H, index++);
    ops.push_back("%s");
  }
  if (c.segments) {
    text += fmt::format("  %qs = s32[{},{}] parameter(), index={}\n", c.B, c.T, index++);
    text += fmt::format("  %ks = s32[{},{}] parameter(), index={}\n", c.B, c.S, index++);
    ops.push_back("%qs");
    ops.push_back("%ks");
  }
  text += fmt::format("  %do = {} parameter(), index={}\n", q, index++);
  text += fmt::format("  %dl = {} parameter(), index={}\n", lse, index++);
  std::string attrs = fmt::format("causal={}, scale=0.125{}", c.causal ? 1 : 0,
                                  c.window > 0 ? fmt::format(", window={}", c.window) : "");
  text += fmt::format("  %a = ({}, {}) attention({}), {}\n", q, lse, fmt::join(ops, ", "), attrs);
  text += fmt::format("  %o = {} get_tuple_element(%a), index=0\n", q);
  text += fmt::format("  %l = {} get_tuple_element(%a), index=1\n", lse);
  std::string grads = fmt::format("{}, {}, {}{}", q, kv, kv, c.sinks ? fmt::format(", f32[{}]", c.H) : "");
  text += fmt::format("  %g = ({}) attention_grad({}, %o, %l, %do, %dl), {}\n", grads, fmt::join(ops, ", "), attrs);
  text += fmt::format("  %dq = {} get_tuple_element(%g), index=0\n", q);
  text += fmt::format("  %dk = {} get_tuple_element(%g), index=1\n", kv);
  text += fmt::format("  %dv = {} get_tuple_element(%g), index=2\n", kv);
  std::vector<std::string> root = {"%o", "%l", "%dq", "%dk", "%dv"};
  std::string root_types = fmt::format("{}, {}, {}, {}, {}", q, lse, q, kv, kv);
  if (c.sinks) {
    text += fmt::format("  %ds = f32[{}] get_tuple_element(%g), index=3\n", c.H);
    root.push_back("%ds");
    root_types += fmt::format(", f32[{}]", c.H);
  }
  text += fmt::format("  ROOT %t = ({}) tuple({})\n}}\n", root_types, fmt::join(root, ", "));
  return text;
}

// Random q, k, v, dout and dlse in [-2, 2], sinks in [0, 3], packed segment ids rising
// along the sequence; dlse = 0 when `zero_dlse` (the gradient of sum(out * dout) alone).
std::vector<ir::Literal> kernel_args(const ir::Module& module, bool zero_dlse = false) {
  std::mt19937_64 rng(21);
  std::vector<ir::Literal> args;
  const ir::Computation& entry = *module.entry();
  for (int i = 0; i < entry.num_params(); ++i) {
    const ir::Shape& s = entry.param(i)->shape();
    if (s.dtype() == ir::DType::kS32) {  // packed documents: ids rise along the sequence
      std::vector<double> ids(s.num_elements());
      const int64_t len = s.dim(1);
      for (int64_t b = 0; b < s.dim(0); ++b) {
        for (int64_t t = 0; t < len; ++t) ids[b * len + t] = static_cast<double>((t * (3 + b)) / len);
      }
      args.emplace_back(s, std::move(ids));
    } else if (s.rank() == 1) {  // sinks
      args.push_back(testing::random_literal(s, rng, 0.0, 3.0));
    } else {
      args.push_back(testing::random_literal(s, rng, -2.0, 2.0));
    }
  }
  if (zero_dlse) args.back() = ir::Literal(args.back().shape());
  return args;
}

class AttentionKernel : public ::testing::TestWithParam<KernelCase> {};

void expect_near_reference(const KernelCase& c, const std::vector<backend::Buffer>& got,
                           const std::vector<ir::Literal>& want, const char* mode);

TEST_P(AttentionKernel, EqualsReferenceForwardAndBackward) {
  const KernelCase& c = GetParam();
  auto module = ir::parse_module(kernel_program(c));
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  ASSERT_TRUE(ops::verify(**module).ok()) << ops::verify(**module).to_string();
  std::vector<ir::Literal> args = kernel_args(**module);
  auto want = interp::run(**module, args);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_attention_kernel_cache";
  auto exe = backend::compile_cpu(**module, options);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ((*exe)->report().fallback_by_op.count("attention"), 0u) << "the native kernel was not used";
  EXPECT_EQ((*exe)->report().fallback_by_op.count("attention_grad"), 0u) << "the native kernel was not used";
  std::vector<backend::Buffer> buffers;
  for (const auto& a : args) buffers.push_back(backend::Buffer::from_literal(a));
  // bf16 inputs run twice: on the bf16 dot-product kernels (where the CPU has AVX512-BF16)
  // and on the f32 kernels they fall back to (KILN_ATTENTION_BF16_DOTS=0).
  for (const char* dots : {"1", "0"}) {
    if (c.dtype != ir::DType::kBF16 && dots[0] == '0') break;
    setenv("KILN_ATTENTION_BF16_DOTS", dots, 1);
    auto got = (*exe)->run(buffers);
    unsetenv("KILN_ATTENTION_BF16_DOTS");
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_near_reference(c, *got, *want, dots);
  }
}

// Compares every result with the reference (`mode` names the kernel path in messages).
void expect_near_reference(const KernelCase& c, const std::vector<backend::Buffer>& got,
                           const std::vector<ir::Literal>& want, const char* mode) {
  ASSERT_EQ(got.size(), want.size());
  // f32: the reference rounds each op to f32 but sums in double; the kernel sums hundreds
  // of f32 terms in another order with a polynomial exp (~2e-7): 1e-4 of the largest entry.
  // bf16 inputs: results carry 8 significand bits, and the bf16 dot-product kernels round p
  // and ds to bf16 before their products (relative 2^-9 each), so the f32 results derived
  // from them (lse, dsinks through out) carry bf16-level error too: 2e-2.
  const char* names[] = {"out", "lse", "dq", "dk", "dv", "dsinks"};
  for (size_t i = 0; i < want.size(); ++i) {
    ir::Literal g = got[i].to_literal();
    const ir::Literal& w = want[i];
    double scale = 0;
    for (double x : w.values()) {
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    }
    double tol = (c.dtype == ir::DType::kBF16 ? 2e-2 : 1e-4) * std::max(scale, 1e-3);
    double worst = 0;
    for (int64_t j = 0; j < w.shape().num_elements(); ++j) {
      if (std::isfinite(w.at(j))) worst = std::max(worst, std::fabs(g.at(j) - w.at(j)));
    }
    std::printf("%s (bf16 dots %s) %s: max |error| %.3g = %.2g of the largest entry\n", c.name.c_str(), mode, names[i],
                worst, worst / std::max(scale, 1e-3));
    for (int64_t j = 0; j < w.shape().num_elements(); ++j) {
      if (std::isinf(w.at(j))) {
        ASSERT_EQ(g.at(j), w.at(j)) << names[i] << "[" << j << "]";
        continue;
      }
      ASSERT_NEAR(g.at(j), w.at(j), tol) << names[i] << "[" << j << "] of " << c.name << ", bf16 dots " << mode;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernel,
    ::testing::Values(
        KernelCase{"causal_sinks_gqa", 2, 150, 150, 4, 2, 64, true, true, false, 0},
        KernelCase{"window_shorter_than_tile", 1, 200, 200, 4, 1, 64, true, true, false, 24},
        KernelCase{"window_longer_than_tile", 1, 200, 200, 2, 2, 64, true, true, false, 100},
        KernelCase{"window_longer_than_sequence", 1, 130, 130, 2, 1, 64, true, false, false, 500},
        KernelCase{"packed_segments", 2, 140, 140, 4, 2, 64, true, true, true, 50},
        // Head widths 32 and 128 have kernels of their own (the width a compile-time constant).
        KernelCase{"head_dim_32_window_sinks", 2, 150, 150, 4, 2, 32, true, true, false, 64},
        KernelCase{"head_dim_128_causal_segments", 1, 140, 140, 4, 1, 128, true, false, true, 0},
        KernelCase{"bf16_head_dim_32_window", 1, 130, 130, 4, 2, 32, true, true, false, 64, ir::DType::kBF16},
        KernelCase{"non_causal_cross", 2, 70, 150, 3, 1, 16, false, false, false, 0},
        KernelCase{"non_causal_segments_odd_head_dim", 1, 90, 90, 2, 1, 7, false, true, true, 0},
        KernelCase{"bf16", 1, 130, 130, 4, 2, 64, true, true, false, 64, ir::DType::kBF16},
        KernelCase{"bf16_causal_sinks_gqa", 2, 150, 150, 4, 2, 64, true, true, false, 0, ir::DType::kBF16},
        KernelCase{"bf16_window_shorter_than_tile", 1, 200, 200, 4, 1, 64, true, true, false, 24, ir::DType::kBF16},
        KernelCase{"bf16_packed_segments_odd_length", 2, 141, 141, 4, 2, 64, true, true, true, 50, ir::DType::kBF16},
        KernelCase{"bf16_non_causal_cross", 2, 71, 150, 3, 1, 64, false, false, false, 0, ir::DType::kBF16},
        KernelCase{"bf16_head_dim_16", 1, 90, 90, 2, 1, 16, true, true, false, 0, ir::DType::kBF16}),
    [](const auto& info) { return info.param.name; });

// dk and dv sum per-thread partial sums over the query heads of a kv head: with the heads
// assigned to threads the same way on every run (a static schedule), two threads give the
// same bits every time. 4 query heads over 1 kv head, so both threads add into every key.
TEST(AttentionKernel, BackwardIsTheSameBitsOnEveryRunAtTwoThreads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  for (ir::DType dtype : {ir::DType::kF32, ir::DType::kBF16}) {
    const KernelCase c{"repeat", 1, 200, 200, 4, 1, 64, true, true, false, 0, dtype};
    auto module = ir::parse_module(kernel_program(c));
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    backend::CompileOptions options;
    options.cache_dir = ::testing::TempDir() + "kiln_attention_kernel_cache";
    auto exe = backend::compile_cpu(**module, options);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    std::vector<backend::Buffer> buffers;
    for (const auto& a : kernel_args(**module)) buffers.push_back(backend::Buffer::from_literal(a));
    std::vector<std::vector<unsigned char>> first;
    for (int run = 0; run < 6; ++run) {
      auto got = (*exe)->run(buffers);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      for (size_t i = 0; i < got->size(); ++i) {
        const auto* p = static_cast<const unsigned char*>((*got)[i].data());
        std::vector<unsigned char> bytes(p, p + (*got)[i].byte_size());
        if (run == 0) {
          first.push_back(std::move(bytes));
        } else {
          EXPECT_TRUE(bytes == first[i]) << "result " << i << " of run " << run << " differs, " << ir::dtype_name(dtype);
        }
      }
    }
  }
  omp_set_num_threads(saved);
}

// ---- against an independent PyTorch implementation (tests/reference/attention_ref.py) ----

bool torch_available() { return std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0; }

// Runs the kernels on `c` and writes inputs and results as JSON for attention_ref.py.
std::string write_torch_case(const KernelCase& c) {
  auto module = ir::parse_module(kernel_program(c));
  KILN_CHECK_OK(module);
  std::vector<ir::Literal> args = kernel_args(**module, /*zero_dlse=*/true);
  backend::CompileOptions options;
  options.cache_dir = ::testing::TempDir() + "kiln_attention_kernel_cache";
  auto exe = backend::compile_cpu(**module, options);
  KILN_CHECK_OK(exe);
  std::vector<backend::Buffer> buffers;
  for (const auto& a : args) buffers.push_back(backend::Buffer::from_literal(a));
  auto got = (*exe)->run(buffers);
  KILN_CHECK_OK(got);
  nlohmann::json j;
  j["name"] = c.name;
  j["scale"] = 0.125;
  j["causal"] = c.causal;
  j["window"] = c.window;
  std::vector<std::string> inputs = {"q", "k", "v"};
  if (c.sinks) inputs.push_back("sinks");
  if (c.segments) {
    inputs.push_back("q_segment");
    inputs.push_back("kv_segment");
  }
  inputs.push_back("dout");
  for (size_t i = 0; i < inputs.size(); ++i) {
    j[inputs[i]] = args[i].values();
    j["shape_" + inputs[i]] = args[i].shape().dims();
  }
  const char* outputs[] = {"out", "lse", "dq", "dk", "dv", "dsinks"};
  for (size_t i = 0; i < got->size(); ++i) j[std::string("kiln_") + outputs[i]] = (*got)[i].to_literal().values();
  std::string path = ::testing::TempDir() + "kiln_attention_" + c.name + ".json";
  std::ofstream(path) << j.dump();
  return path;
}

// The gradients of sum(out * dout) (dlse = 0), f32 kernels vs float64 PyTorch autograd.
TEST(AttentionVsTorch, OutputsAndGradientsMatch) {
  if (!torch_available()) GTEST_SKIP() << "/usr/bin/python3 with torch (Debian python3-torch) is not installed";
  std::string cmd = "/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) + "/tests/reference/attention_ref.py";
  for (const KernelCase& c : {KernelCase{"causal_sinks_gqa", 2, 150, 150, 4, 2, 32, true, true, false, 0},
                              KernelCase{"sliding_window_packed", 2, 140, 140, 4, 2, 64, true, true, true, 50},
                              KernelCase{"window_longer_than_sequence", 1, 100, 100, 2, 1, 64, true, true, false, 300},
                              KernelCase{"non_causal_cross_no_sinks", 1, 70, 150, 3, 1, 16, false, false, false, 0}}) {
    cmd += " " + write_torch_case(c);
  }
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace kiln
