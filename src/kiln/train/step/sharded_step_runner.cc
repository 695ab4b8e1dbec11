#include "kiln/train/step/sharded_step_runner.h"

#include <algorithm>

#include <fmt/format.h>

#include "kiln/base/check.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/mpi_world.h"
#include "kiln/runtime/run_on_devices.h"

namespace kiln::train {
namespace {

class ShardedRunner : public StepRunner {
 public:
  ShardedRunner(const StepProgram& global, spmd::PartitionResult partition, const config::Mesh& mesh,
                std::shared_ptr<runtime::World> world)
      : global_(global), partition_(std::move(partition)), mesh_(mesh), world_(std::move(world)) {
    local_.module = std::move(partition_.module);
    local_.num_params = global.num_params;
    local_.decay = global.decay;
    local_.weight_copy_of = global.weight_copy_of;
    local_.has_expert_load = global.has_expert_load;
    for (int64_t d = 0; d < world_->local_devices(); ++d) {
      contexts_.push_back(ops::DeviceContext{mesh_, world_->first_device() + d, &world_->device(d)});
    }
    for (int64_t g = 0; g < mesh_.num_devices(); ++g) all_devices_.push_back(g);
    threads_ = std::make_unique<runtime::DeviceThreads>(world_->local_devices());
  }

  Status init_runners(const ShardedRunnerOptions& options, backend::CompileReport* report) {
    if (options.backend != &backend::interpreter_backend()) {
      backend::CompileOptions compile = options.compile;
      compile.mesh = mesh_;  // one program for every device's replica (backend=pjrt)
      KILN_ASSIGN_OR_RETURN(runners_, make_compiled_runners(local_, *options.backend, compile, world_->first_device(),
                                                            world_->local_devices(), report));
    } else {
      for (int64_t d = 0; d < world_->local_devices(); ++d) runners_.push_back(make_interpreter_runner(local_));
    }
    std::string ranks = world_->num_ranks() > 1 ? fmt::format(", {} MPI ranks × {} local devices",
                                                              world_->num_ranks(), world_->local_devices())
                                                : std::string();
    name_ = fmt::format("{} on {} devices ({}{})", runners_[0]->name(), mesh_.num_devices(), mesh_.to_string(), ranks);
    return ok_status();
  }

  // Every rank passes the same global value; only the local devices' shards are kept.
  void set_arg(int64_t index, const ir::Literal& value) override {
    const ir::Sharding& s = partition_.param_shardings.at(index);
    for (int64_t d = 0; d < world_->local_devices(); ++d) {
      runners_[d]->set_arg(index, spmd::shard_literal(value, s, mesh_, world_->first_device() + d));
    }
  }

  Status run() override {
    // The exposed collective time of this step: each local device's growth of wait_seconds()
    // (waits in arg()'s gathers between steps are not part of it).
    std::vector<double> waited(runners_.size(), 0.0);
    KILN_RETURN_IF_ERROR(threads_->run(*world_, [&](int64_t d) {
      ops::ScopedDeviceContext scope(&contexts_[d]);
      const double before = world_->device(d).wait_seconds();
      Status st = runners_[d]->run();
      waited[d] = world_->device(d).wait_seconds() - before;
      return st;
    }));
    collective_wait_s_ = *std::max_element(waited.begin(), waited.end());
    expert_load_ = runners_[0]->expert_load();
    return ok_status();
  }

  double metric(StepMetric m) const override { return runners_[0]->metric(m); }
  void set_observer(backend::InstructionObserver* observer) override {
    for (auto& r : runners_) r->set_observer(observer);  // events carry their thread's device
  }
  double collective_wait_s() const override { return collective_wait_s_; }

  ir::Literal arg(int64_t index) const override {
    const ir::Instr* param = global_.module->entry()->param(static_cast<int>(index));
    const ir::Sharding& sharding = partition_.param_shardings.at(index);
    std::vector<ir::Literal> shards;
    if (world_->num_ranks() == 1) {
      for (const auto& r : runners_) shards.push_back(r->arg(index));
    } else {
      shards = gather_shards(index);
    }
    std::vector<const ir::Literal*> ptrs;
    for (const auto& s : shards) ptrs.push_back(&s);
    return spmd::assemble_literal(ptrs, param->shape(), sharding, mesh_);
  }

  const char* name() const override { return name_.c_str(); }
  const spmd::PartitionResult& partition() const { return partition_; }

  // Checkpoints: each local device's shard as it holds it (the partitioner's layout of the
  // argument over the configured mesh: the same device numbering as checkpoint/shard_layout.h).
  Layout layout() const override {
    return Layout{mesh_, world_->first_device(), world_->local_devices(), world_->rank(), world_->num_ranks()};
  }
  ir::Sharding arg_sharding(int64_t index) const override { return partition_.param_shardings.at(index); }
  std::string arg_bytes(int64_t index, int64_t local) const override { return runners_.at(local)->arg_bytes(index, 0); }
  Status set_arg_bytes(int64_t index, const std::string& bytes, int64_t local) override {
    return runners_.at(local)->set_arg_bytes(index, bytes, 0);
  }
  int64_t runtime_scratch_bytes() const override {
    if (world_->num_ranks() == 1) return 0;
    int64_t largest = 0;
    for (const auto& instr : local_.module->entry()->instructions()) {
      if (instr->opcode() == ir::Opcode::kAllReduce || instr->opcode() == ir::Opcode::kReduceScatter) {
        largest = std::max(largest, instr->operand(0)->shape().byte_size());
      }
    }
    return largest * runtime::kReductionScratchKept;
  }
  Status set_local_arg(int64_t index, const ir::Literal& value, int64_t local) override {
    const ir::Shape& want = local_.module->entry()->param(static_cast<int>(index))->shape();
    if (!(value.shape() == want)) {
      return internal_error("local device {} takes argument {} as {}, got {}", local, index, want.to_string(),
                            value.shape().to_string());
    }
    runners_.at(local)->set_arg(index, value);
    return ok_status();
  }
  Status set_arg_buffer(int64_t index, backend::Buffer value, int64_t local) override {
    return runners_.at(local)->set_arg_buffer(index, std::move(value), 0);
  }
  Status set_arg_value(int64_t index, std::unique_ptr<backend::DeviceValue> value, int64_t local) override {
    return runners_.at(local)->set_arg_value(index, std::move(value), 0);
  }
  backend::Buffer local_arg_buffer(int64_t index, int64_t local) const override {
    return runners_.at(local)->local_arg_buffer(index, 0);
  }
  const backend::DeviceValue* local_arg_value(int64_t index, int64_t local) const override {
    return runners_.at(local)->local_arg_value(index, 0);
  }
  Status run_on_local_devices(const std::function<Status(int64_t local)>& fn) override {
    return threads_->run(*world_, [&](int64_t d) {
      ops::ScopedDeviceContext scope(&contexts_[d]);
      return fn(d);
    });
  }
  int64_t broadcast_from_rank0(int64_t value) const override {
    if (world_->num_ranks() == 1) return value;
    const int64_t n = world_->local_devices(), total = mesh_.num_devices();
    std::vector<std::vector<int64_t>> gathered(n, std::vector<int64_t>(total));
    Status st = threads_->run(*world_, [&](int64_t d) -> Status {
      return world_->device(d).all_gather(all_devices_, &value, sizeof(value), gathered[d].data())->wait();
    });
    // As in gather_shards: StepRunner's interface cannot return it, and a rank that is
    // out of step is fatal anyway.
    KILN_CHECK(st.ok()) << "broadcasting from rank 0 over the mesh: " << st.to_string();
    return gathered[0][0];
  }
  int64_t max_over_ranks(int64_t value) const override {
    if (world_->num_ranks() == 1) return value;
    const int64_t n = world_->local_devices(), total = mesh_.num_devices();
    std::vector<std::vector<int64_t>> gathered(n, std::vector<int64_t>(total));
    Status st = threads_->run(*world_, [&](int64_t d) -> Status {
      return world_->device(d).all_gather(all_devices_, &value, sizeof(value), gathered[d].data())->wait();
    });
    KILN_CHECK(st.ok()) << "agreeing over the mesh: " << st.to_string();
    return *std::max_element(gathered[0].begin(), gathered[0].end());
  }

 private:
  // Every device's shard of argument `index`, in global device order, on every rank: each
  // local device all-gathers its shard's values over the whole mesh (all shards of a tensor
  // have the same size), and local device 0's result is unpacked. Collective: every rank
  // must call arg(index) at the same point. A failure here (a dead rank, the timeout) cannot
  // be returned through StepRunner::arg, so it ends the process with the error.
  std::vector<ir::Literal> gather_shards(int64_t index) const {
    const int64_t n = world_->local_devices(), total = mesh_.num_devices();
    std::vector<ir::Literal> mine;
    for (const auto& r : runners_) mine.push_back(r->arg(index));
    const size_t count = mine[0].values().size();
    std::vector<std::vector<double>> gathered(n, std::vector<double>(count * total));
    Status st = threads_->run(*world_, [&](int64_t d) -> Status {
      KILN_CHECK(mine[d].values().size() == count) << "shards of argument " << index << " differ in size";
      return world_->device(d).all_gather(all_devices_, mine[d].values().data(), count * sizeof(double),
                                          gathered[d].data())->wait();
    });
    KILN_CHECK(st.ok()) << "gathering argument " << index << " over the mesh: " << st.to_string();
    std::vector<ir::Literal> shards;
    for (int64_t g = 0; g < total; ++g) {
      ir::Literal shard(mine[0].shape());
      std::copy_n(gathered[0].begin() + static_cast<std::ptrdiff_t>(g * count), count,
                  shard.mutable_values().begin());
      shards.push_back(std::move(shard));
    }
    return shards;
  }

  const StepProgram& global_;
  spmd::PartitionResult partition_;
  config::Mesh mesh_;
  std::shared_ptr<runtime::World> world_;
  runtime::Group all_devices_;  // 0 .. mesh devices - 1
  StepProgram local_;
  std::vector<ops::DeviceContext> contexts_;
  std::vector<std::unique_ptr<StepRunner>> runners_;
  std::string name_;
  double collective_wait_s_ = 0;
  // Last: joined first, before the runners and the world its threads' in-flight collectives
  // refer to are destroyed.
  std::unique_ptr<runtime::DeviceThreads> threads_;
};

}  // namespace

Result<spmd::PartitionOptions> step_partition_options(const config::Config& config, const StepProgram& program,
                                                      const std::vector<models::ParamSpec>& params) {
  spmd::PartitionOptions o;
  o.mesh = config.derived().mesh;
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
  for (int64_t k = 0; k < program.num_copies(); ++k) {  // a bf16 weight copy is sharded like its parameter
    const int64_t arg = program.copy_arg(k);
    o.seeds.params[arg] = o.seeds.outputs[arg] = o.seeds.params[program.param_arg(program.weight_copy_of[k])];
  }
  o.seeds.params[program.step_arg()] = ir::Sharding{};
  o.seeds.outputs[program.step_arg()] = ir::Sharding{};
  if (program.has_spike_limits) o.seeds.params[program.spike_limits_arg()] = ir::Sharding{};
  for (int field = 0; field < 4; ++field) {
    const ir::Shape& shape = entry.param(static_cast<int>(program.batch_arg(field)))->shape();
    std::vector<std::string> notes;
    // [rows, seq] or, accumulating gradients, [micro-batches, rows, seq]: micro-batches whole.
    std::vector<std::string> logical = {"activation_batch", "activation_length"};
    if (shape.rank() == 3) logical.insert(logical.begin(), "");
    ir::Sharding s = o.rules.resolve(logical, shape.dims(), o.mesh, &notes);
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
                                                        std::shared_ptr<runtime::World> world,
                                                        const ShardedRunnerOptions& options,
                                                        backend::CompileReport* report) {
  const config::Mesh& mesh = config.derived().mesh;
  if (world->num_devices() != mesh.num_devices()) {
    return invalid_argument("the mesh {} has {} devices but the runtime has {} ({} rank(s) × {} local devices); set "
                            "local_devices so that ranks × local_devices = the mesh's devices",
                            mesh.to_string(), mesh.num_devices(), world->num_devices(), world->num_ranks(),
                            world->local_devices());
  }
  KILN_ASSIGN_OR_RETURN(spmd::PartitionResult partition, partition_step(config, program, params));
  auto runner = std::make_unique<ShardedRunner>(program, std::move(partition), mesh, std::move(world));
  KILN_RETURN_IF_ERROR(runner->init_runners(options, report));
  return std::unique_ptr<StepRunner>(std::move(runner));
}

}  // namespace kiln::train
