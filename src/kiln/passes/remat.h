// RematPass ("remat"): rematerialization driven by `remat_policy`, as MaxText's
// jax.checkpoint around each decoder layer. After autodiff, the backward pass reads forward
// values of every layer; the policy says which of them stay in memory from the forward pass
// to the backward pass (saved) and which the backward pass computes again from saved values
// (recomputed), so activation memory falls at the price of a second forward pass per layer.
//
// Which values are whose:
//   - a forward value of layer N is one whose name is "layers.N" or starts with "layers.N."
//     and that does not depend on any gradient (autodiff names gradient values "<name>.grad";
//     everything computed from a gradient is backward code: accumulations, clipping, AdamW);
//     an unnamed forward value (made by a pass) belongs to the layer of its operands when
//     they all come from one layer;
//   - saved: parameters and constants; values outside the decoder layers (embedding, logits,
//     masks, RoPE tables: MaxText remats only the layers); a layer's outputs (forward values
//     read by forward code outside the layer: the residual stream, i.e. the next layer's
//     `decoder_layer_input`); and values whose checkpoint name (the last dotted part of the
//     name: "layers.3.self_attention.query_proj" -> "query_proj") the policy saves;
//   - everything else that the backward pass reads is recomputed: every backward use is
//     rewired to a clone ("<name>.remat") built from saved values, one clone per value.
// The clones are appended and placed by the topological sort just before their first
// backward use, i.e. at the start of that layer's backward pass, so the original forward
// values die at their last forward use. The memory scheduler keeps them there: it runs a
// clone (recognized by its name) only right before an instruction that needs it
// (sched/memory_scheduler.h).
//
// Loss tiles (the model's num_vocab_tiling): values named "vocab_tiles.N" or under it (the
// logits of one tile of the sequence, its softmax) are units like layers, recomputed for the
// backward pass whatever the policy (also under `none`), except the tile's outputs (its
// share of the loss), so the logits of the whole sequence never exist at once.
//
// Policies (MaxText's names and saved checkpoint names):
//   none                               the pass changes nothing
//   full                               nothing but the layer inputs
//   minimal                            query_proj key_proj value_proj qkv_proj out_proj
//                                      mlpwi_0 mlpwi_1 mlpwi mlpwo
//   minimal_with_context               minimal + context
//   save_dot_with_context_except_mlp   query/key/value/qkv_proj, context, out_proj
//   save_dot_except_mlpwi              query/key/value/qkv_proj, out_proj, mlpwo
//   save_dot_except_mlp                query/key/value/qkv_proj, out_proj
//   save_qkv_proj                      query/key/value/qkv_proj
//   save_out_proj                      out_proj
// The offloading policies (minimal_offloaded, qkv_proj_offloaded) and `custom` are refused:
// Kiln has no host-offload memory space.
//
// Place: after simplification and CSE (CSE would merge every clone back into its original)
// and before fusion (so recomputed elementwise chains fuse into the backward kernels).
// Decisions (one per forward value the backward pass reads) are logged with their reasons at
// KILN_VLOG(2), or always with `verbose`.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "kiln/passes/pass.h"

namespace kiln::passes {

struct RematPolicy {
  std::string name = "none";
  bool enabled = false;               // false for "none"
  std::set<std::string> saved_names;  // checkpoint names kept from the forward pass

  // MaxText's policy names (see above); anything else is an error that lists them.
  static Result<RematPolicy> from_name(std::string_view name);
  static const std::vector<std::string>& supported_names();
};

// The decision for one forward value that the backward pass reads.
struct RematDecision {
  std::string value;   // "%add.12 (layers.1.self_attention.query_proj)"
  bool recompute = false;
  std::string reason;  // "not saved by remat_policy=full", "saved: checkpoint name ..."
};

class RematPass : public Pass {
 public:
  explicit RematPass(RematPolicy policy, bool verbose = false) : policy_(std::move(policy)), verbose_(verbose) {}
  std::string_view name() const override { return "remat"; }
  Result<bool> run(ir::Module& module) override;

  // The decisions of the last run, in program order.
  const std::vector<RematDecision>& decisions() const { return decisions_; }

 private:
  RematPolicy policy_;
  bool verbose_;
  std::vector<RematDecision> decisions_;
};

}  // namespace kiln::passes
