#include "kiln/ir/instr.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/check.h"
#include "kiln/ir/printer.h"

namespace kiln::ir {

const Literal& Instr::literal() const {
  KILN_CHECK(literal_ != nullptr) << "literal() of non-constant %" << id_;
  return *literal_;
}

void Instr::remove_user(Instr* user) {
  auto it = std::find(users_.begin(), users_.end(), user);
  KILN_CHECK(it != users_.end()) << "%" << user->id() << " is not a user of %" << id_;
  users_.erase(it);
}

void Instr::replace_operand(int i, Instr* new_operand) {
  Instr* old = operands_.at(i);
  if (old == new_operand) return;
  old->remove_user(this);
  operands_[i] = new_operand;
  new_operand->users_.push_back(this);
}

void Instr::replace_all_uses_with(Instr* other) {
  KILN_CHECK(other != this);
  std::vector<Instr*> users = users_;
  for (Instr* user : users) {
    for (int i = 0; i < user->num_operands(); ++i) {
      if (user->operands_[i] == this) user->replace_operand(i, other);
    }
  }
  if (parent_ && parent_->root() == this) parent_->set_root(other);
}

std::string Instr::to_string() const { return print_instr(*this); }

Instr* Computation::add(Opcode opcode, Shape shape, std::vector<Instr*> operands, Attrs attrs, std::string id) {
  auto instr = std::unique_ptr<Instr>(new Instr());
  instr->opcode_ = opcode;
  instr->shape_ = std::move(shape);
  instr->operands_ = std::move(operands);
  instr->attrs_ = std::move(attrs);
  instr->parent_ = this;
  if (id.empty()) {
    instr->id_ = parent_->fresh_id(opcode_name(opcode));
  } else {
    parent_->reserve_id(id);
    instr->id_ = std::move(id);
  }
  for (Instr* operand : instr->operands_) {
    KILN_CHECK(operand != nullptr) << "null operand of " << opcode_name(opcode);
    operand->users_.push_back(instr.get());
  }
  if (opcode == Opcode::kParameter) {
    int64_t index = instr->attrs_.get_int("index");
    KILN_CHECK_GE(index, 0);
    if (static_cast<int64_t>(params_.size()) <= index) params_.resize(index + 1, nullptr);
    KILN_CHECK(params_[index] == nullptr) << "duplicate parameter index " << index;
    params_[index] = instr.get();
  }
  Instr* raw = instr.get();
  instrs_.push_back(std::move(instr));
  return raw;
}

Instr* Computation::add_constant(Literal literal, std::string id) {
  Shape shape = literal.shape();
  Instr* c = add(Opcode::kConstant, shape, {}, {}, std::move(id));
  c->literal_ = std::make_shared<const Literal>(std::move(literal));
  return c;
}

void Computation::remove(const std::vector<Instr*>& dead) {
  std::unordered_set<Instr*> doomed(dead.begin(), dead.end());
  for (Instr* d : dead) {
    KILN_CHECK(d != root_) << "cannot remove the root %" << d->id();
    KILN_CHECK(d->opcode() != Opcode::kParameter) << "cannot remove parameter %" << d->id();
    for (Instr* user : d->users()) {
      KILN_CHECK(doomed.count(user)) << "removing %" << d->id() << " which %" << user->id() << " still uses";
    }
  }
  for (Instr* d : dead) {
    for (Instr* operand : d->operands_) {
      if (!doomed.count(operand)) operand->remove_user(d);
    }
  }
  std::erase_if(instrs_, [&](const std::unique_ptr<Instr>& i) { return doomed.count(i.get()) > 0; });
}

void Computation::topo_sort() {
  // Most calls find the order already topological (every fusion body after a pass, the
  // entry after a pass that only removed instructions): check that first, in one sweep over
  // positions stored in the instructions themselves (hash sets and searched arrays cost far
  // more: the pipeline checks thousands of bodies and the entry after every pass).
  for (size_t k = 0; k < instrs_.size(); ++k) instrs_[k]->topo_index_ = k;
  auto in_here = [&](const Instr* i) { return i->parent_ == this && i->topo_index_ < instrs_.size() && instrs_[i->topo_index_].get() == i; };
  bool sorted = true;
  for (size_t k = 0; k < instrs_.size() && sorted; ++k) {
    for (const Instr* operand : instrs_[k]->operands()) {
      KILN_CHECK(in_here(operand)) << "%" << operand->id() << " is not in @" << name_;
      sorted = sorted && operand->topo_index_ < k;
    }
  }
  if (sorted) return;
  std::vector<std::unique_ptr<Instr>> old = std::move(instrs_);
  instrs_.clear();
  instrs_.reserve(old.size());
  enum : char { kUnvisited, kOnStack, kPlaced };
  std::vector<char> state(old.size(), kUnvisited);
  // Iterative DFS so that deep graphs (thousands of layers of ops) do not overflow the stack.
  // The stack is empty again after each start: allocated once. Entries: (old position, next
  // operand to visit); topo_index_ still holds the old positions.
  std::vector<std::pair<size_t, size_t>> stack;
  for (size_t k = 0; k < old.size(); ++k) {
    if (state[k] != kUnvisited) continue;
    stack.push_back({k, 0});
    state[k] = kOnStack;
    while (!stack.empty()) {
      auto& [at_k, next] = stack.back();
      const Instr* instr = old[at_k].get();
      if (next < instr->operands().size()) {
        const Instr* operand = instr->operands()[next++];
        const size_t o = operand->topo_index_;
        if (state[o] != kPlaced) {
          KILN_CHECK(state[o] != kOnStack) << "cycle through %" << operand->id();
          stack.push_back({o, 0});
          state[o] = kOnStack;
        }
        continue;
      }
      state[at_k] = kPlaced;
      instrs_.push_back(std::move(old[at_k]));
      stack.pop_back();
    }
  }
}

std::vector<Instr*> Computation::post_order() const {
  std::vector<Instr*> out;
  out.reserve(instrs_.size());
  for (const auto& i : instrs_) out.push_back(i.get());
  return out;
}

Computation* Module::add_computation(std::string name) {
  auto comp = std::make_unique<Computation>();
  comp->name_ = std::move(name);
  comp->parent_ = this;
  computations_.push_back(std::move(comp));
  if (!entry_) entry_ = computations_.back().get();
  return computations_.back().get();
}

Computation* Module::find_computation(const std::string& name) const {
  for (const auto& c : computations_) {
    if (c->name() == name) return c.get();
  }
  return nullptr;
}

void Module::remove_computation(Computation* computation) {
  KILN_CHECK(computation != entry_) << "cannot remove the entry computation @" << computation->name();
  for (const auto& c : computations_) {
    for (const auto& instr : c->instructions()) {
      for (const Computation* called : instr->called()) {
        KILN_CHECK(called != computation) << "removing @" << computation->name() << " which %" << instr->id() << " calls";
      }
    }
  }
  auto it = std::find_if(computations_.begin(), computations_.end(),
                         [&](const std::unique_ptr<Computation>& c) { return c.get() == computation; });
  KILN_CHECK(it != computations_.end()) << "@" << computation->name() << " is not in module @" << name_;
  computations_.erase(it);
}

void Module::remove_computations(const std::vector<Computation*>& dead) {
  std::unordered_set<const Computation*> doomed(dead.begin(), dead.end());
  KILN_CHECK(!doomed.count(entry_)) << "cannot remove the entry computation @" << entry_->name();
  for (const auto& c : computations_) {
    if (doomed.count(c.get())) continue;
    for (const auto& instr : c->instructions()) {
      for (const Computation* called : instr->called()) {
        KILN_CHECK(!doomed.count(called)) << "removing @" << called->name() << " which %" << instr->id() << " calls";
      }
    }
  }
  const size_t before = computations_.size();
  std::erase_if(computations_, [&](const std::unique_ptr<Computation>& c) { return doomed.count(c.get()) > 0; });
  KILN_CHECK_EQ(before - computations_.size(), doomed.size()) << "removing computations that are not in module @" << name_;
}

std::string Module::fresh_id(std::string_view stem) { return std::string(stem) + "." + std::to_string(next_id_++); }

void Module::reserve_id(const std::string& id) {
  size_t dot = id.rfind('.');
  if (dot == std::string::npos) return;
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(id.data() + dot + 1, id.data() + id.size(), n);
  if (ec == std::errc() && ptr == id.data() + id.size()) next_id_ = std::max(next_id_, n + 1);
}

int64_t Module::instruction_count() const {
  int64_t n = 0;
  for (const auto& c : computations_) n += c->size();
  return n;
}

std::unique_ptr<Module> Module::clone() const {
  auto out = std::make_unique<Module>(name_);
  out->next_id_ = next_id_;
  std::unordered_map<const Computation*, Computation*> comp_map;
  for (const auto& c : computations_) comp_map[c.get()] = out->add_computation(c->name());
  out->entry_ = entry_ ? comp_map.at(entry_) : nullptr;
  for (const auto& c : computations_) {
    Computation* dst = comp_map.at(c.get());
    std::unordered_map<const Instr*, Instr*> map;
    for (const auto& instr : c->instructions()) {
      std::vector<Instr*> operands;
      for (Instr* o : instr->operands()) operands.push_back(map.at(o));
      Instr* copy = dst->add(instr->opcode(), instr->shape(), operands, instr->attrs(), instr->id());
      copy->literal_ = instr->literal_;
      copy->meta_ = instr->meta_;
      for (Computation* called : instr->called()) copy->called_.push_back(comp_map.at(called));
      map[instr.get()] = copy;
    }
    if (c->root()) dst->set_root(map.at(c->root()));
  }
  return out;
}

}  // namespace kiln::ir
