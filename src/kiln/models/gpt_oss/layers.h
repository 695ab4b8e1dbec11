// The pieces of a GPT-OSS layer, one file each (attention.cc, mlp.cc, rope.cc). Internal to
// models/gpt_oss: gpt_oss.cc composes them into the decoder.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/frontend/tensor.h"
#include "kiln/models/gpt_oss/gpt_oss.h"

namespace kiln::models::gpt_oss {

// The traced parameters of one trace, looked up by name.
class ParamTable {
 public:
  ParamTable(const GptOss& model, std::span<const frontend::Tensor> values)
      : index_([&model](const std::string& name) { return model.index(name); }),
        dtype_(model.config().dtype),
        values_(values) {}
  // Any model's parameters (another family reusing these pieces): `index` gives a name's
  // position in `values` (-1 when absent); `dtype` is the compute dtype.
  ParamTable(std::function<int(const std::string&)> index, ir::DType dtype, std::span<const frontend::Tensor> values)
      : index_(std::move(index)), dtype_(dtype), values_(values) {}
  bool has(const std::string& name) const { return index_(name) >= 0; }
  // The parameter as stored (weight_dtype).
  frontend::Tensor raw(const std::string& name) const;
  // The parameter cast to the compute dtype, as every matmul uses it.
  frontend::Tensor operator()(const std::string& name) const;

 private:
  std::function<int(const std::string&)> index_;
  ir::DType dtype_;
  std::span<const frontend::Tensor> values_;
};

// cos and sin of the rotary angles positions [B, T] (s32) * inv_freq [Dh/2], each float32
// [B, T, 1, Dh/2] and multiplied by the config's scale (YaRN's concentration). Built once
// per trace and shared by every layer.
struct RopeTables {
  frontend::Tensor cos, sin;
  bool interleave = false;
};
RopeTables rope_tables(const RopeConfig& rope, const frontend::Tensor& positions, const std::vector<double>& inv_freq);

// Rotates x [B, T, N, Dh]: halves (a, b) -> (a cos - b sin, b cos + a sin); with
// `interleave` the pairs are (x[2i], x[2i+1]) and the result is written as halves, as
// MaxText's YaRN does. Computed in float32, returned in x's dtype.
frontend::Tensor apply_rope(const frontend::Tensor& x, const RopeTables& rope);

// pred [B, T, T]: query i may see key j (causal, same segment, and i - j < window when
// window > 0).
frontend::Tensor attention_mask(const frontend::Tensor& segmentation, int64_t window);

// x: [B, T, D] (already normalised) -> [B, T, D]. `prefix` is "layers.N.self_attention".
// `allowed` is the mask the dot-product path reads; the fused path (attention=flash) applies
// the same mask from its parts: causal, segmentation [B, T] and window (0 on full layers).
frontend::Tensor attention(const GptOssConfig& c, const ParamTable& p, const std::string& prefix,
                           const frontend::Tensor& x, const RopeTables& rope, const frontend::Tensor& allowed,
                           const frontend::Tensor& segmentation, int64_t window);

// hidden = act(gate[, up]) with the config's activations (mlp.cc); any equal shapes.
frontend::Tensor hidden_activation(const GptOssConfig& c, const frontend::Tensor& gate, const frontend::Tensor& up);

// The sparse experts over token shards (expert_parallel.cc): x [B, T, D], the routing's
// expert index s32 [B, T, k], weights [B, T, k] and (capacity only) keep [B, T, k] (1 for
// a pair within its expert's capacity; invalid when dropless) -> [B, T, D].
frontend::Tensor token_routed_experts(const GptOssConfig& c, const ParamTable& p, const std::string& prefix,
                                      const frontend::Tensor& x, const frontend::Tensor& index,
                                      const frontend::Tensor& weights, const frontend::Tensor& keep);
// Whether token_routed_experts applies to x [B, T, D] under the config's shards.
bool use_token_routing(const GptOssConfig& c, const frontend::Tensor& x);

struct MlpOutputs {
  frontend::Tensor out;      // [B, T, D]
  frontend::Tensor lb_loss;  // f32 [], weighted load-balance loss (invalid for a dense MLP or weight 0)
  // MoE only: f32 [3] = {max, mean} routed (token, expert) pairs per expert, pairs dropped
  // by the capacity (0 when dropless).
  frontend::Tensor expert_load;
  // MoE only: f32 [E], (token, expert) pairs routed to each expert (no gradient).
  frontend::Tensor expert_counts;
};
// x: [B, T, D] (already normalised). `prefix` is "layers.N.mlp".
MlpOutputs mlp(const GptOssConfig& c, const ParamTable& p, const std::string& prefix, const frontend::Tensor& x);

}  // namespace kiln::models::gpt_oss
