// The interface between model families and the trainer. A model declares its parameters
// (names, shapes, logical axes, initialisers) and traces its loss with the frontend; the
// trainer owns everything else (optimizer, gradients, the step program, data, metrics).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/frontend/graph.h"

namespace kiln::models {

// How a parameter starts. MaxText: kernels use variance scaling (scale 1, fan-in,
// truncated normal), biases and sinks start at zero, norm scales at one.
struct Init {
  enum class Kind { kZeros, kOnes, kNormal, kTruncatedNormalFanIn };
  Kind kind = Kind::kZeros;
  double stddev = 0.0;  // kNormal
  int64_t fan_in = 1;   // kTruncatedNormalFanIn: stddev = sqrt(1 / fan_in) / 0.87962566
};

struct ParamSpec {
  std::string name;                // "layers.3.mlp.wi_0" (dots, MaxText-like names)
  ir::Shape shape;                 // in weight_dtype
  std::vector<std::string> axes;   // logical axis names, one per dim ("" for none)
  Init init;
  // Fraction of this parameter one token uses (1 for dense weights, k/E for expert
  // weights, 0 for the input embedding), for "active parameters per token".
  double active_fraction = 1.0;
};

// One micro-batch, MaxText's fields, each s32 [B, T]. Segment id 0 marks padding (no loss);
// positions restart at 0 in each packed document.
struct Batch {
  frontend::Tensor inputs;
  frontend::Tensor targets;
  frontend::Tensor positions;
  frontend::Tensor segmentation;
};

struct LossOutputs {
  frontend::Tensor loss;           // f32 []: xent_sum / total_weights + auxiliary terms
  frontend::Tensor xent_sum;       // f32 []: summed token cross-entropy over counted tokens
  frontend::Tensor total_weights;  // f32 []: number of counted target tokens
  frontend::Tensor moe_lb_loss;    // f32 []: mean over layers of the weighted load-balance loss (0 if unused)
  frontend::Tensor z_loss;         // f32 []: weighted output z-loss (0 if unused)
  // f32 [MoE layers, 3]: per layer max and mean (token, expert) pairs per expert and pairs
  // dropped by the capacity; invalid for a model without MoE layers. Not differentiated.
  frontend::Tensor expert_load;
  // Parameters the step sets rather than trains (DeepSeek-V3's router correction bias):
  // after the optimizer, parameter `index` (in params()) becomes `value` (its shape and
  // dtype, computed from this step's forward pass, e.g. from the expert loads) instead of
  // the optimizer's update, and its optimizer state stays as it was (zero). Such a
  // parameter must take no gradient (the model stops it), so clipping and the other
  // parameters' updates do not see it. Empty for most models.
  struct StateUpdate {
    int index = -1;
    frontend::Tensor value;
  };
  std::vector<StateUpdate> state_updates;
};

struct ParamCounts {
  int64_t total = 0;
  int64_t active_per_token = 0;  // excludes the input embedding, as the GPT-OSS model card counts
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<ParamSpec>& params() const = 0;
  // params are the traced values of params() in the same order.
  virtual LossOutputs loss(frontend::Graph& g, std::span<const frontend::Tensor> params, const Batch& batch) const = 0;
  // Logits [B, T, V] in float32, for parity checks and sampling.
  virtual frontend::Tensor logits(frontend::Graph& g, std::span<const frontend::Tensor> params,
                                  const Batch& batch) const = 0;
  ParamCounts counts() const;
};

// A model family: the decoder_block that names it and the function that builds it from a
// resolved config (each family lives in its own directory under models/).
struct Family {
  std::string decoder_block;  // "gpt_oss", "llama2", "qwen3_moe", "deepseek" (MaxText's names)
  std::string summary;        // one line for listings
  Result<std::unique_ptr<Model>> (*make)(const config::Config& config) = nullptr;
};
// Every family Kiln has (model.cc holds the table: one row per family).
const std::vector<Family>& families();

// Builds the model that the config's decoder_block names ("gpt_oss"). A config the model
// cannot express (an unknown rope_type, heads that do not divide) is an error naming the key.
Result<std::unique_ptr<Model>> make_model(const config::Config& config);

// Traces the initial value of one parameter per spec.init (MaxText's initialisers), in the
// spec's dtype. Each call draws from its own random stream of `seed` (Graph::random), so
// tracing all params() in order with init_weights_seed gives a reproducible initialisation.
frontend::Tensor initial_value(frontend::Graph& g, const ParamSpec& spec, int64_t seed);

}  // namespace kiln::models
