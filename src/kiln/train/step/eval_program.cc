#include "kiln/train/step/eval_program.h"

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"
#include "kiln/interp/interpreter.h"
#include "kiln/spmd/logical_rules.h"
#include "kiln/spmd/partitioner.h"

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

Result<std::unique_ptr<EvalRunner>> EvalRunner::create(EvalProgram program, const StepRunner& runner,
                                                       const StepProgram& step, const config::Config& config,
                                                       const backend::Backend& backend,
                                                       const backend::CompileOptions& options) {
  const bool compiled = &backend != &backend::interpreter_backend();
  std::unique_ptr<EvalRunner> r(new EvalRunner());
  r->program_ = std::move(program);
  r->step_ = &step;
  const StepRunner::Layout layout = runner.layout();
  r->first_device_ = layout.first_device;
  if (layout.mesh.axes().empty()) {
    r->local_ = r->program_.module->clone();
  } else {
    // Partitioned like the step: the parameters in the step's shardings, the batch's rows
    // over the batch axes, the two sums replicated (the partitioner all-reduces them).
    spmd::PartitionOptions o;
    o.mesh = layout.mesh;
    KILN_ASSIGN_OR_RETURN(o.rules, spmd::LogicalRules::from_config(config));
    const ir::Computation& entry = *r->program_.module->entry();
    o.seeds.params.resize(r->program_.num_args());
    for (int64_t i = 0; i < r->program_.num_params; ++i) o.seeds.params[i] = runner.arg_sharding(step.param_arg(i));
    for (int field = 0; field < 4; ++field) {
      const ir::Shape& shape = entry.param(static_cast<int>(r->program_.batch_arg(field)))->shape();
      std::vector<std::string> notes;
      ir::Sharding s = o.rules.resolve({"activation_batch", "activation_length"}, shape.dims(), o.mesh, &notes);
      if (!notes.empty()) {
        return invalid_argument("the eval batch {}: {} (per_device_batch_size × devices must divide over the batch axes)",
                                shape.to_string(), notes.front());
      }
      o.seeds.params[r->program_.batch_arg(field)] = s;
      r->batch_shardings_.push_back(s);
    }
    o.seeds.outputs.assign(2, ir::Sharding{});
    KILN_ASSIGN_OR_RETURN(spmd::PartitionResult partition, spmd::partition(*r->program_.module, o));
    r->local_ = std::move(partition.module);
    r->mesh_ = o.mesh;
  }
  if (compiled) {
    backend::CompileOptions per_device = options;
    per_device.mesh = r->mesh_;  // one program for every device's replica (backend=pjrt)
    KILN_ASSIGN_OR_RETURN(r->executables_, backend::compile_for_devices(backend, *r->local_, per_device,
                                                                        layout.first_device, layout.local_devices,
                                                                        &r->fallback_reason_));
    r->compile_s_ = r->executables_[0]->report().compile_seconds;
    r->name_ = r->fallback_reason_.empty() ? backend.description() : backend::interpreter_backend().description();
  }
  return r;
}

Result<EvalSums> EvalRunner::run(StepRunner& runner, const std::vector<ir::Literal>& batch) {
  KILN_CHECK(batch.size() == 4);
  std::vector<EvalSums> sums(static_cast<size_t>(runner.layout().local_devices));
  KILN_RETURN_IF_ERROR(runner.run_on_local_devices([&](int64_t d) -> Status {
    // This device's rows of the batch (the whole batch on one device).
    std::vector<ir::Literal> rows;
    for (int f = 0; f < 4; ++f) {
      rows.push_back(batch_shardings_.empty() ? batch[f]
                                              : spmd::shard_literal(batch[f], batch_shardings_[f], mesh_, first_device_ + d));
    }
    if (!executables_.empty()) {
      // The parameters where the step keeps them (device memory on PJRT: no host copy); the
      // batch's rows placed next to them.
      backend::Executable& exe = *executables_[d];
      backend::DeviceValues placed;
      std::vector<backend::DeviceValue*> args;
      for (int64_t i = 0; i < program_.num_params; ++i) {
        const backend::DeviceValue* value = runner.local_arg_value(step_->param_arg(i), d);
        if (value == nullptr) {
          KILN_ASSIGN_OR_RETURN(placed.emplace_back(), exe.to_device(runner.local_arg_buffer(step_->param_arg(i), d)));
          value = placed.back().get();
        }
        // Not donated (the eval program donates nothing): the step's state is only read.
        args.push_back(const_cast<backend::DeviceValue*>(value));
      }
      for (const ir::Literal& v : rows) {
        KILN_ASSIGN_OR_RETURN(placed.emplace_back(), exe.to_device(backend::Buffer::from_literal(v)));
        args.push_back(placed.back().get());
      }
      KILN_ASSIGN_OR_RETURN(backend::DeviceValues out, exe.run_on_device(args));
      KILN_CHECK(out.size() == 2);
      KILN_ASSIGN_OR_RETURN(backend::Buffer xent, out[0]->to_host());
      KILN_ASSIGN_OR_RETURN(backend::Buffer weights, out[1]->to_host());
      sums[d] = EvalSums{xent.get(0), weights.get(0)};
      return ok_status();
    }
    std::vector<ir::Literal> args;
    for (int64_t i = 0; i < program_.num_params; ++i) {
      args.push_back(runner.local_arg_buffer(step_->param_arg(i), d).to_literal());
    }
    for (ir::Literal& v : rows) args.push_back(std::move(v));
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Literal> out, interp::run(*local_, args));
    KILN_CHECK(out.size() == 2);
    sums[d] = EvalSums{out[0].scalar_value(), out[1].scalar_value()};
    return ok_status();
  }));
  return sums[0];  // replicated: every device holds the mesh's sums
}

}  // namespace kiln::train
