// Small models implementing models::Model, so the trainer is tested without GPT-OSS:
//   TinyLm   a bigram language model: logits = rms_norm(embed[inputs]) @ unembed + bias
//   BadLoss  a loss that is NaN (or +Inf) from the first step, for the abort path
#pragma once

#include <limits>
#include <vector>

#include "kiln/frontend/graph.h"
#include "kiln/frontend/nn.h"
#include "kiln/models/model.h"

namespace kiln::train::testing {

using frontend::DType;
using frontend::Tensor;

class TinyLm : public models::Model {
 public:
  TinyLm(int64_t vocab, int64_t dim) {
    using models::Init;
    params_.push_back({"token_embedder.embedding", frontend::f32({vocab, dim}), {"vocab", "embed"},
                       Init{Init::Kind::kNormal, 1.0, 1}, 0.0});
    params_.push_back({"decoder_norm.scale", frontend::f32({dim}), {"norm"}, Init{Init::Kind::kOnes, 0, 1}, 1.0});
    params_.push_back({"logits_dense.kernel", frontend::f32({dim, vocab}), {"embed", "vocab"},
                       Init{Init::Kind::kTruncatedNormalFanIn, 0, dim}, 1.0});
    params_.push_back({"logits_dense.bias", frontend::f32({vocab}), {"vocab"}, Init{Init::Kind::kZeros, 0, 1}, 1.0});
  }
  const std::vector<models::ParamSpec>& params() const override { return params_; }

  Tensor logits(frontend::Graph& g, std::span<const Tensor> p, const models::Batch& batch) const override {
    Tensor x = p[0].take(batch.inputs, 0);                 // [B, T, D]
    x = frontend::nn::rms_norm(x, p[1], 1e-6);
    return frontend::nn::linear(x, p[2], p[3]);            // [B, T, V]
  }

  models::LossOutputs loss(frontend::Graph& g, std::span<const Tensor> p, const models::Batch& batch) const override {
    Tensor weights = not_equal(batch.segmentation, g.full(batch.segmentation.dims(), 0, DType::kS32)).astype(DType::kF32);
    models::LossOutputs out;
    out.xent_sum = frontend::nn::cross_entropy_sum(logits(g, p, batch), batch.targets, weights);
    out.total_weights = weights.sum();
    out.loss = out.xent_sum / out.total_weights;
    out.moe_lb_loss = g.scalar(0.0);
    return out;
  }

 private:
  std::vector<models::ParamSpec> params_;
};

class BadLoss : public models::Model {
 public:
  explicit BadLoss(bool nan) : nan_(nan) {
    params_.push_back({"w", frontend::f32({3}), {""}, models::Init{models::Init::Kind::kOnes, 0, 1}, 1.0});
  }
  const std::vector<models::ParamSpec>& params() const override { return params_; }
  Tensor logits(frontend::Graph& g, std::span<const Tensor> p, const models::Batch&) const override { return p[0]; }
  models::LossOutputs loss(frontend::Graph& g, std::span<const Tensor> p, const models::Batch&) const override {
    models::LossOutputs out;
    Tensor bad = nan_ ? g.scalar(0.0) / g.scalar(0.0) : g.scalar(1.0) / g.scalar(0.0);
    out.loss = p[0].sum() * 0.0 + bad;
    return out;
  }

 private:
  bool nan_;
  std::vector<models::ParamSpec> params_;
};

}  // namespace kiln::train::testing
