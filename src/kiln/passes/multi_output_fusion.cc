#include "kiln/passes/multi_output_fusion.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/logging.h"
#include "kiln/passes/fusion.h"  // is_mapped_read, is_library_result
#include "kiln/passes/fusion_inputs.h"
#include "kiln/passes/recompute_names.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

// A merged kernel with more than this many operands or outputs stops being cheaper: every
// one is a stream the loop reads or writes.
constexpr int kMaxOperands = 24;
constexpr int kMaxOutputs = 6;
bool is_fusion(const Instr* i) { return i->opcode() == Opcode::kFusion && !i->called().empty(); }

// Whether a fusion computes a value again for the backward pass (a member named by RematPass
// "*.remat" or RegatherPass "*.regather").
bool holds_recomputation(const Instr* fusion) {
  for (const ir::Computation* c : fusion->called()) {
    for (const auto& m : c->instructions()) {
      if (is_recomputation_name(m->meta().name)) return true;
    }
  }
  return false;
}
const std::string& kind(const Instr* fusion) { return fusion->attrs().get_string("kind"); }

int num_outputs(const Instr* fusion) {
  return fusion->shape().is_tuple() ? static_cast<int>(fusion->shape().elements().size()) : 1;
}

// The dims the fusion's loop runs over: its result's, or its reduction's input's.
const std::vector<int64_t>& loop_dims(const Instr* fusion) {
  const Instr* root = fusion->called()[0]->root();
  if (root->opcode() == Opcode::kTuple) root = root->operand(0);
  return kind(fusion) == "input" ? root->operand(0)->shape().dims() : root->shape().dims();
}

// The entry as the pass sees it while merging: instructions merged away (still in the
// computation until one final sweep, but read by nothing live) and a position for every live
// one that keeps the order topological (program order at the start; a merged fusion and its
// get_tuple_elements get fractional positions between their operands and their users).
struct Graph {
  std::unordered_set<const Instr*> dead;
  std::unordered_map<const Instr*, double> pos;
  // reaches()'s visited marks: the walk number that last saw each value (kept between
  // walks, so that thousands of walks do not allocate a set each).
  std::unordered_map<const Instr*, int> seen;
  int walk = 0;
};

// Whether any of `from` leads to `target` through users. Exact: a value placed after the
// target in the topological order cannot lead to it, so the walk stops there, and the
// decision never depends on how far the program goes on (the same layer merges alike at
// every depth).
bool reaches(const std::vector<Instr*>& from, const Instr* target, Graph& g) {
  const double limit = g.pos.at(target);
  std::vector<const Instr*> stack(from.begin(), from.end());
  const int walk = ++g.walk;
  while (!stack.empty()) {
    const Instr* x = stack.back();
    stack.pop_back();
    if (x == target) return true;
    if (g.dead.count(x) || g.pos.at(x) > limit) continue;
    int& seen = g.seen[x];
    if (seen == walk) continue;
    seen = walk;
    for (const Instr* u : x->users()) stack.push_back(u);
  }
  return false;
}

// Whether `operand` is (one of) the producer's value(s): the fusion itself, or an element of
// a multi-output one.
bool reads_from(const Instr* operand, const Instr* producer) {
  return operand == producer ||
         (operand->opcode() == Opcode::kGetTupleElement && operand->operand(0) == producer);
}

// The fusion a consumer's operand comes from: the operand, or the multi-output fusion it is an
// element of.
Instr* source_of(Instr* operand) {
  if (operand->opcode() == Opcode::kGetTupleElement && is_fusion(operand->operand(0))) return operand->operand(0);
  return operand;
}

// Which of the producer's outputs `value` is (reads_from holds): 0 for the fusion itself.
int output_index(const Instr* value) {
  return value->opcode() == Opcode::kGetTupleElement ? static_cast<int>(value->attrs().get_int("index")) : 0;
}

// The producer's values as the program reads them: the fusion, or its live elements.
std::vector<Instr*> values_of(Instr* producer, const Graph& g) {
  if (!producer->shape().is_tuple()) return {producer};
  std::vector<Instr*> out;
  for (Instr* u : producer->users()) {
    if (!g.dead.count(u) && std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  }
  return out;
}

// The live readers of the producer's values other than the consumer.
std::vector<Instr*> other_users(Instr* producer, const Instr* consumer, const Graph& g) {
  std::vector<Instr*> out;
  for (const Instr* v : values_of(producer, g)) {
    for (Instr* u : v->users()) {
      if (u != consumer && !g.dead.count(u) && std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
    }
  }
  return out;
}

// The producer's outputs that something besides the consumer still reads (or the entry
// returns), ascending: they stay outputs of the merged fusion.
std::vector<int> escaping_outputs(Instr* producer, const Instr* consumer, const ir::Computation& comp,
                                  const Graph& g) {
  std::vector<int> out;
  for (const Instr* v : values_of(producer, g)) {
    bool escapes = comp.root() == v;
    for (const Instr* u : v->users()) escapes = escapes || (u != consumer && !g.dead.count(u));
    if (escapes) out.push_back(output_index(v));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The operands the merged fusion would read: the producer's and the consumer's others, each
// once. A few dozen at most: a sorted vector, not a hash set.
std::vector<const Instr*> merged_operands(const Instr* producer, const Instr* consumer) {
  std::vector<const Instr*> operands(producer->operands().begin(), producer->operands().end());
  for (const Instr* o : consumer->operands()) {
    if (!reads_from(o, producer)) operands.push_back(o);
  }
  std::sort(operands.begin(), operands.end());
  operands.erase(std::unique(operands.begin(), operands.end()), operands.end());
  return operands;
}

// Library kernels' results of the consumer's loop size among `operands` (fusion.h:
// kMaxLibraryInputs).
size_t library_inputs(const std::vector<const Instr*>& operands, const Instr* consumer) {
  int64_t elements = 1;
  for (int64_t d : loop_dims(consumer)) elements *= d;
  return std::count_if(operands.begin(), operands.end(), [&](const Instr* o) {
    return is_library_result(*o) && o->shape().num_elements() == elements;
  });
}

// Where the merged fusion would sit: after its last operand, before its first reader.
struct Slot {
  double after = -1, before = std::numeric_limits<double>::infinity();
  bool fits() const { return after < before; }
  double at() const { return std::isinf(before) ? after + 1 : (after + before) / 2; }
};

Slot slot_for(Instr* producer, const Instr* consumer, const Graph& g) {
  Slot s;
  for (const Instr* o : producer->operands()) s.after = std::max(s.after, g.pos.at(o));
  for (const Instr* o : consumer->operands()) {
    if (!reads_from(o, producer)) s.after = std::max(s.after, g.pos.at(o));
  }
  for (const Instr* u : consumer->users()) {
    if (!g.dead.count(u)) s.before = std::min(s.before, g.pos.at(u));
  }
  for (const Instr* u : other_users(producer, consumer, g)) s.before = std::min(s.before, g.pos.at(u));
  return s;
}

// Mapped reads (transposes, broadcasts: fusion.h) load a parameter at another index, so the
// merged body must keep their operands parameters, and input fusions have none.
const char* mapped_read_conflict(const Instr* producer, const Instr* consumer) {
  const ir::Computation& body = *consumer->called()[0];
  for (int k = 0; k < consumer->num_operands(); ++k) {
    if (!reads_from(consumer->operand(k), producer)) continue;
    for (const Instr* u : body.param(k)->users()) {
      if (is_mapped_read(*u)) return "the consumer reads it through a transpose, broadcast, slice or pad";
    }
  }
  if (kind(consumer) == "input") {
    for (const auto& i : producer->called()[0]->instructions()) {
      if (is_mapped_read(*i) || is_fusible_iota(*i)) return "an input fusion cannot take a transpose, broadcast, slice, pad or iota";
    }
  }
  return nullptr;
}

// The producer's output shapes: its one result, or its tuple's elements.
std::vector<ir::Shape> output_shapes(const Instr* fusion) {
  if (!fusion->shape().is_tuple()) return {fusion->shape()};
  return fusion->shape().elements();
}

bool can_merge(Instr* producer, Instr* consumer, const ir::Computation& comp, Graph& g) {
  if (!is_fusion(producer) || producer == consumer || kind(producer) != "loop") return false;
  // Not across scheduling stages (ir::Metadata::stage): the producer's other readers would
  // wait for the consumer's stage (one micro-batch's backward pass for a later forward pass).
  if (producer->meta().stage != consumer->meta().stage) return false;
  // Recomputation stays out of forward kernels: merged into its producer (the layer's input
  // cast again to f32 for the norm, merged into the forward kernel that casts the embedding),
  // it would run in the forward pass and its result would live until the backward pass.
  if (holds_recomputation(consumer) && !holds_recomputation(producer)) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id()
                 << ": the consumer recomputes for the backward pass, the producer does not";
    return false;
  }
  if (producer->shape().is_tuple()) {
    // A multi-output loop fusion (an earlier merge, e.g. AdamW's update with the bf16 copy):
    // merged whole when every reader takes one element; the tuple as a value is left alone.
    for (const Instr* u : producer->users()) {
      if (!g.dead.count(u) && u->opcode() != Opcode::kGetTupleElement) return false;
    }
    if (comp.root() == producer) return false;
  }
  for (const ir::Shape& s : output_shapes(producer)) {
    if (s.dims() != loop_dims(consumer)) {
      KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id() << ": other dims";
      return false;
    }
  }
  if (const char* why = mapped_read_conflict(producer, consumer)) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id() << ": " << why;
    return false;
  }
  const std::vector<const Instr*> operands = merged_operands(producer, consumer);
  if (library_inputs(operands, consumer) > kMaxLibraryInputs) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id()
                 << ": the kernel would read more than " << kMaxLibraryInputs << " matmul results at once";
    return false;
  }
  std::vector<Instr*> others = other_users(producer, consumer, g);
  if (static_cast<int>(operands.size()) > kMaxOperands ||
      num_outputs(consumer) + static_cast<int>(escaping_outputs(producer, consumer, comp, g).size()) > kMaxOutputs) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id() << ": too large";
    return false;
  }
  if (!others.empty() && reaches(others, consumer, g)) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id()
                 << ": another user leads to the consumer";
    return false;
  }
  if (!slot_for(producer, consumer, g).fits()) {
    // A reader of the producer runs before an operand of the consumer: merging would need
    // other instructions moved; left alone.
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id()
                 << ": a reader of the producer comes before an operand of the consumer";
    return false;
  }
  return true;
}

// Moves `source`'s instructions into `body` (their attributes and metadata move: `source`
// is removed after the merge), its parameters replaced by `param_value(index)` and without a
// root tuple (the caller builds the merged one); returns where each one went.
template <typename ParamValue>
std::unordered_map<const Instr*, Instr*> inline_into(ir::Computation& body, ir::Computation& source,
                                                     ParamValue param_value) {
  std::unordered_map<const Instr*, Instr*> copy;
  copy.reserve(source.instructions().size());
  for (const auto& owned : source.instructions()) {
    Instr* i = owned.get();
    if (i->opcode() == Opcode::kParameter) {
      copy[i] = param_value(static_cast<int>(i->attrs().get_int("index")));
      continue;
    }
    if (i == source.root() && i->opcode() == Opcode::kTuple) continue;
    Instr* c;
    if (i->opcode() == Opcode::kConstant) {
      c = body.add_constant(i->literal());
    } else {
      std::vector<Instr*> operands;
      operands.reserve(i->operands().size());
      for (const Instr* o : i->operands()) operands.push_back(copy.at(o));
      c = body.add(i->opcode(), i->shape(), std::move(operands), std::move(i->mutable_attrs()));
    }
    c->mutable_meta() = std::move(i->mutable_meta());
    copy[i] = c;
  }
  return copy;
}

// Replaces `consumer` and `producer` by one fusion computing both (see the header for the
// output order); returns it.
Instr* merge(ir::Module& module, ir::Computation& comp, Instr* producer, Instr* consumer, Graph& g,
             std::vector<ir::Computation*>& dead_bodies) {
  const std::vector<int> escaping = escaping_outputs(producer, consumer, comp, g);
  const Slot slot = slot_for(producer, consumer, g);
  ir::Computation* body = module.add_computation(module.fresh_id("fused"));
  FusionInputs inputs(*body);
  auto from_producer =
      inline_into(*body, *producer->called()[0], [&](int k) { return inputs.param_for(producer->operand(k)); });
  std::vector<Instr*> produced;  // the producer's outputs, inside the merged body
  const Instr* producer_root = producer->called()[0]->root();
  if (producer->shape().is_tuple()) {
    for (const Instr* o : producer_root->operands()) produced.push_back(from_producer.at(o));
  } else {
    produced.push_back(from_producer.at(producer_root));
  }
  auto from_consumer = inline_into(*body, *consumer->called()[0], [&](int k) {
    Instr* o = consumer->operand(k);
    return reads_from(o, producer) ? produced.at(output_index(o)) : inputs.param_for(o);
  });
  const Instr* consumer_root = consumer->called()[0]->root();
  std::vector<Instr*> outputs;
  if (consumer_root->opcode() == Opcode::kTuple) {
    for (const Instr* o : consumer_root->operands()) outputs.push_back(from_consumer.at(o));
  } else {
    outputs.push_back(from_consumer.at(consumer_root));
  }
  const int first_escaping = static_cast<int>(outputs.size());
  for (int j : escaping) outputs.push_back(produced.at(j));
  Instr* root = outputs.front();
  if (outputs.size() > 1) {
    std::vector<ir::Shape> shapes;
    for (const Instr* o : outputs) shapes.push_back(o->shape());
    root = body->add(Opcode::kTuple, ir::Shape::tuple(shapes), outputs);
  }
  body->set_root(root);

  Instr* merged = comp.add(Opcode::kFusion, root->shape(), inputs.inputs(), {{"kind", kind(consumer)}});
  merged->set_called({body});
  merged->mutable_meta() = consumer->meta();
  g.pos[merged] = slot.at();
  auto element = [&](int index, const Instr* was) {
    Instr* gte = comp.add(Opcode::kGetTupleElement, was->shape(), {merged}, {{"index", static_cast<int64_t>(index)}});
    gte->mutable_meta() = was->meta();
    g.pos[gte] = std::isinf(slot.before) ? g.pos[merged] + 0.5 : (g.pos[merged] + slot.before) / 2;
    return gte;
  };
  // A tuple consumer's users are get_tuple_elements whose indices stay valid.
  consumer->replace_all_uses_with(consumer->shape().is_tuple() || !merged->shape().is_tuple() ? merged
                                                                                              : element(0, consumer));
  g.dead.insert(consumer);
  dead_bodies.push_back(consumer->called()[0]);
  // Every live reader of an escaping output now reads the merged fusion's element; the
  // consumer (dead) keeps its operands until the final sweep.
  const std::vector<Instr*> values = values_of(producer, g);
  const std::vector<Instr*> readers = other_users(producer, consumer, g);
  for (size_t n = 0; n < escaping.size(); ++n) {
    const Instr* was = *std::find_if(values.begin(), values.end(),
                                     [&](const Instr* v) { return output_index(v) == escaping[n]; });
    Instr* value = element(first_escaping + static_cast<int>(n), was);
    for (Instr* reader : readers) {
      for (int k = 0; k < reader->num_operands(); ++k) {
        const Instr* o = reader->operand(k);
        if (reads_from(o, producer) && output_index(o) == escaping[n]) reader->replace_operand(k, value);
      }
    }
    if (reads_from(comp.root(), producer) && output_index(comp.root()) == escaping[n]) comp.set_root(value);
  }
  if (producer->shape().is_tuple()) {
    for (Instr* v : values) g.dead.insert(v);  // its get_tuple_elements, read by nothing live now
  }
  g.dead.insert(producer);
  dead_bodies.push_back(producer->called()[0]);
  KILN_VLOG(2) << "multi_output_fusion: merged into %" << merged->id() << " (" << outputs.size() << " outputs)";
  return merged;
}

}  // namespace

Result<bool> MultiOutputFusionPass::run(ir::Module& module) {
  ir::Computation& comp = *module.entry();
  // Consumers latest first: the parameter update absorbs the moments, then what feeds them.
  std::vector<Instr*> consumers;
  for (const auto& owned : comp.instructions()) {
    if (is_fusion(owned.get())) consumers.push_back(owned.get());
  }
  std::reverse(consumers.begin(), consumers.end());
  std::unordered_set<const Instr*> alive(consumers.begin(), consumers.end());
  bool changed = false;
  Graph g;
  for (const auto& owned : comp.instructions()) g.pos[owned.get()] = static_cast<double>(g.pos.size());
  std::vector<ir::Computation*> dead_bodies;  // removed together: one scan of the module
  for (Instr* consumer : consumers) {
    if (!alive.count(consumer)) continue;
    for (bool merged = true; merged;) {
      merged = false;
      for (Instr* operand : consumer->operands()) {
        Instr* producer = source_of(operand);
        if (!alive.count(producer) || !can_merge(producer, consumer, comp, g)) continue;
        alive.erase(producer);
        alive.erase(consumer);
        consumer = merge(module, comp, producer, consumer, g, dead_bodies);
        alive.insert(consumer);
        merged = changed = true;
        break;
      }
    }
  }
  std::vector<Instr*> removed;
  for (const Instr* d : g.dead) removed.push_back(const_cast<Instr*>(d));  // the computation's own
  comp.remove(removed);
  module.remove_computations(dead_bodies);
  if (changed) comp.topo_sort();
  return changed;
}

}  // namespace kiln::passes
