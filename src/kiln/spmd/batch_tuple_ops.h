// Tuple-valued ops that treat every batch row on its own (the registry's OpDef::batch_rows):
// attention (out, lse) and its gradient (dq, dk, dv [, dsinks]), and sort and top-k
// (values, indices) of rank >= 2, which order each row along the last dimension on its own.
// The array rule (OpDef::dim_map) cannot describe them, since it maps operand dimensions to
// one result only, so without this rule the partitioner ran them on replicated operands:
// every device all-gathered the batch and repeated the whole attention, forward,
// rematerialized forward and backward.
//
// With the rule, the batch (dimension 0 of q, k, v, the segments, out, lse, dout, dlse)
// may stay split over the axes it already has; each device runs the op on its own rows.
// Result elements that carry the batch keep its split; the others are sums over the batch
// (dsinks), left as partial sums over the batch's axes for the partitioner to add up.
// Other dimensions (heads, sequence) are taken whole. For sort and top-k this is what lets
// each device route only its own tokens: the router's top-k over [B, T, E] and the MoE's
// sorts over [token shards, pairs] keep dimension 0 split instead of being gathered and
// repeated on every device.
#pragma once

#include <optional>
#include <vector>

#include "kiln/ir/instr.h"
#include "kiln/spmd/sharding_spec.h"

namespace kiln::spmd {

struct BatchTupleRule {
  std::vector<bool> operand_batch;  // per operand: dimension 0 is the batch
  std::vector<bool> element_batch;  // per result element: dimension 0 is the batch (else: a sum over it)
};

// The rule for `instr`, or nullopt when it is not such an op.
std::optional<BatchTupleRule> batch_tuple_rule(const ir::Instr& instr);

// Propagation records the decision for such an op as a rank-1 Spec whose one entry holds
// the batch's axes (empty: the op runs on replicated operands).
inline Spec batch_tuple_decision(const Axes& batch) { return Spec{{batch}, {}}; }

// The layout of result element `element` (of rank `rank`) when the batch is split over
// `batch`: the batch elements split along dimension 0, the others replicated, or, with
// `partial`, partial sums over `batch` (what each device's op leaves before they are added).
Spec batch_tuple_element(const BatchTupleRule& rule, const Axes& batch, int element, int rank, bool partial);

}  // namespace kiln::spmd
