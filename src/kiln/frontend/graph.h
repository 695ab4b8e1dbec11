// Graph: the tracing context that owns the module being built. Model code runs once per
// trace, calling Tensor operations that append instructions; name scopes give every
// instruction a readable name ("layers.3.mlp...") that dumps and profiles show.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/frontend/tensor.h"
#include "kiln/ir/literal.h"
#include "kiln/ops/builder.h"

namespace kiln::frontend {

inline Shape f32(std::vector<int64_t> dims) { return Shape(DType::kF32, std::move(dims)); }
inline Shape bf16(std::vector<int64_t> dims) { return Shape(DType::kBF16, std::move(dims)); }
inline Shape s32(std::vector<int64_t> dims) { return Shape(DType::kS32, std::move(dims)); }

class Graph {
 public:
  explicit Graph(std::string module_name);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  ir::Module& module() { return *module_; }
  ir::Computation& computation() { return *module_->entry(); }
  ops::Builder& builder() { return builder_; }

  // Inputs of the traced program, numbered in creation order.
  Tensor parameter(const std::string& name, Shape shape, std::vector<std::string> logical_axes = {});
  const std::vector<Tensor>& parameters() const { return parameters_; }

  Tensor constant(ir::Literal literal);
  Tensor scalar(double value, DType dtype = DType::kF32);
  Tensor full(std::vector<int64_t> dims, double value, DType dtype = DType::kF32);
  Tensor zeros(std::vector<int64_t> dims, DType dtype = DType::kF32) { return full(std::move(dims), 0.0, dtype); }
  Tensor iota(std::vector<int64_t> dims, int axis, DType dtype = DType::kS32);
  // Counter-based random values ("uniform", "normal", "truncated_normal"); each call draws
  // from its own stream, derived from `seed` and a per-graph counter, so a trace is
  // reproducible and separate calls are independent.
  Tensor random(std::vector<int64_t> dims, const std::string& distribution, int64_t seed, DType dtype = DType::kF32);

  // Sets the program's outputs (the root tuple).
  void set_outputs(const std::vector<Tensor>& outputs);

  // Name scopes: while a Scope lives, new instructions are named "<outer>.<name>...".
  class Scope {
   public:
    Scope(Graph* graph, const std::string& name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Graph* graph_;
  };
  Scope scope(const std::string& name) { return Scope(this, name); }
  // "<current scope>.<name>" (or just name outside any scope).
  std::string qualified(const std::string& name) const;
  const std::string& current_scope() const;

  // Hands over the traced module (the graph must not be used afterwards).
  std::unique_ptr<ir::Module> release();

 private:
  void sync_builder_name();

  std::unique_ptr<ir::Module> module_;
  ops::Builder builder_;
  std::vector<Tensor> parameters_;
  std::vector<std::string> scopes_;  // full dotted paths, innermost last
  int64_t random_streams_ = 0;
};

}  // namespace kiln::frontend
