#include "kiln/train/sharded_step_runner.h"

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/run_on_devices.h"

namespace kiln::train {
namespace {

class ShardedRunner : public StepRunner {
 public:
  ShardedRunner(const StepProgram& global, spmd::PartitionResult partition, spmd::Mesh mesh,
                std::unique_ptr<runtime::World> world)
      : global_(global), partition_(std::move(partition)), mesh_(std::move(mesh)), world_(std::move(world)) {
    local_.module = std::move(partition_.module);
    local_.num_params = global.num_params;
    local_.decay = global.decay;
    local_.has_expert_load = global.has_expert_load;
    for (int64_t d = 0; d < world_->local_devices(); ++d) {
      contexts_.push_back(ops::DeviceContext{mesh_, world_->first_device() + d, &world_->device(d)});
    }
    name_ = fmt::format("{} on {} devices ({})", "?", mesh_.num_devices(), mesh_.to_string());
  }

  Status init_runners(const ShardedRunnerOptions& options, backend::CompileReport* report) {
    for (int64_t d = 0; d < world_->local_devices(); ++d) {
      if (options.compiled) {
        KILN_ASSIGN_OR_RETURN(std::unique_ptr<StepRunner> r,
                              make_compiled_runner(local_, options.compile, d == 0 ? report : nullptr));
        runners_.push_back(std::move(r));
      } else {
        runners_.push_back(make_interpreter_runner(local_));
      }
    }
    name_ = fmt::format("{} on {} devices ({})", runners_[0]->name(), mesh_.num_devices(), mesh_.to_string());
    return ok_status();
  }

  void set_arg(int64_t index, const ir::Literal& value) override {
    const ir::Sharding& s = partition_.param_shardings.at(index);
    for (int64_t d = 0; d < world_->local_devices(); ++d) {
      runners_[d]->set_arg(index, spmd::shard_literal(value, s, mesh_, world_->first_device() + d));
    }
  }

  Status run() override {
    KILN_RETURN_IF_ERROR(runtime::run_on_devices(*world_, [&](int64_t d) {
      ops::ScopedDeviceContext scope(&contexts_[d]);
      return runners_[d]->run();
    }));
    expert_load_ = runners_[0]->expert_load();
    return ok_status();
  }

  double metric(StepMetric m) const override { return runners_[0]->metric(m); }

  ir::Literal arg(int64_t index) const override {
    std::vector<ir::Literal> shards;
    for (const auto& r : runners_) shards.push_back(r->arg(index));
    std::vector<const ir::Literal*> ptrs;
    for (const auto& s : shards) ptrs.push_back(&s);
    const ir::Instr* param = global_.module->entry()->param(static_cast<int>(index));
    return spmd::assemble_literal(ptrs, param->shape(), partition_.param_shardings.at(index), mesh_);
  }

  const char* name() const override { return name_.c_str(); }
  const spmd::PartitionResult& partition() const { return partition_; }

 private:
  const StepProgram& global_;
  spmd::PartitionResult partition_;
  spmd::Mesh mesh_;
  std::unique_ptr<runtime::World> world_;
  StepProgram local_;
  std::vector<ops::DeviceContext> contexts_;
  std::vector<std::unique_ptr<StepRunner>> runners_;
  std::string name_;
};

}  // namespace

Result<spmd::PartitionOptions> step_partition_options(const config::Config& config, const StepProgram& program,
                                                      const std::vector<models::ParamSpec>& params) {
  spmd::PartitionOptions o;
  o.mesh = spmd::Mesh::from_config(config.derived().mesh);
  KILN_ASSIGN_OR_RETURN(o.rules, spmd::LogicalRules::from_config(config));
  const ir::Computation& entry = *program.module->entry();
  o.seeds.params.resize(program.num_args());
  o.seeds.outputs.resize(program.num_outputs());
  for (int64_t i = 0; i < program.num_params; ++i) {
    const ir::Shape& shape = entry.param(static_cast<int>(program.param_arg(i)))->shape();
    std::vector<std::string> notes;
    ir::Sharding s = o.rules.resolve(params[i].axes, shape.dims(), o.mesh, &notes);
    if (!notes.empty()) {
      return invalid_argument("parameter {} {}: {} (choose a mesh whose axes divide it, or change logical_axis_rules)",
                              params[i].name, shape.to_string(), notes.front());
    }
    for (int64_t arg : {program.param_arg(i), program.mu_arg(i), program.nu_arg(i)}) {
      o.seeds.params[arg] = s;
      o.seeds.outputs[arg] = s;  // state outputs mirror the state arguments
    }
  }
  o.seeds.params[program.step_arg()] = ir::Sharding{};
  o.seeds.outputs[program.step_arg()] = ir::Sharding{};
  for (int field = 0; field < 4; ++field) {
    const ir::Shape& shape = entry.param(static_cast<int>(program.batch_arg(field)))->shape();
    std::vector<std::string> notes;
    ir::Sharding s = o.rules.resolve({"activation_batch", "activation_length"}, shape.dims(), o.mesh, &notes);
    if (!notes.empty()) {
      return invalid_argument("the batch {}: {} (per_device_batch_size × devices must divide over the batch axes)",
                              shape.to_string(), notes.front());
    }
    o.seeds.params[program.batch_arg(field)] = s;
  }
  for (int64_t i = program.num_state(); i < program.num_outputs(); ++i) {
    const ir::Instr* out = entry.root()->operand(static_cast<int>(i));
    o.seeds.outputs[i] = ir::Sharding{std::vector<std::vector<std::string>>(out->shape().rank())};
  }
  return o;
}

Result<spmd::PartitionResult> partition_step(const config::Config& config, const StepProgram& program,
                                             const std::vector<models::ParamSpec>& params) {
  KILN_ASSIGN_OR_RETURN(spmd::PartitionOptions options, step_partition_options(config, program, params));
  return spmd::partition(*program.module, options);
}

Result<std::unique_ptr<StepRunner>> make_sharded_runner(const config::Config& config, const StepProgram& program,
                                                        const std::vector<models::ParamSpec>& params,
                                                        std::unique_ptr<runtime::World> world,
                                                        const ShardedRunnerOptions& options,
                                                        backend::CompileReport* report) {
  spmd::Mesh mesh = spmd::Mesh::from_config(config.derived().mesh);
  if (world->num_ranks() != 1 || world->local_devices() != mesh.num_devices()) {
    return invalid_argument("the sharded step runner needs all {} devices of the mesh in this process (got {} rank(s) "
                            "× {} local devices); multi-process training is not supported yet",
                            mesh.num_devices(), world->num_ranks(), world->local_devices());
  }
  KILN_ASSIGN_OR_RETURN(spmd::PartitionResult partition, partition_step(config, program, params));
  auto runner = std::make_unique<ShardedRunner>(program, std::move(partition), mesh, std::move(world));
  KILN_RETURN_IF_ERROR(runner->init_runners(options, report));
  return std::unique_ptr<StepRunner>(std::move(runner));
}

}  // namespace kiln::train
