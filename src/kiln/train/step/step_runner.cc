#include "kiln/train/step/step_runner.h"

#include <cstring>

#include "kiln/base/check.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/interp/instruction_hook.h"
#include "kiln/interp/interpreter.h"

namespace kiln::train {

std::string StepRunner::arg_bytes(int64_t index, int64_t local) const {
  KILN_CHECK(local == 0) << name() << " has one device";
  return checkpoint::literal_bytes(arg(index));
}

Status StepRunner::set_arg_bytes(int64_t index, const std::string& bytes, int64_t local) {
  KILN_CHECK(local == 0) << name() << " has one device";
  KILN_ASSIGN_OR_RETURN(ir::Literal value, checkpoint::literal_from_bytes(arg(index).shape(), bytes));
  set_arg(index, value);
  return ok_status();
}

Status StepRunner::set_arg_buffer(int64_t index, backend::Buffer value, int64_t local) {
  return set_arg_bytes(index, std::string(static_cast<const char*>(value.data()), static_cast<size_t>(value.byte_size())),
                       local);
}

Status StepRunner::set_arg_value(int64_t index, std::unique_ptr<backend::DeviceValue> value, int64_t local) {
  KILN_ASSIGN_OR_RETURN(backend::Buffer host, value->to_host());
  return set_arg_buffer(index, std::move(host), local);
}

backend::Buffer StepRunner::local_arg_buffer(int64_t index, int64_t local) const {
  KILN_CHECK(local == 0) << name() << " has one device";
  return backend::Buffer::from_literal(arg(index));
}

namespace {

const ir::Shape& arg_shape(const StepProgram& program, int64_t index) {
  return program.module->entry()->param(static_cast<int>(index))->shape();
}

class InterpreterRunner : public StepRunner {
 public:
  explicit InterpreterRunner(const StepProgram& program)
      : program_(program), args_(static_cast<size_t>(program.num_args())) {}
  void set_arg(int64_t index, const ir::Literal& value) override { args_[index] = value; }
  Status run() override {
    interp::InstructionHook hook;
    if (observer_ != nullptr) {
      hook = [o = observer_](const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) {
        o->on_instruction(instr, begin_ns, end_ns);
      };
    }
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Literal> outputs, interp::run_with_hook(*program_.module, args_, hook));
    KILN_CHECK(static_cast<int64_t>(outputs.size()) == program_.num_outputs());
    for (int64_t i = 0; i < program_.num_state(); ++i) args_[i] = std::move(outputs[i]);
    metrics_.clear();
    for (int m = 0; m < static_cast<int>(StepMetric::kCount); ++m) {
      metrics_.push_back(outputs[program_.metric_output(static_cast<StepMetric>(m))].scalar_value());
    }
    if (program_.has_expert_load) expert_load_ = outputs[program_.expert_load_output()].values();
    return ok_status();
  }
  double metric(StepMetric m) const override { return metrics_.at(static_cast<size_t>(m)); }
  ir::Literal arg(int64_t index) const override { return args_[index]; }
  // The interpreter's values are doubles rounded to the dtype: converting them is exact.
  std::string arg_bytes(int64_t index, int64_t local) const override {
    KILN_CHECK(local == 0);
    return checkpoint::literal_bytes(args_[index]);
  }
  Status set_arg_bytes(int64_t index, const std::string& bytes, int64_t local) override {
    KILN_CHECK(local == 0);
    KILN_ASSIGN_OR_RETURN(args_[index], checkpoint::literal_from_bytes(arg_shape(program_, index), bytes));
    return ok_status();
  }
  const char* name() const override { return "reference interpreter"; }
  // Per-instruction spans from the interpreter's hook: the same events as the compiled
  // executable's, over the unoptimized program (no fusions; every op is its own span).
  void set_observer(backend::InstructionObserver* observer) override { observer_ = observer; }

 private:
  const StepProgram& program_;
  std::vector<ir::Literal> args_;
  std::vector<double> metrics_;
  backend::InstructionObserver* observer_ = nullptr;
};

// The state lives where the executable runs (backend::DeviceValue: device memory on PJRT, the
// host Buffer itself on the CPU backend), from one step to the next; host copies are made for
// the metrics (scalars), checkpoints, the eval program's reads on a host backend, and tests.
class CompiledRunner : public StepRunner {
 public:
  CompiledRunner(const StepProgram& program, std::unique_ptr<backend::Executable> exe, std::string name)
      : program_(program), exe_(std::move(exe)), args_(static_cast<size_t>(program.num_args())), name_(std::move(name)) {}
  void set_arg(int64_t index, const ir::Literal& value) override {
    KILN_CHECK_OK(place(index, backend::Buffer::from_literal(value)));
  }
  Status run() override {
    std::vector<backend::DeviceValue*> args;
    for (int64_t i = 0; i < program_.num_args(); ++i) {
      if (args_[i] == nullptr) return internal_error("{}: argument {} was never set", name_, i);
      args.push_back(args_[i].get());
    }
    KILN_ASSIGN_OR_RETURN(backend::DeviceValues outputs, exe_->run_on_device(args));
    KILN_CHECK(static_cast<int64_t>(outputs.size()) == program_.num_outputs());
    // The new state replaces the old where it is (the old was donated to the step).
    for (int64_t i = 0; i < program_.num_state(); ++i) args_[i] = std::move(outputs[i]);
    metrics_.clear();
    for (int m = 0; m < static_cast<int>(StepMetric::kCount); ++m) {
      KILN_ASSIGN_OR_RETURN(backend::Buffer v, outputs[program_.metric_output(static_cast<StepMetric>(m))]->to_host());
      metrics_.push_back(v.get(0));
    }
    if (program_.has_expert_load) {
      KILN_ASSIGN_OR_RETURN(backend::Buffer load, outputs[program_.expert_load_output()]->to_host());
      expert_load_ = load.to_literal().values();
    }
    return ok_status();
  }
  double metric(StepMetric m) const override { return metrics_.at(static_cast<size_t>(m)); }
  ir::Literal arg(int64_t index) const override { return host_arg(index).to_literal(); }
  // The buffer's own bytes (a NaN keeps its payload, nothing goes through float64).
  std::string arg_bytes(int64_t index, int64_t local) const override {
    KILN_CHECK(local == 0);
    const backend::Buffer b = host_arg(index);
    return std::string(static_cast<const char*>(b.data()), static_cast<size_t>(b.byte_size()));
  }
  Status set_arg_bytes(int64_t index, const std::string& bytes, int64_t local) override {
    KILN_CHECK(local == 0);
    const ir::Shape& shape = arg_shape(program_, index);
    if (static_cast<int64_t>(bytes.size()) != shape.byte_size()) {
      return invalid_argument("argument {} is {} ({} bytes), got {} bytes", index, shape.to_string(), shape.byte_size(),
                              bytes.size());
    }
    backend::Buffer b(shape);
    std::memcpy(b.data(), bytes.data(), bytes.size());
    return place(index, std::move(b));
  }
  Status set_arg_buffer(int64_t index, backend::Buffer value, int64_t local) override {
    KILN_CHECK(local == 0);
    const ir::Shape& shape = arg_shape(program_, index);
    if (!(value.shape() == shape)) {
      return invalid_argument("argument {} is {}, got a buffer of {}", index, shape.to_string(),
                              value.shape().to_string());
    }
    return place(index, std::move(value));
  }
  Status set_arg_value(int64_t index, std::unique_ptr<backend::DeviceValue> value, int64_t local) override {
    KILN_CHECK(local == 0);
    const ir::Shape& shape = arg_shape(program_, index);
    if (!(value->shape() == shape)) {
      return invalid_argument("argument {} is {}, got a value of {}", index, shape.to_string(),
                              value->shape().to_string());
    }
    args_[index] = std::move(value);
    return ok_status();
  }
  backend::Buffer local_arg_buffer(int64_t index, int64_t local) const override {
    KILN_CHECK(local == 0);
    return host_arg(index);
  }
  const backend::DeviceValue* local_arg_value(int64_t index, int64_t local) const override {
    KILN_CHECK(local == 0);
    return args_[index].get();
  }
  const char* name() const override { return name_.c_str(); }
  void set_observer(backend::InstructionObserver* observer) override { exe_->set_observer(observer); }

 private:
  Status place(int64_t index, backend::Buffer value) {
    KILN_ASSIGN_OR_RETURN(args_[index], exe_->to_device(std::move(value)));
    return ok_status();
  }
  // A host backend's value itself (sharing storage), else a copy from the device.
  backend::Buffer host_arg(int64_t index) const {
    const backend::DeviceValue* v = args_.at(index).get();
    KILN_CHECK(v != nullptr) << name_ << ": argument " << index << " was never set";
    if (v->host() != nullptr) return *v->host();
    Result<backend::Buffer> copy = v->to_host();
    KILN_CHECK_OK(copy);
    return std::move(*copy);
  }

  const StepProgram& program_;
  std::unique_ptr<backend::Executable> exe_;
  backend::DeviceValues args_;
  std::vector<double> metrics_;
  std::string name_;  // the backend's description
};

}  // namespace

std::unique_ptr<StepRunner> make_interpreter_runner(const StepProgram& program) {
  return std::make_unique<InterpreterRunner>(program);
}

Result<std::vector<std::unique_ptr<StepRunner>>> make_compiled_runners(const StepProgram& program,
                                                                       const backend::Backend& backend,
                                                                       const backend::CompileOptions& options,
                                                                       int64_t first_device, int64_t local_devices,
                                                                       backend::CompileReport* report,
                                                                       std::string* fallback_reason) {
  // The runner replaces its state with the outputs after every step, so it donates the
  // state: parameters and moments are updated in their own storage.
  backend::CompileOptions donating = options;
  for (int64_t i = 0; i < program.num_state(); ++i) donating.donated.push_back({i, i});
  std::string fell_back;
  KILN_ASSIGN_OR_RETURN(std::vector<std::unique_ptr<backend::Executable>> exes,
                        backend::compile_for_devices(backend, *program.module, donating, first_device, local_devices,
                                                     fallback_reason != nullptr ? &fell_back : nullptr));
  if (report != nullptr) *report = exes[0]->report();
  if (fallback_reason != nullptr) *fallback_reason = fell_back;
  const std::string name = fell_back.empty() ? backend.description() : backend::interpreter_backend().description();
  std::vector<std::unique_ptr<StepRunner>> runners;
  for (auto& exe : exes) runners.push_back(std::make_unique<CompiledRunner>(program, std::move(exe), name));
  return runners;
}

Result<std::unique_ptr<StepRunner>> make_compiled_runner(const StepProgram& program, const backend::Backend& backend,
                                                         const backend::CompileOptions& options,
                                                         backend::CompileReport* report,
                                                         std::string* fallback_reason) {
  KILN_ASSIGN_OR_RETURN(auto runners, make_compiled_runners(program, backend, options, 0, 1, report, fallback_reason));
  return std::move(runners[0]);
}

}  // namespace kiln::train
