#include "kiln/train/eval_program.h"

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"

namespace kiln::train {

using frontend::DType;
using frontend::Graph;
using frontend::Tensor;

Result<EvalProgram> build_eval_program(const models::Model& model, int64_t batch, int64_t seq_len) {
  const std::vector<models::ParamSpec>& specs = model.params();
  if (specs.empty()) return invalid_argument("the model has no parameters to evaluate");
  EvalProgram program;
  program.num_params = static_cast<int64_t>(specs.size());
  Graph g("eval_step");
  // Parameters in EvalProgram's layout: params, then the batch fields (as the step program).
  std::vector<Tensor> params;
  for (const auto& s : specs) params.push_back(g.parameter(s.name, s.shape, s.axes));
  const std::vector<std::string> batch_axes = {"activation_embed_and_logits_batch", "activation_length"};
  auto batch_shape = frontend::s32({batch, seq_len});
  models::Batch b;
  b.inputs = g.parameter("batch.inputs", batch_shape, batch_axes);
  b.targets = g.parameter("batch.targets", batch_shape, batch_axes);
  b.positions = g.parameter("batch.positions", batch_shape, batch_axes);
  b.segmentation = g.parameter("batch.segmentation", batch_shape, batch_axes);
  models::LossOutputs losses = model.loss(g, params, b);
  if (!losses.xent_sum.valid() || !losses.total_weights.valid()) {
    return invalid_argument("the model's loss gives no xent_sum/total_weights to evaluate");
  }
  // Only the cross-entropy sums are outputs: the auxiliary terms (load balance, z-loss)
  // are training regularisers, and everything feeding only them is dead code.
  g.set_outputs({losses.xent_sum.astype(DType::kF32), losses.total_weights.astype(DType::kF32)});
  program.module = g.release();
  return program;
}

Result<std::unique_ptr<EvalRunner>> EvalRunner::create(EvalProgram program, bool compiled,
                                                       const backend::CompileOptions& options) {
  std::unique_ptr<EvalRunner> r(new EvalRunner());
  r->program_ = std::move(program);
  if (compiled) {
    Result<std::unique_ptr<backend::Executable>> exe = backend::compile_cpu(*r->program_.module, options);
    if (exe.ok()) {
      r->exe_ = std::move(*exe);
      r->compile_s_ = r->exe_->report().compile_seconds;
    } else {
      r->fallback_reason_ = exe.status().message();
    }
  }
  if (r->exe_) {
    r->buffer_args_.resize(static_cast<size_t>(r->program_.num_args()));
  } else {
    r->literal_args_.resize(static_cast<size_t>(r->program_.num_args()));
  }
  return r;
}

void EvalRunner::set_param(int64_t i, const ir::Literal& value) {
  KILN_CHECK(i >= 0 && i < program_.num_params);
  if (exe_) {
    buffer_args_[static_cast<size_t>(i)] = backend::Buffer::from_literal(value);
  } else {
    literal_args_[static_cast<size_t>(i)] = value;
  }
}

Result<EvalSums> EvalRunner::run(const std::vector<ir::Literal>& batch) {
  KILN_CHECK(batch.size() == 4);
  EvalSums sums;
  if (exe_) {
    for (int f = 0; f < 4; ++f) buffer_args_[program_.batch_arg(f)] = backend::Buffer::from_literal(batch[f]);
    KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> out, exe_->run(buffer_args_));
    KILN_CHECK(out.size() == 2);
    sums.xent_sum = out[0].get(0);
    sums.total_weights = out[1].get(0);
  } else {
    for (int f = 0; f < 4; ++f) literal_args_[program_.batch_arg(f)] = batch[f];
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Literal> out, interp::run(*program_.module, literal_args_));
    KILN_CHECK(out.size() == 2);
    sums.xent_sum = out[0].scalar_value();
    sums.total_weights = out[1].scalar_value();
  }
  return sums;
}

}  // namespace kiln::train
