// Random-graph differential testing: thousands of small random programs (elementwise chains
// over several dtypes, scalar and in-dim broadcasts, reductions over every axis subset,
// transposes, reshapes, slices, concatenates and matmuls) are compiled by the CPU backend
// and compared with the reference interpreter. Many independent graphs share one module
// (a tuple root) so the compiler runs once per batch, not once per graph.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/registry.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend {
namespace {

using ir::DType;
using ir::Instr;
using ir::Opcode;
using ir::Shape;

class GraphMaker {
 public:
  GraphMaker(ops::Builder& b, std::mt19937_64& rng, std::vector<Instr*>& params, std::vector<std::pair<double, double>>& ranges)
      : b_(b), rng_(rng), params_(params), ranges_(ranges) {}

  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  Instr* fresh_param(Shape shape, double lo = -2, double hi = 2) {
    Instr* p = b_.parameter(static_cast<int>(params_.size()), std::move(shape));
    params_.push_back(p);
    ranges_.push_back({lo, hi});
    return p;
  }

  std::vector<int64_t> random_dims() {
    std::vector<int64_t> dims(pick(4));
    for (auto& d : dims) d = 1 + pick(5);
    return dims;
  }

  // A random float value of `dims`, built from a few ops.
  Instr* value(const std::vector<int64_t>& dims, DType dtype, int depth) {
    if (depth == 0 || pick(4) == 0) return fresh_param(Shape(dtype, dims));
    switch (pick(9)) {
      case 0: {  // unary (domain-safe: exp of a tanh, log of 1 + x^2)
        Instr* x = value(dims, dtype, depth - 1);
        static const Opcode unary[] = {Opcode::kNeg, Opcode::kAbs, Opcode::kTanh, Opcode::kLogistic, Opcode::kSin, Opcode::kCos};
        return b_.unary(unary[pick(6)], x);
      }
      case 1: {
        Instr* x = value(dims, dtype, depth - 1);
        return b_.log(b_.add_scalar(b_.mul(x, x), 1.0));
      }
      case 2: {
        Instr* x = value(dims, dtype, depth - 1);
        return b_.exp(b_.unary(Opcode::kTanh, x));
      }
      case 3: {  // binary
        static const Opcode binary[] = {Opcode::kAdd, Opcode::kSub, Opcode::kMul, Opcode::kMax, Opcode::kMin};
        return b_.binary(binary[pick(5)], value(dims, dtype, depth - 1), value(dims, dtype, depth - 1));
      }
      case 4: {  // select on a comparison, and a scalar broadcast
        Instr* a = value(dims, dtype, depth - 1);
        Instr* c = b_.compare(a, b_.full(a->shape(), 0.25), pick(2) ? "lt" : "ge");
        return b_.select(c, a, b_.mul_scalar(value(dims, dtype, depth - 1), 1.5));
      }
      case 5: {  // reduce a bigger value over a random subset of new axes
        std::vector<int64_t> big = dims;
        std::vector<int64_t> reduced;
        int extra = 1 + pick(2);
        for (int e = 0; e < extra; ++e) {
          int64_t at = pick(static_cast<int>(big.size()) + 1);
          big.insert(big.begin() + at, 1 + pick(4));
          for (auto& r : reduced) r += r >= at;
          reduced.push_back(at);
        }
        std::sort(reduced.begin(), reduced.end());
        static const Opcode reduce[] = {Opcode::kReduceSum, Opcode::kReduceMax, Opcode::kReduceMin};
        return b_.reduce(reduce[pick(3)], value(big, dtype, depth - 1), reduced);
      }
      case 6: {  // broadcast in dims from a smaller value
        if (dims.empty()) return fresh_param(Shape(dtype, dims));
        std::vector<int64_t> kept, small;
        for (size_t d = 0; d < dims.size(); ++d) {
          if (pick(2)) {
            kept.push_back(static_cast<int64_t>(d));
            small.push_back(pick(3) == 0 ? 1 : dims[d]);
          }
        }
        return b_.broadcast(value(small, dtype, depth - 1), dims, kept);
      }
      case 7: {  // transpose or reshape of a permuted / flattened value
        if (dims.size() >= 2) {
          std::vector<int64_t> perm(dims.size());
          std::iota(perm.begin(), perm.end(), 0);
          std::shuffle(perm.begin(), perm.end(), rng_);
          std::vector<int64_t> src(dims.size());
          for (size_t i = 0; i < perm.size(); ++i) src[perm[i]] = dims[i];
          return b_.transpose(value(src, dtype, depth - 1), perm);
        }
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        return b_.reshape(value({n}, dtype, depth - 1), dims);
      }
      default: {  // matmul or a slice, then adjust
        if (dims.size() == 2 && dtype == DType::kF32) {
          int64_t k = 1 + pick(6);
          return b_.dot_general(value({dims[0], k}, dtype, depth - 1), value({k, dims[1]}, dtype, depth - 1), {}, {}, {1}, {0});
        }
        if (!dims.empty()) {
          std::vector<int64_t> big = dims, start(dims.size(), 0), limit = dims;
          big[0] += 2;
          start[0] = 1;
          limit[0] = dims[0] + 1;
          return b_.slice(value(big, dtype, depth - 1), start, limit);
        }
        return fresh_param(Shape(dtype, dims));
      }
    }
  }

 private:
  ops::Builder& b_;
  std::mt19937_64& rng_;
  std::vector<Instr*>& params_;
  std::vector<std::pair<double, double>>& ranges_;
};

TEST(RandomGraphs, CompiledEqualsInterpreter) {
  constexpr int kBatches = 40, kGraphsPerBatch = 50;  // 2,000 random graphs
  std::mt19937_64 rng(20261129);
  for (int batch = 0; batch < kBatches; ++batch) {
    ir::Module module("random_" + std::to_string(batch));
    ops::Builder b(module.add_computation("main"));
    std::vector<Instr*> params;
    std::vector<std::pair<double, double>> ranges;
    GraphMaker maker(b, rng, params, ranges);
    std::vector<Instr*> outputs;
    for (int g = 0; g < kGraphsPerBatch; ++g) {
      DType dtype = maker.pick(4) == 0 ? DType::kF64 : DType::kF32;
      outputs.push_back(maker.value(maker.random_dims(), dtype, 3));
    }
    module.entry()->set_root(b.tuple(outputs));
    ASSERT_TRUE(ops::verify(module).ok()) << ops::verify(module).to_string();
    std::vector<ir::Literal> literals;
    std::vector<Buffer> buffers;
    for (size_t i = 0; i < params.size(); ++i) {
      literals.push_back(testing::random_literal(params[i]->shape(), rng, ranges[i].first, ranges[i].second));
      buffers.push_back(Buffer::from_literal(literals.back()));
    }
    CompileOptions options;
    options.cache_dir = ::testing::TempDir() + "kiln_backend_cache";
    auto exe = compile_cpu(module, options);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    auto want = interp::run(module, literals);
    ASSERT_TRUE(want.ok());
    auto got = (*exe)->run(buffers);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    for (size_t o = 0; o < want->size(); ++o) {
      const ir::Literal& w = (*want)[o];
      double tol = w.shape().dtype() == DType::kF64 ? 1e-10 : 2e-4;
      for (int64_t i = 0; i < w.shape().num_elements(); ++i) {
        ASSERT_NEAR((*got)[o].get(i), w.at(i), tol * (1 + std::fabs(w.at(i))))
            << "batch " << batch << " graph " << o << " element " << i << "\n"
            << outputs[o]->to_string();
      }
    }
  }
}

}  // namespace
}  // namespace kiln::backend
