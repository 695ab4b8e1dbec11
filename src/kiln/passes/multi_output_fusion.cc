#include "kiln/passes/multi_output_fusion.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/logging.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

// A merged kernel with more than this many operands or outputs stops being cheaper: every
// one is a stream the loop reads or writes.
constexpr int kMaxOperands = 24;
constexpr int kMaxOutputs = 6;
// Instructions the cycle check may visit before it gives up (and refuses the merge).
constexpr size_t kWalkBudget = 512;

bool is_fusion(const Instr* i) { return i->opcode() == Opcode::kFusion && !i->called().empty(); }
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

// Instructions merged away: still in the computation (removed together at the end, one
// sweep) but no longer read by anything live, so the walks below skip them.
using DeadSet = std::unordered_set<const Instr*>;

// Whether any of `from` leads to `target` through users (true as well when the walk runs out
// of budget: the merge is then refused, never wrongly made).
bool reaches(const std::vector<Instr*>& from, const Instr* target, const DeadSet& dead) {
  std::vector<const Instr*> stack(from.begin(), from.end());
  std::unordered_set<const Instr*> seen;
  while (!stack.empty()) {
    const Instr* x = stack.back();
    stack.pop_back();
    if (x == target) return true;
    if (dead.count(x) || !seen.insert(x).second) continue;
    if (seen.size() > kWalkBudget) return true;
    for (const Instr* u : x->users()) stack.push_back(u);
  }
  return false;
}

std::vector<Instr*> other_users(const Instr* producer, const Instr* consumer, const DeadSet& dead) {
  std::vector<Instr*> out;
  for (Instr* u : producer->users()) {
    if (u != consumer && !dead.count(u) && std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  }
  return out;
}

int merged_operand_count(const Instr* producer, const Instr* consumer) {
  std::unordered_set<const Instr*> operands(producer->operands().begin(), producer->operands().end());
  for (const Instr* o : consumer->operands()) {
    if (o != producer) operands.insert(o);
  }
  return static_cast<int>(operands.size());
}

bool can_merge(const Instr* producer, const Instr* consumer, const DeadSet& dead) {
  if (!is_fusion(producer) || producer == consumer || kind(producer) != "loop" || producer->shape().is_tuple()) {
    return false;
  }
  if (producer->shape().dims() != loop_dims(consumer)) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id() << ": other dims";
    return false;
  }
  std::vector<Instr*> others = other_users(producer, consumer, dead);
  if (merged_operand_count(producer, consumer) > kMaxOperands ||
      num_outputs(consumer) + (others.empty() ? 0 : 1) > kMaxOutputs) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id() << ": too large";
    return false;
  }
  if (!others.empty() && reaches(others, consumer, dead)) {
    KILN_VLOG(2) << "multi_output_fusion: %" << producer->id() << " not into %" << consumer->id()
                 << ": another user leads to the consumer";
    return false;
  }
  return true;
}

// Copies `source`'s instructions into `body`, its parameters replaced by `param_value(index)`
// and without a root tuple (the caller builds the merged one); returns where each one went.
template <typename ParamValue>
std::unordered_map<const Instr*, Instr*> inline_into(ir::Computation& body, const ir::Computation& source,
                                                     ParamValue param_value) {
  std::unordered_map<const Instr*, Instr*> copy;
  for (const auto& owned : source.instructions()) {
    const Instr* i = owned.get();
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
      for (const Instr* o : i->operands()) operands.push_back(copy.at(o));
      c = body.add(i->opcode(), i->shape(), operands, i->attrs());
    }
    c->mutable_meta() = i->meta();
    copy[i] = c;
  }
  return copy;
}

// Replaces `consumer` and `producer` by one fusion computing both (see the header for the
// output order); returns it.
Instr* merge(ir::Module& module, ir::Computation& comp, Instr* producer, Instr* consumer, DeadSet& dead,
             std::vector<ir::Computation*>& dead_bodies) {
  const bool escapes = !other_users(producer, consumer, dead).empty();
  ir::Computation* body = module.add_computation(module.fresh_id("fused"));
  std::vector<Instr*> inputs;
  std::unordered_map<const Instr*, Instr*> param_of;
  auto input_for = [&](Instr* outside) {
    auto it = param_of.find(outside);
    if (it != param_of.end()) return it->second;
    Instr* p = body->add(Opcode::kParameter, outside->shape(), {}, {{"index", static_cast<int64_t>(inputs.size())}});
    inputs.push_back(outside);
    param_of[outside] = p;
    return p;
  };
  auto from_producer = inline_into(*body, *producer->called()[0], [&](int k) { return input_for(producer->operand(k)); });
  Instr* produced = from_producer.at(producer->called()[0]->root());
  auto from_consumer = inline_into(*body, *consumer->called()[0], [&](int k) {
    Instr* o = consumer->operand(k);
    return o == producer ? produced : input_for(o);
  });
  const Instr* consumer_root = consumer->called()[0]->root();
  std::vector<Instr*> outputs;
  if (consumer_root->opcode() == Opcode::kTuple) {
    for (const Instr* o : consumer_root->operands()) outputs.push_back(from_consumer.at(o));
  } else {
    outputs.push_back(from_consumer.at(consumer_root));
  }
  if (escapes) outputs.push_back(produced);
  Instr* root = outputs.front();
  if (outputs.size() > 1) {
    std::vector<ir::Shape> shapes;
    for (const Instr* o : outputs) shapes.push_back(o->shape());
    root = body->add(Opcode::kTuple, ir::Shape::tuple(shapes), outputs);
  }
  body->set_root(root);

  Instr* merged = comp.add(Opcode::kFusion, root->shape(), inputs, {{"kind", kind(consumer)}});
  merged->set_called({body});
  merged->mutable_meta() = consumer->meta();
  auto element = [&](int index, const Instr* was) {
    Instr* gte = comp.add(Opcode::kGetTupleElement, was->shape(), {merged}, {{"index", static_cast<int64_t>(index)}});
    gte->mutable_meta() = was->meta();
    return gte;
  };
  // A tuple consumer's users are get_tuple_elements whose indices stay valid.
  consumer->replace_all_uses_with(consumer->shape().is_tuple() || !merged->shape().is_tuple() ? merged
                                                                                              : element(0, consumer));
  dead.insert(consumer);
  dead_bodies.push_back(consumer->called()[0]);
  if (escapes) {
    // Every live reader of the producer now reads the merged output; the consumer (dead)
    // keeps its operand until the final sweep.
    Instr* value = element(static_cast<int>(outputs.size()) - 1, producer);
    std::vector<Instr*> readers = other_users(producer, consumer, dead);
    for (Instr* reader : readers) {
      for (int k = 0; k < reader->num_operands(); ++k) {
        if (reader->operand(k) == producer) reader->replace_operand(k, value);
      }
    }
    if (comp.root() == producer) comp.set_root(value);
  }
  dead.insert(producer);
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
  DeadSet dead;
  std::vector<ir::Computation*> dead_bodies;  // removed together: one scan of the module
  for (Instr* consumer : consumers) {
    if (!alive.count(consumer)) continue;
    for (bool merged = true; merged;) {
      merged = false;
      for (Instr* producer : consumer->operands()) {
        if (!alive.count(producer) || !can_merge(producer, consumer, dead)) continue;
        alive.erase(producer);
        alive.erase(consumer);
        consumer = merge(module, comp, producer, consumer, dead, dead_bodies);
        alive.insert(consumer);
        merged = changed = true;
        break;
      }
    }
  }
  std::vector<Instr*> removed;
  for (const Instr* d : dead) removed.push_back(const_cast<Instr*>(d));  // the computation's own
  comp.remove(removed);
  module.remove_computations(dead_bodies);
  if (changed) comp.topo_sort();
  return changed;
}

}  // namespace kiln::passes
