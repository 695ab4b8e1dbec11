#include "kiln/spmd/partitioner.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/ops/registry.h"
#include "kiln/ops/rng.h"
#include "kiln/spmd/batch_tuple_ops.h"
#include "kiln/spmd/ragged_exchange.h"

namespace kiln::spmd {
namespace {

using ir::Instr;
using ir::Opcode;

// A value of the per-device program and how it is laid out.
struct Local {
  Instr* value = nullptr;
  Spec spec;
};

Axes minus(const Axes& a, const std::set<std::string>& drop) {
  Axes out;
  for (const std::string& x : a) {
    if (!drop.count(x)) out.push_back(x);
  }
  return out;
}

bool is_subset(const Axes& a, const Axes& b) {
  return std::all_of(a.begin(), a.end(), [&](const std::string& x) { return std::find(b.begin(), b.end(), x) != b.end(); });
}

class Partitioner {
 public:
  Partitioner(const ir::Module& global, const PartitionOptions& options)
      : global_(global), options_(options), mesh_(options.mesh) {}

  Result<PartitionResult> run() {
    const ir::Computation& entry = *global_.entry();
    specs_ = propagate(entry, mesh_, options_.rules, options_.seeds, &result_.notes);
    result_.module = std::make_unique<ir::Module>(global_.name());
    ir::Computation* comp = result_.module->add_computation(entry.name());
    result_.module->set_entry(comp);
    b_ = std::make_unique<ops::Builder>(comp);

    for (const auto& owned : entry.instructions()) {
      const Instr* instr = owned.get();
      KILN_ASSIGN_OR_RETURN(Local local, lower(*instr));
      if (!instr->shape().is_tuple()) {
        const Spec& target = specs_.at(instr);
        local = Local{reshard(local, target), target};
        // The metadata travels with the value; the layout is recorded for dumps and tools.
        local.value->mutable_meta() = instr->meta();
        local.value->mutable_meta().sharding = target.to_ir();
      }
      values_[instr] = local;
    }
    const Instr* root = entry.root();
    if (root->opcode() == Opcode::kTuple) {
      comp->set_root(values_.at(root).value);
    } else {
      // An array result: in the requested layout, else where propagation put it.
      Spec want = specs_.at(root);
      if (!options_.seeds.outputs.empty() && options_.seeds.outputs[0]) want = Spec::from_ir(*options_.seeds.outputs[0]);
      comp->set_root(reshard(values_.at(root), want));
      result_.output_shardings.push_back(want.to_ir());
    }
    result_.param_shardings.resize(entry.num_params());
    for (const Instr* p : entry.params()) {
      if (!p->shape().is_tuple()) result_.param_shardings[p->attrs().get_int("index")] = specs_.at(p).to_ir();
    }
    KILN_RETURN_IF_ERROR(ops::verify(*result_.module));
    // Resharding inserts the same gather for every use of a value, and slices of values
    // that are replicated anyway: the compile pipeline's cleanups (passes/compile_pipeline.h)
    // merge and remove them.
    return std::move(result_);
  }

 private:
  // ---- collectives ----
  ir::Attrs group_attrs(const Axes& axes, int dim) {
    ir::Attrs a;
    a.set("mesh_axes", fmt::format("{}", fmt::join(axes, ",")));
    a.set("group_size", mesh_.size(axes));
    if (dim >= 0) a.set("dim", int64_t{dim});
    return a;
  }
  Instr* all_gather(Instr* x, int dim, const Axes& axes) {
    return b_->emit(Opcode::kAllGather, {x}, group_attrs(axes, dim));
  }
  Instr* reduce_scatter(Instr* x, int dim, const Axes& axes) {
    return b_->emit(Opcode::kReduceScatter, {x}, group_attrs(axes, dim));
  }
  Instr* all_reduce(Instr* x, const Axes& axes) { return b_->emit(Opcode::kAllReduce, {x}, group_attrs(axes, -1)); }
  Instr* shard_slice(Instr* x, int dim, const Axes& axes) {
    return b_->emit(Opcode::kShardSlice, {x}, group_attrs(axes, dim));
  }

  // Axes in mesh order (collective groups are named the same way everywhere).
  Axes in_mesh_order(const Axes& axes) const {
    Axes out = axes;
    std::sort(out.begin(), out.end(),
              [&](const std::string& a, const std::string& b) { return mesh_.axis_index(a) < mesh_.axis_index(b); });
    return out;
  }

  // Brings `v` to `target` (which has no partial axes).
  Instr* reshard(const Local& v, const Spec& target) {
    Instr* x = v.value;
    Spec cur = v.spec;
    if (cur == target) return x;
    if (!cur.partial.empty()) {
      // Sum the partial values: reduce-scatter onto a dimension the target splits over
      // (some of) the partial axes, all-reduce over the rest.
      int best = -1;
      for (int d = 0; d < target.rank(); ++d) {
        if (!cur.dims[d].empty() || target.dims[d].empty() || !is_subset(target.dims[d], cur.partial)) continue;
        if (best < 0 || mesh_.size(target.dims[d]) > mesh_.size(target.dims[best])) best = d;
      }
      Axes rest = cur.partial;
      if (best >= 0) rest = minus(rest, std::set<std::string>(target.dims[best].begin(), target.dims[best].end()));
      // Scatter first: the all-reduce then moves only this device's share.
      if (best >= 0) {
        x = reduce_scatter(x, best, target.dims[best]);
        cur.dims[best] = target.dims[best];
      }
      if (!rest.empty()) x = all_reduce(x, in_mesh_order(rest));
      cur.partial.clear();
    }
    for (int d = 0; d < cur.rank(); ++d) {
      if (cur.dims[d] != target.dims[d] && !cur.dims[d].empty()) {
        x = all_gather(x, d, cur.dims[d]);
        cur.dims[d].clear();
      }
    }
    for (int d = 0; d < cur.rank(); ++d) {
      if (cur.dims[d] != target.dims[d]) {
        x = shard_slice(x, d, target.dims[d]);
        cur.dims[d] = target.dims[d];
      }
    }
    return x;
  }

  const Local& value_of(const Instr* global) const { return values_.at(global); }

  // ---- lowering one instruction ----
  Result<Local> lower(const Instr& instr) {
    switch (instr.opcode()) {
      case Opcode::kParameter: {
        const Spec& s = specs_.at(&instr);
        Instr* p = b_->emit(Opcode::kParameter, {}, instr.attrs(), s.local_shape(instr.shape(), mesh_));
        return Local{p, s};
      }
      case Opcode::kConstant:
        return Local{b_->computation()->add_constant(instr.literal()), Spec::replicated(instr.shape().rank())};
      case Opcode::kTuple: {
        std::vector<Instr*> elements;
        const bool is_root = &instr == global_.entry()->root();
        for (int i = 0; i < instr.num_operands(); ++i) {
          const Instr* o = instr.operand(i);
          const Local& v = value_of(o);
          if (o->shape().is_tuple()) {
            elements.push_back(v.value);
            continue;
          }
          Spec want = specs_.at(o);
          if (is_root && i < static_cast<int>(options_.seeds.outputs.size()) && options_.seeds.outputs[i]) {
            want = Spec::from_ir(*options_.seeds.outputs[i]);
          }
          if (is_root) result_.output_shardings.push_back(want.to_ir());
          elements.push_back(reshard(v, want));
        }
        return Local{b_->emit(Opcode::kTuple, elements, instr.attrs()), {}};
      }
      case Opcode::kGetTupleElement: {
        if (std::optional<BatchTupleRule> rule = batch_tuple_rule(*instr.operand(0))) {
          const Local& t = value_of(instr.operand(0));
          if (!t.spec.dims.empty() && !t.spec.dims[0].empty()) {
            // An element of a batch-split op: its local shape, its rows or its partial sums.
            Instr* e = b_->emit(Opcode::kGetTupleElement, {t.value}, instr.attrs());
            return Local{e, batch_tuple_element(*rule, in_mesh_order(t.spec.dims[0]),
                                                static_cast<int>(instr.attrs().get_int("index")),
                                                instr.shape().rank(), true)};
          }
        }
        return Local{b_->emit(Opcode::kGetTupleElement, {value_of(instr.operand(0)).value}, instr.attrs(),
                              instr.shape()),
                     Spec::replicated(instr.shape().rank())};
      }
      default:
        break;
    }
    if (ops::op_def(instr.opcode()).splittable_source) {
      const Spec& s = specs_.at(&instr);
      if (s.num_shards(mesh_) > 1) {
        // The device's block, made directly (ops/rng.h): never whole, then sliced.
        ir::Attrs attrs = instr.attrs();
        attrs.set("split", ops::format_split(s.to_ir()));
        return Local{b_->emit(instr.opcode(), {}, attrs, s.local_shape(instr.shape(), mesh_)), s};
      }
    }
    if (std::optional<BatchTupleRule> rule = batch_tuple_rule(instr)) {
      auto it = specs_.find(&instr);
      if (it != specs_.end() && !it->second.dims[0].empty()) return lower_batch_tuple(instr, *rule, it->second.dims[0]);
    }
    if ((instr.opcode() == Opcode::kGroupedMatmul || instr.opcode() == Opcode::kGroupedMatmulWeightGrad) &&
        instr.operand(0)->shape().rank() == 3) {
      const Spec& x = value_of(instr.operand(0)).spec;
      if (std::optional<Axes> block = expert_block_axes(instr, x.dims[0], mesh_)) {
        return lower_expert_block(instr, x.dims[0], *block);
      }
    }
    if (instr.opcode() == Opcode::kRaggedAllToAll) {
      const Spec& s = specs_.at(&instr);
      if (std::optional<Axes> axes = ragged_exchange_axes(instr, s.dims[0], mesh_)) return lower_ragged(instr, s, *axes);
    }
    if (has_passthrough(instr)) return lower_passthrough(instr);
    return lower_replicated(instr);
  }

  // The per-device exchange: each device sends its own entry's rows (ragged_exchange.h).
  Result<Local> lower_ragged(const Instr& instr, const Spec& spec, const Axes& axes) {
    Spec entries = Spec::replicated(instr.operand(1)->shape().rank());
    entries.dims[0] = spec.dims[0];
    Spec rows = Spec::replicated(instr.operand(0)->shape().rank());
    rows.dims[0] = spec.dims[0];
    ir::Attrs attrs = instr.attrs();
    attrs.set("mesh_axes", fmt::format("{}", fmt::join(axes, ",")));
    KILN_ASSIGN_OR_RETURN(Instr * y, b_->try_emit(instr.opcode(),
                                                  {reshard(value_of(instr.operand(0)), rows),
                                                   reshard(value_of(instr.operand(1)), entries)},
                                                  attrs));
    return Local{y, spec};
  }

  // A batched grouped matmul on each device's entry and its block of experts
  // (ragged_exchange.h); the weight gradient is left as partial sums over the entries'
  // other axes, for reshard to reduce-scatter or all-reduce where its users want it.
  Result<Local> lower_expert_block(const Instr& instr, const Axes& split, const Axes& block) {
    const bool gmm = instr.opcode() == Opcode::kGroupedMatmul;
    auto along_dim0 = [&](int i, const Axes& axes) {
      Spec s = Spec::replicated(instr.operand(i)->shape().rank());
      s.dims[0] = axes;
      return reshard(value_of(instr.operand(i)), s);
    };
    std::vector<Instr*> operands = {along_dim0(0, split), along_dim0(1, gmm ? block : split), along_dim0(2, split)};
    ir::Attrs attrs = instr.attrs();
    Spec out = Spec::replicated(instr.shape().rank());
    if (gmm) {
      out.dims[0] = split;
    } else {
      attrs.set("num_groups", instr.attrs().get_int("num_groups") / mesh_.size(block));
      out.dims[0] = block;
      out.partial = in_mesh_order(minus(split, std::set<std::string>(block.begin(), block.end())));
    }
    KILN_ASSIGN_OR_RETURN(Instr * y, b_->try_emit(instr.opcode(), operands, attrs));
    return Local{y, out};
  }

  // Every operand gathered, the op computed on whole values.
  Result<Local> lower_replicated(const Instr& instr) {
    std::vector<Instr*> operands;
    for (const Instr* o : instr.operands()) {
      const Local& v = value_of(o);
      operands.push_back(o->shape().is_tuple() ? v.value : reshard(v, Spec::replicated(o->shape().rank())));
    }
    Instr* y = b_->emit(instr.opcode(), operands, instr.attrs(), instr.shape());
    y->set_called(instr.called());
    return Local{y, instr.shape().is_tuple() ? Spec{} : Spec::replicated(instr.shape().rank())};
  }

  // Each device runs the op on its rows of the batch (batch_tuple_ops.h).
  Result<Local> lower_batch_tuple(const Instr& instr, const BatchTupleRule& rule, const Axes& batch) {
    std::vector<Instr*> operands;
    for (int i = 0; i < instr.num_operands(); ++i) {
      Spec want = Spec::replicated(instr.operand(i)->shape().rank());
      if (rule.operand_batch[i]) want.dims[0] = batch;
      operands.push_back(reshard(value_of(instr.operand(i)), want));
    }
    KILN_ASSIGN_OR_RETURN(Instr * y, b_->try_emit(instr.opcode(), operands, instr.attrs()));
    return Local{y, batch_tuple_decision(batch)};
  }

  Result<Local> lower_passthrough(const Instr& instr) {
    const Spec& target = specs_.at(&instr);
    std::vector<std::vector<int>> m = passthrough_map(instr);
    const int n = instr.num_operands();
    std::vector<Spec> want(n);
    for (int i = 0; i < n; ++i) want[i] = Spec::replicated(instr.operand(i)->shape().rank());

    // Dimensions summed over that stay split: their partial sums are added up afterwards.
    std::set<std::string> kept;
    bool fresh_zeros = false;  // a scatter_add's zeros, made at the local shape it wants
    if (instr.opcode() == Opcode::kDotGeneral) {
      const auto& lc = instr.attrs().get_ints("lhs_contract");
      const auto& rc = instr.attrs().get_ints("rhs_contract");
      const Spec& l = value_of(instr.operand(0)).spec;
      const Spec& r = value_of(instr.operand(1)).spec;
      for (size_t k = 0; k < lc.size(); ++k) {
        const Axes& a = l.dims[lc[k]];
        if (a.empty() || a != r.dims[rc[k]]) continue;
        if (std::any_of(a.begin(), a.end(), [&](const std::string& x) { return kept.count(x) > 0; })) continue;
        kept.insert(a.begin(), a.end());
        want[0].dims[lc[k]] = a;
        want[1].dims[rc[k]] = a;
      }
    } else if (instr.opcode() == Opcode::kScatterAdd) {
      // Each device scatters its own rows into zeros (propagation.h): its indices' matching
      // dimensions split the same way.
      const int64_t axis = instr.attrs().get_int("axis");
      const int64_t bd = instr.attrs().get_int_or("batch_dims", 0);
      for (const auto& [d, a] : scatter_add_partial_dims(instr, value_of(instr.operand(2)).spec)) {
        kept.insert(a.begin(), a.end());
        want[2].dims[d] = a;
        want[1].dims[bd + (d - axis)] = a;
        fresh_zeros = true;
      }
    } else if (instr.opcode() == Opcode::kReduceSum) {
      const Spec& x = value_of(instr.operand(0)).spec;
      for (int d = 0; d < x.rank(); ++d) {
        const Axes& a = x.dims[d];
        if (m[0][d] >= 0 || a.empty()) continue;
        if (std::any_of(a.begin(), a.end(), [&](const std::string& s) { return kept.count(s) > 0; })) continue;
        kept.insert(a.begin(), a.end());
        want[0].dims[d] = a;
      }
    }
    // The result's split, less the kept axes, is what the mapped operand dims carry.
    Spec produced = Spec::replicated(instr.shape().rank());
    std::vector<bool> covered(instr.shape().rank(), instr.opcode() == Opcode::kBroadcast);
    for (int i = 0; i < n; ++i) {
      for (size_t d = 0; d < m[i].size(); ++d) {
        if (m[i][d] >= 0) covered[m[i][d]] = true;
      }
    }
    for (int r = 0; r < produced.rank(); ++r) {
      if (covered[r]) produced.dims[r] = minus(target.dims[r], kept);
    }
    for (int i = 0; i < n; ++i) {
      for (size_t d = 0; d < m[i].size(); ++d) {
        if (m[i][d] >= 0) want[i].dims[d] = produced.dims[m[i][d]];
      }
    }
    produced.partial = in_mesh_order(Axes(kept.begin(), kept.end()));

    std::vector<Instr*> operands;
    for (int i = 0; i < n; ++i) {
      if (i == 0 && fresh_zeros) {
        const Instr& zeros = *instr.operand(0);
        operands.push_back(b_->emit(Opcode::kBroadcast, {value_of(zeros.operand(0)).value}, zeros.attrs(),
                                    want[0].local_shape(zeros.shape(), mesh_)));
        continue;
      }
      operands.push_back(reshard(value_of(instr.operand(i)), want[i]));
    }
    ir::Attrs attrs = instr.attrs();
    ir::Shape local = produced.local_shape(instr.shape(), mesh_);
    if (instr.opcode() == Opcode::kSlice) {
      // Mapped dims are taken whole: their limits become the local sizes.
      std::vector<int64_t> limit = attrs.get_ints("limit");
      for (size_t d = 0; d < m[0].size(); ++d) {
        if (m[0][d] >= 0) limit[d] = operands[0]->shape().dim(static_cast<int>(d));
      }
      attrs.set("limit", limit);
    }
    KILN_ASSIGN_OR_RETURN(Instr * y, b_->try_emit(instr.opcode(), operands, attrs, local));
    return Local{y, produced};
  }

  const ir::Module& global_;
  const PartitionOptions& options_;
  const config::Mesh& mesh_;
  std::unordered_map<const Instr*, Spec> specs_;
  std::unordered_map<const Instr*, Local> values_;
  std::unique_ptr<ops::Builder> b_;
  PartitionResult result_;
};

// Calls fn(global_flat, block_flat) for every element of the block [offset, offset + local)
// of an array with dims `dims`, in row-major block order.
template <typename Fn>
void for_each_in_block(const std::vector<int64_t>& dims, const std::vector<int64_t>& offset,
                       const std::vector<int64_t>& local, Fn&& fn) {
  int rank = static_cast<int>(dims.size());
  std::vector<int64_t> strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * dims[d + 1];
  int64_t total = 1;
  for (int64_t n : local) total *= n;
  std::vector<int64_t> index(rank, 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t g = 0;
    for (int d = 0; d < rank; ++d) g += (offset[d] + index[d]) * strides[d];
    fn(g, k);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < local[d]) break;
      index[d] = 0;
    }
  }
}

std::vector<int64_t> block_offset(const ir::Shape& global, const ir::Sharding& sharding, const config::Mesh& mesh,
                                  int64_t device, std::vector<int64_t>* local) {
  std::vector<int64_t> offset(global.rank(), 0);
  *local = global.dims();
  for (int d = 0; d < global.rank(); ++d) {
    if (d >= static_cast<int>(sharding.dims.size())) break;
    int64_t n = mesh.size(sharding.dims[d]);
    (*local)[d] = global.dim(d) / n;
    offset[d] = mesh.shard_index(device, sharding.dims[d]) * (*local)[d];
  }
  return offset;
}

}  // namespace

Result<PartitionResult> partition(const ir::Module& module, const PartitionOptions& options) {
  Partitioner p(module, options);
  return p.run();
}

ir::Literal shard_literal(const ir::Literal& global, const ir::Sharding& sharding, const config::Mesh& mesh, int64_t device) {
  std::vector<int64_t> local;
  std::vector<int64_t> offset = block_offset(global.shape(), sharding, mesh, device, &local);
  ir::Shape shape = global.shape().with_dims(local);
  std::vector<double> block(shape.num_elements());
  const std::vector<double>& from = global.values();
  for_each_in_block(global.shape().dims(), offset, local, [&](int64_t g, int64_t k) { block[k] = from[g]; });
  return ir::Literal(shape, std::move(block));
}

ir::Literal assemble_literal(const std::vector<const ir::Literal*>& shards, const ir::Shape& global,
                             const ir::Sharding& sharding, const config::Mesh& mesh) {
  std::vector<double> values(global.num_elements());
  for (size_t device = 0; device < shards.size(); ++device) {
    std::vector<int64_t> local;
    std::vector<int64_t> offset = block_offset(global, sharding, mesh, static_cast<int64_t>(device), &local);
    const std::vector<double>& from = shards[device]->values();
    for_each_in_block(global.dims(), offset, local, [&](int64_t g, int64_t k) { values[g] = from[k]; });
  }
  return ir::Literal(global, std::move(values));
}

}  // namespace kiln::spmd
