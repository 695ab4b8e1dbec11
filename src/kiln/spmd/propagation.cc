#include "kiln/spmd/propagation.h"

#include <algorithm>

#include "kiln/base/check.h"
#include "kiln/ops/registry.h"
#include "kiln/spmd/batch_tuple_ops.h"
#include "kiln/spmd/ragged_exchange.h"

namespace kiln::spmd {
namespace {

using ir::Instr;
using ir::Opcode;

}  // namespace

// The op's registry entry says whether it runs per block (OpDef::split_map).
bool has_passthrough(const Instr& instr) {
  return !instr.shape().is_tuple() && ops::op_def(instr.opcode()).split_map != nullptr;
}

std::vector<std::vector<int>> passthrough_map(const Instr& instr) {
  std::vector<std::vector<int>> none;
  for (const Instr* o : instr.operands()) none.emplace_back(o->shape().is_tuple() ? 0 : o->shape().rank(), -1);
  if (!has_passthrough(instr)) return none;
  std::vector<std::vector<int>> m = ops::op_def(instr.opcode()).split_map(instr);
  m.resize(instr.operands().size());
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i].size() != none[i].size()) m[i] = none[i];
  }
  return m;
}

namespace {

// A broadcast of the scalar constant 0 (Builder::zeros: what a gather's gradient scatters into).
bool is_zeros(const Instr& x) {
  if (x.opcode() != Opcode::kBroadcast || x.operand(0)->opcode() != Opcode::kConstant) return false;
  const ir::Literal& v = x.operand(0)->literal();
  return v.shape().num_elements() == 1 && v.values()[0] == 0.0;
}

}  // namespace

std::vector<std::pair<int, Axes>> scatter_add_partial_dims(const Instr& instr, const Spec& updates) {
  if (instr.opcode() != Opcode::kScatterAdd || !is_zeros(*instr.operand(0))) return {};
  if (instr.operand(0)->shape().byte_size() >= instr.operand(2)->shape().byte_size()) return {};
  const std::vector<int> um = passthrough_map(instr)[2];
  std::vector<std::pair<int, Axes>> kept;
  std::set<std::string> used;
  for (size_t d = 0; d < um.size() && d < updates.dims.size(); ++d) {
    const Axes& a = updates.dims[d];
    const int64_t axis = instr.attrs().get_int("axis");
    const bool index_dim = static_cast<int64_t>(d) >= axis && um[d] < 0;
    if (!index_dim || a.empty()) continue;
    if (std::any_of(a.begin(), a.end(), [&](const std::string& x) { return used.count(x) > 0; })) continue;
    used.insert(a.begin(), a.end());
    kept.emplace_back(static_cast<int>(d), a);
  }
  return kept;
}

namespace {

class Propagator {
 public:
  Propagator(const ir::Computation& entry, const config::Mesh& mesh) : entry_(entry), mesh_(mesh) {}

  std::unordered_map<const Instr*, Spec> specs;
  std::unordered_map<const Instr*, bool> fixed;  // seeds and constraints never change
  bool defer_replicated = false;  // the first forward sweep leaves replicated-only elementwise values open

  // A candidate must split each dimension evenly and use each axis once.
  bool valid(const Instr& instr, const Spec& s) const {
    std::set<std::string> used;
    for (int d = 0; d < s.rank(); ++d) {
      if (instr.shape().dim(d) % mesh_.size(s.dims[d]) != 0) return false;
      for (const std::string& a : s.dims[d]) {
        if (!used.insert(a).second) return false;
      }
    }
    return true;
  }

  // The result split implied by the operands (nullopt: undecided).
  std::optional<Spec> forward(const Instr& instr) {
    int rank = instr.shape().rank();
    // Made at any split (rng): its users choose; unrequested, it ends replicated.
    if (ops::op_def(instr.opcode()).splittable_source) return std::nullopt;
    if ((instr.opcode() == Opcode::kGroupedMatmul || instr.opcode() == Opcode::kGroupedMatmulWeightGrad) &&
        instr.operand(0)->shape().rank() == 3) {  // entries on their expert blocks (ragged_exchange.h)
      auto x = specs.find(instr.operand(0));
      if (x != specs.end() && expert_block_axes(instr, x->second.dims[0], mesh_)) {
        // The weight gradient is a partial sum: its users choose where it is added up.
        if (instr.opcode() == Opcode::kGroupedMatmulWeightGrad) return std::nullopt;
        return ragged_exchange_spec(instr, x->second.dims[0]);
      }
    }
    if (instr.opcode() == Opcode::kRaggedAllToAll) {  // one entry per device: an exchange (ragged_exchange.h)
      auto x = specs.find(instr.operand(0));
      if (x != specs.end() && ragged_exchange_axes(instr, x->second.dims[0], mesh_)) {
        return ragged_exchange_spec(instr, x->second.dims[0]);
      }
    }
    if (instr.opcode() == Opcode::kGetTupleElement) {
      if (std::optional<BatchTupleRule> rule = batch_tuple_rule(*instr.operand(0))) {
        auto it = specs.find(instr.operand(0));
        if (it == specs.end()) return std::nullopt;
        return batch_tuple_element(*rule, it->second.dims[0], static_cast<int>(instr.attrs().get_int("index")), rank,
                                   false);
      }
    }
    if (!has_passthrough(instr)) {
      for (const Instr* o : instr.operands()) {
        if (!o->shape().is_tuple() && !specs.count(o)) return std::nullopt;
      }
      return Spec::replicated(rank);
    }
    // A broadcast waits one round for its users even when its operand is split (a bias split
    // over fsdp): decided from the operand alone it would be written at the global size of
    // its new dimensions (the whole batch) and then gathered and sliced to the users' split;
    // at the users' split only the small operand is gathered.
    if (defer_replicated && instr.opcode() == Opcode::kBroadcast) return std::nullopt;
    std::vector<std::vector<int>> m = passthrough_map(instr);
    Spec out = Spec::replicated(rank);
    std::set<std::string> used;
    bool all_known = true, any_split = false;
    for (size_t i = 0; i < instr.operands().size(); ++i) {
      auto it = specs.find(instr.operand(static_cast<int>(i)));
      if (it == specs.end()) {
        all_known = false;
        continue;
      }
      for (size_t d = 0; d < m[i].size(); ++d) {
        const Axes& axes = it->second.dims[d];
        if (m[i][d] < 0 || axes.empty() || !out.dims[m[i][d]].empty()) continue;
        if (std::any_of(axes.begin(), axes.end(), [&](const std::string& a) { return used.count(a) > 0; })) continue;
        out.dims[m[i][d]] = axes;
        used.insert(axes.begin(), axes.end());
        any_split = true;
      }
    }
    if (any_split && valid(instr, out)) return out;
    if (!all_known || leaves_partial(instr)) return std::nullopt;
    // An elementwise op on replicated values waits one round for its users: a gradient that
    // an op without a rule produced whole (the grouped matmul's weight gradient) is then
    // split where its sharded optimizer update asks, before clipping, instead of being
    // clipped whole on every device and kept whole until the global norm is known.
    // A broadcast of replicated values (zeros, a constant, a replicated bias) waits too: made
    // at its users' split it is written at its local shape, instead of whole on every device
    // and then sliced.
    if (defer_replicated && (ops::op_def(instr.opcode()).elementwise || instr.opcode() == Opcode::kBroadcast)) {
      return std::nullopt;
    }
    return Spec::replicated(rank);
  }

  // Contractions and sums over split dimensions: their layout is best chosen by the users.
  bool leaves_partial(const Instr& instr) const {
    if (instr.opcode() == Opcode::kScatterAdd) {
      auto u = specs.find(instr.operand(2));
      return u != specs.end() && !scatter_add_partial_dims(instr, u->second).empty();
    }
    std::vector<std::vector<int>> m = passthrough_map(instr);
    if (instr.opcode() == Opcode::kDotGeneral) {
      const auto& lc = instr.attrs().get_ints("lhs_contract");
      const auto& rc = instr.attrs().get_ints("rhs_contract");
      auto l = specs.find(instr.operand(0)), r = specs.find(instr.operand(1));
      if (l == specs.end() || r == specs.end()) return false;
      for (size_t k = 0; k < lc.size(); ++k) {
        if (!l->second.dims[lc[k]].empty() && l->second.dims[lc[k]] == r->second.dims[rc[k]]) return true;
      }
      return false;
    }
    if (instr.opcode() == Opcode::kReduceSum) {
      auto x = specs.find(instr.operand(0));
      if (x == specs.end()) return false;
      for (size_t d = 0; d < m[0].size(); ++d) {
        if (m[0][d] < 0 && !x->second.dims[d].empty()) return true;
      }
    }
    return false;
  }

  // A batch-parallel tuple op (batch_tuple_ops.h) keeps the batch split of its batch
  // operands: the first split one whose axes divide every batch dimension decides.
  std::optional<Spec> forward_batch_tuple(const Instr& instr, const BatchTupleRule& rule) {
    bool all_known = true;
    for (int i = 0; i < instr.num_operands(); ++i) {
      if (!rule.operand_batch[i]) continue;
      auto it = specs.find(instr.operand(i));
      if (it == specs.end()) {
        all_known = false;
        continue;
      }
      const Axes& axes = it->second.dims[0];
      if (!axes.empty() && batch_divides(instr, rule, axes)) return batch_tuple_decision(axes);
    }
    if (!all_known) return std::nullopt;
    return batch_tuple_decision({});
  }

  bool batch_divides(const Instr& instr, const BatchTupleRule& rule, const Axes& axes) const {
    const int64_t n = mesh_.size(axes);
    for (int i = 0; i < instr.num_operands(); ++i) {
      if (rule.operand_batch[i] && instr.operand(i)->shape().dim(0) % n != 0) return false;
    }
    for (size_t e = 0; e < rule.element_batch.size(); ++e) {
      if (rule.element_batch[e] && instr.shape().elements()[e].dim(0) % n != 0) return false;
    }
    return true;
  }

  // What `user` asks of its operand number `i`, given the user's spec.
  std::optional<Spec> request(const Instr& user, int i) {
    if (std::optional<BatchTupleRule> rule = batch_tuple_rule(user)) {
      auto t = specs.find(&user);
      if (t == specs.end() || !rule->operand_batch[i] || t->second.dims[0].empty()) return std::nullopt;
      Spec s = Spec::replicated(user.operand(i)->shape().rank());
      s.dims[0] = t->second.dims[0];
      return s;
    }
    auto it = specs.find(&user);
    if (it == specs.end() || !has_passthrough(user)) return std::nullopt;
    const Instr* operand = user.operand(i);
    if (operand->shape().is_tuple()) return std::nullopt;
    std::vector<int> m = passthrough_map(user)[i];
    Spec s = Spec::replicated(operand->shape().rank());
    bool any = false;
    for (size_t d = 0; d < m.size(); ++d) {
      if (m[d] >= 0 && !it->second.dims[m[d]].empty()) {
        s.dims[d] = it->second.dims[m[d]];
        any = true;
      }
    }
    if (!any || !valid(*operand, s)) return std::nullopt;
    return s;
  }

  bool forward_pass() {
    bool changed = false;
    for (const auto& owned : entry_.instructions()) {
      const Instr* instr = owned.get();
      if (specs.count(instr)) continue;
      if (instr->shape().is_tuple()) {
        std::optional<BatchTupleRule> rule = batch_tuple_rule(*instr);
        std::optional<Spec> s = rule ? forward_batch_tuple(*instr, *rule) : std::nullopt;
        if (s) {
          specs[instr] = *s;
          changed = true;
        }
        continue;
      }
      if (std::optional<Spec> s = forward(*instr)) {
        specs[instr] = *s;
        changed = true;
      }
    }
    return changed;
  }

  bool backward_pass() {
    bool changed = false;
    const auto& list = entry_.instructions();
    for (auto it = list.rbegin(); it != list.rend(); ++it) {
      const Instr* instr = it->get();
      if (instr->shape().is_tuple() || specs.count(instr)) continue;
      std::optional<Spec> best;
      for (const Instr* user : instr->users()) {
        for (int i = 0; i < user->num_operands(); ++i) {
          if (user->operand(i) != instr) continue;
          std::optional<Spec> s = request(*user, i);
          if (s && (!best || s->num_shards(mesh_) > best->num_shards(mesh_))) best = s;
        }
      }
      if (best) {
        specs[instr] = *best;
        changed = true;
      }
    }
    return changed;
  }

 private:
  const ir::Computation& entry_;
  const config::Mesh& mesh_;
};

}  // namespace

std::unordered_map<const Instr*, Spec> propagate(const ir::Computation& entry, const config::Mesh& mesh,
                                                 const LogicalRules& rules, const PropagationSeeds& seeds,
                                                 std::vector<std::string>* notes) {
  Propagator p(entry, mesh);
  for (const Instr* param : entry.params()) {
    int index = static_cast<int>(param->attrs().get_int("index"));
    if (param->shape().is_tuple()) continue;
    Spec s = Spec::replicated(param->shape().rank());
    if (index < static_cast<int>(seeds.params.size()) && seeds.params[index]) s = Spec::from_ir(*seeds.params[index]);
    p.specs[param] = s;
  }
  // Constraints: values the model named with logical axes.
  for (const auto& owned : entry.instructions()) {
    const Instr* instr = owned.get();
    if (instr->opcode() == Opcode::kParameter || instr->shape().is_tuple()) continue;
    const auto& axes = instr->meta().axes;
    if (axes.empty() || static_cast<int>(axes.size()) != instr->shape().rank()) continue;
    ir::Sharding s = rules.resolve(axes, instr->shape().dims(), mesh, nullptr);
    p.specs[instr] = Spec::from_ir(s);
  }
  // Outputs: the root tuple's elements take the requested layout, when nothing else fixed them.
  const Instr* root = entry.root();
  if (root->opcode() == Opcode::kTuple) {
    for (int i = 0; i < root->num_operands() && i < static_cast<int>(seeds.outputs.size()); ++i) {
      const Instr* out = root->operand(i);
      if (seeds.outputs[i] && !p.specs.count(out) && !out->shape().is_tuple()) p.specs[out] = Spec::from_ir(*seeds.outputs[i]);
    }
  }
  for (int round = 0; round < 8; ++round) {
    p.defer_replicated = round == 0;
    bool f = p.forward_pass();
    bool b = p.backward_pass();
    if (!f && !b) break;
  }
  for (const auto& owned : entry.instructions()) {
    const Instr* instr = owned.get();
    if (!instr->shape().is_tuple() && !p.specs.count(instr)) p.specs[instr] = Spec::replicated(instr->shape().rank());
  }
  (void)notes;
  return std::move(p.specs);
}

}  // namespace kiln::spmd
