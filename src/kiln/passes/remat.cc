#include "kiln/passes/remat.h"

#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "kiln/base/logging.h"
#include "kiln/base/strings.h"
#include "kiln/config/remat_policies.h"
#include "kiln/passes/recompute_names.h"

namespace kiln::passes {

namespace {

using ir::Instr;
using ir::Opcode;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

constexpr std::string_view kLayers = "layers.";
constexpr std::string_view kVocabTiles = "vocab_tiles.";

// "layers.12" for "layers.12.mlp.hidden" or "layers.12"; "loss.vocab_tiles.3" for
// "loss.vocab_tiles.3.logits"; "" otherwise. A scope before it stays part of the unit:
// "micro_batch_1.layers.12" (gradient accumulation) is a layer of its own, apart from
// micro-batch 0's.
std::string_view layer_prefix(std::string_view name) {
  for (size_t at = 0; at < name.size();) {
    for (std::string_view unit : {kLayers, kVocabTiles}) {
      if (!name.substr(at).starts_with(unit)) continue;
      size_t end = at + unit.size();
      while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
      if (end > at + unit.size() && (end == name.size() || name[end] == '.')) return name.substr(0, end);
    }
    const size_t dot = name.find('.', at);
    if (dot == std::string_view::npos) break;
    at = dot + 1;
  }
  return {};
}

// The checkpoint name MaxText's policies refer to: the last dotted part of the value's name.
std::string_view checkpoint_name(std::string_view name) {
  size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

std::string describe(const Instr* i) {
  return i->meta().name.empty() ? "%" + i->id() : fmt::format("%{} ({})", i->id(), i->meta().name);
}

}  // namespace

const std::vector<std::string>& RematPolicy::supported_names() {
  static const std::vector<std::string> names = config::remat_policy_names();
  return names;
}

Result<RematPolicy> RematPolicy::from_name(std::string_view name) {
  for (const config::RematPolicyDef& def : config::remat_policies()) {
    if (def.name != name) continue;
    RematPolicy p;
    p.name = def.name;
    p.enabled = def.recomputes;
    p.saved_names = def.saved;
    return p;
  }
  if (ends_with(name, "_offloaded") || name == "custom") {
    return invalid_argument("remat_policy={} is not supported: Kiln has no host-offload memory space; accepted: {}",
                            name, fmt::join(supported_names(), ", "));
  }
  return invalid_argument("remat_policy={} is not a remat policy; accepted: {}", name,
                          fmt::join(supported_names(), ", "));
}

Result<bool> RematPass::run(ir::Module& module) {
  decisions_.clear();
  ir::Computation& comp = *module.entry();
  bool tiles = false;
  for (const auto& i : comp.instructions()) tiles = tiles || is_loss_tile_name(layer_prefix(i->meta().name));
  if (!policy_.enabled && !tiles) return false;
  std::vector<Instr*> order = comp.post_order();

  // Backward code: gradient values and everything computed from them.
  std::unordered_set<const Instr*> backward;
  for (Instr* i : order) {
    bool b = ends_with(i->meta().name, ".grad");
    for (const Instr* o : i->operands()) b = b || backward.count(o) > 0;
    if (b) backward.insert(i);
  }
  // The layer each forward value belongs to ("" for none). Earlier clones ("*.remat") belong
  // to no layer, so a second run finds nothing to do.
  // Unnamed instructions (made by passes, not by the model) belong to the layer of their
  // operands when those all come from one layer.
  std::unordered_map<const Instr*, std::string_view> layer;
  for (Instr* i : order) {
    if (backward.count(i) || ends_with(i->meta().name, ".remat")) continue;
    if (i->opcode() == Opcode::kParameter || i->opcode() == Opcode::kConstant) continue;
    std::string_view l = layer_prefix(i->meta().name);
    if (i->meta().name.empty()) {
      bool one_layer = true;
      for (const Instr* o : i->operands()) {
        auto it = layer.find(o);
        if (it == layer.end()) continue;
        if (!l.empty() && l != it->second) one_layer = false;
        l = it->second;
      }
      if (!one_layer) l = {};
    }
    if (!l.empty()) layer[i] = l;
  }
  auto layer_of = [&](const Instr* i) -> std::string_view {
    auto it = layer.find(i);
    return it == layer.end() ? std::string_view() : it->second;
  };

  // Saved (with the reason) or recomputed, for every forward value of a layer.
  std::unordered_map<const Instr*, std::string> saved_reason;
  for (Instr* i : order) {
    std::string_view l = layer_of(i);
    if (l.empty()) continue;
    if (!policy_.enabled && !is_loss_tile_name(l)) {
      saved_reason[i] = "saved: remat_policy=none";
      continue;
    }
    for (const Instr* u : i->users()) {
      if (!backward.count(u) && layer_of(u) != l) {
        saved_reason[i] = fmt::format("saved: an output of {} (read by {} outside it)", l, describe(u));
        break;
      }
    }
    if (saved_reason.count(i) || is_loss_tile_name(l)) continue;
    std::string cp(checkpoint_name(i->meta().name));
    if (policy_.saved_names.count(cp)) {
      saved_reason[i] = fmt::format("saved: checkpoint name '{}' is saved by remat_policy={}", cp, policy_.name);
    }
  }
  auto recomputed = [&](const Instr* i) { return !layer_of(i).empty() && !saved_reason.count(i); };

  // One clone per recomputed value, built from saved values and other clones.
  std::unordered_map<const Instr*, Instr*> clone_of;
  auto clone = [&](Instr* root) -> Instr* {
    std::vector<std::pair<Instr*, size_t>> stack = {{root, 0}};
    while (!stack.empty()) {
      auto& [cur, next] = stack.back();
      if (next < cur->operands().size()) {
        Instr* o = cur->operands()[next++];
        if (recomputed(o) && !clone_of.count(o)) stack.push_back({o, 0});
        continue;
      }
      std::vector<Instr*> operands;
      for (Instr* o : cur->operands()) operands.push_back(recomputed(o) ? clone_of.at(o) : o);
      Instr* copy = comp.add(cur->opcode(), cur->shape(), std::move(operands), cur->attrs());
      copy->set_called(cur->called());
      copy->mutable_meta() = cur->meta();
      copy->mutable_meta().name = (cur->meta().name.empty() ? std::string(layer_of(cur)) : cur->meta().name) + ".remat";
      clone_of[cur] = copy;
      stack.pop_back();
    }
    return clone_of.at(root);
  };

  bool verbose = verbose_ || verbosity() >= 2;
  int64_t recomputed_values = 0, recomputed_bytes = 0;
  for (Instr* i : order) {
    if (layer_of(i).empty()) continue;
    std::vector<Instr*> backward_users;
    std::unordered_set<const Instr*> seen;
    for (Instr* u : i->users()) {
      if (backward.count(u) && seen.insert(u).second) backward_users.push_back(u);
    }
    if (backward_users.empty()) continue;
    RematDecision d{describe(i), recomputed(i), ""};
    d.reason = !d.recompute ? saved_reason.at(i)
               : is_loss_tile_name(layer_of(i)) ? std::string("recompute: a loss tile's value (num_vocab_tiling)")
                                            : fmt::format("recompute: not saved by remat_policy={}", policy_.name);
    if (verbose) KILN_LOG(INFO) << "remat: " << d.value << ": " << d.reason;
    decisions_.push_back(std::move(d));
    if (!recomputed(i)) continue;
    ++recomputed_values;
    if (!i->shape().is_tuple()) recomputed_bytes += i->shape().byte_size();
    Instr* copy = clone(i);
    for (Instr* u : backward_users) {
      for (int k = 0; k < u->num_operands(); ++k) {
        if (u->operand(k) == i) u->replace_operand(k, copy);
      }
    }
  }
  KILN_VLOG(1) << fmt::format("remat_policy={}: {} forward values recomputed in the backward pass ({} bytes), {} clones",
                              policy_.name, recomputed_values, recomputed_bytes, clone_of.size());
  if (clone_of.empty()) return false;
  comp.topo_sort();
  return true;
}

}  // namespace kiln::passes
