#include "kiln/autodiff/autodiff.h"

#include <unordered_map>
#include <unordered_set>

#include "kiln/base/check.h"
#include "kiln/ops/builder.h"

namespace kiln::autodiff {

namespace {

using ir::Instr;

// Gradient slots of one value: one per tuple element (one for an array).
using Slots = std::vector<Instr*>;

class Accumulator {
 public:
  explicit Accumulator(ops::Builder& b) : b_(b) {}

  void add(Instr* target, int slot, Instr* g) {
    if (!g) return;
    Slots& slots = slots_for(target);
    const ir::Shape& want = target->shape().is_tuple() ? target->shape().element(slot) : target->shape();
    KILN_CHECK(g->shape() == want) << "gradient of shape " << g->shape().to_string() << " for " << target->to_string();
    slots[slot] = slots[slot] ? b_.add(slots[slot], g) : g;
  }

  Slots* find(Instr* target) {
    auto it = slots_.find(target);
    return it == slots_.end() ? nullptr : &it->second;
  }

 private:
  Slots& slots_for(Instr* target) {
    auto it = slots_.find(target);
    if (it != slots_.end()) return it->second;
    size_t n = target->shape().is_tuple() ? target->shape().elements().size() : 1;
    return slots_.emplace(target, Slots(n, nullptr)).first->second;
  }

  ops::Builder& b_;
  std::unordered_map<Instr*, Slots> slots_;
};

bool is_float_value(const Instr* instr) {
  return !instr->shape().is_tuple() && ir::is_floating(instr->shape().dtype());
}

}  // namespace

Result<std::vector<Instr*>> gradients(ir::Computation& computation, Instr* loss, std::span<Instr* const> wrt) {
  if (loss->parent() != &computation) return invalid_argument("loss %{} is not in @{}", loss->id(), computation.name());
  if (!is_float_value(loss) || loss->shape().rank() != 0) {
    return invalid_argument("the loss must be a floating-point scalar, got {} for %{}", loss->shape().to_string(), loss->id());
  }
  for (Instr* w : wrt) {
    if (w->parent() != &computation) return invalid_argument("%{} is not in @{}", w->id(), computation.name());
    if (!is_float_value(w)) return invalid_argument("cannot differentiate with respect to %{} of shape {}", w->id(), w->shape().to_string());
  }
  std::vector<Instr*> order = computation.post_order();

  // Only values on a path from some wrt to the loss need gradients.
  std::unordered_set<const Instr*> depends_on_wrt(wrt.begin(), wrt.end());
  for (Instr* instr : order) {
    for (const Instr* o : instr->operands()) {
      if (depends_on_wrt.count(o)) {
        depends_on_wrt.insert(instr);
        break;
      }
    }
  }
  std::unordered_set<const Instr*> reaches_loss = {loss};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (!reaches_loss.count(*it)) continue;
    for (const Instr* o : (*it)->operands()) reaches_loss.insert(o);
  }
  auto relevant = [&](const Instr* i) { return depends_on_wrt.count(i) && reaches_loss.count(i); };

  ops::Builder b(&computation);
  Accumulator acc(b);
  acc.add(loss, 0, b.full(loss->shape(), 1.0));

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Instr* instr = *it;
    if (!relevant(instr)) continue;
    Slots* slots = acc.find(instr);
    if (!slots) continue;
    b.set_name(instr->meta().name.empty() ? "" : instr->meta().name + ".grad");
    b.set_loc(instr->meta().loc);
    const ops::OpDef& def = ops::op_def(instr->opcode());
    if (instr->opcode() == ir::Opcode::kTuple) {
      for (int i = 0; i < instr->num_operands(); ++i) {
        if (relevant(instr->operand(i))) acc.add(instr->operand(i), 0, (*slots)[i]);
      }
      continue;
    }
    if (instr->opcode() == ir::Opcode::kGetTupleElement) {
      acc.add(instr->operand(0), static_cast<int>(instr->attrs().get_int("index")), (*slots)[0]);
      continue;
    }
    if (def.grad != ops::GradKind::kRule) continue;
    ops::VjpContext ctx{b, instr, *slots};
    std::vector<Instr*> grads = def.vjp(ctx);
    KILN_CHECK_EQ(static_cast<int>(grads.size()), instr->num_operands()) << "vjp of " << def.name;
    for (int i = 0; i < instr->num_operands(); ++i) {
      Instr* operand = instr->operand(i);
      if (!grads[i] || !relevant(operand) || !is_float_value(operand)) continue;
      acc.add(operand, 0, grads[i]);
    }
  }

  b.set_name("");
  b.set_loc("");
  std::vector<Instr*> result;
  for (Instr* w : wrt) {
    Slots* slots = acc.find(w);
    result.push_back(slots && (*slots)[0] ? (*slots)[0] : b.zeros(w->shape()));
  }
  return result;
}

}  // namespace kiln::autodiff
