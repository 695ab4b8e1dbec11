#include "kiln/frontend/graph.h"

#include "kiln/base/check.h"
#include "kiln/base/hash.h"

namespace kiln::frontend {

namespace {
ir::Computation* make_entry(ir::Module& m) { return m.add_computation("main"); }
}  // namespace

Graph::Graph(std::string module_name)
    : module_(std::make_unique<ir::Module>(std::move(module_name))), builder_(make_entry(*module_)) {}

Tensor Graph::parameter(const std::string& name, Shape shape, std::vector<std::string> logical_axes) {
  ir::Instr* p = builder_.parameter(static_cast<int>(parameters_.size()), std::move(shape), qualified(name));
  Tensor t(this, p);
  if (!logical_axes.empty()) t = t.axes(std::move(logical_axes));
  parameters_.push_back(t);
  return t;
}

Tensor Graph::constant(ir::Literal literal) { return Tensor(this, builder_.constant(std::move(literal))); }

Tensor Graph::scalar(double value, DType dtype) { return Tensor(this, builder_.scalar(dtype, value)); }

Tensor Graph::full(std::vector<int64_t> dims, double value, DType dtype) {
  return Tensor(this, builder_.full(Shape(dtype, std::move(dims)), value));
}

Tensor Graph::iota(std::vector<int64_t> dims, int axis, DType dtype) {
  return Tensor(this, builder_.iota(Shape(dtype, std::move(dims)), axis));
}

Tensor Graph::random(std::vector<int64_t> dims, const std::string& distribution, int64_t seed, DType dtype) {
  // The op's seed mixes the user's seed with this call's stream number.
  uint64_t stream_seed = mix64(hash_combine(static_cast<uint64_t>(seed), static_cast<uint64_t>(random_streams_++)));
  int64_t op_seed = static_cast<int64_t>(stream_seed >> 1);  // keep it a non-negative int64
  return Tensor(this, builder_.rng(Shape(dtype, std::move(dims)), distribution, op_seed));
}

void Graph::set_outputs(const std::vector<Tensor>& outputs) {
  std::vector<ir::Instr*> instrs;
  for (const Tensor& t : outputs) instrs.push_back(t.instr());
  computation().set_root(instrs.size() == 1 ? instrs[0] : builder_.tuple(instrs));
}

Graph::Scope::Scope(Graph* graph, const std::string& name) : graph_(graph) {
  graph_->scopes_.push_back(graph_->qualified(name));
  graph_->sync_builder_name();
}

Graph::Scope::~Scope() {
  graph_->scopes_.pop_back();
  graph_->sync_builder_name();
}

const std::string& Graph::current_scope() const {
  static const std::string kEmpty;
  return scopes_.empty() ? kEmpty : scopes_.back();
}

std::string Graph::qualified(const std::string& name) const {
  if (scopes_.empty()) return name;
  if (name.empty()) return scopes_.back();
  return scopes_.back() + "." + name;
}

void Graph::sync_builder_name() { builder_.set_name(current_scope()); }

std::unique_ptr<ir::Module> Graph::release() {
  KILN_CHECK(module_->entry()->root() != nullptr) << "set_outputs() before release()";
  return std::move(module_);
}

}  // namespace kiln::frontend
