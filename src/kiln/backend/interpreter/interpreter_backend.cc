// The reference interpreter as a backend: the same compile pipeline as every backend (with
// a policy that leaves out loop fusion and async collectives, which it has no kernels for),
// then each instruction of the optimized entry by its registry evaluation (interp/). It
// plans no memory and generates no code: what is left is the Backend interface alone, which
// is the point (a CUDA backend fills in the same two calls).
#include <chrono>
#include <fstream>
#include <utility>

#include "kiln/backend/backend.h"
#include "kiln/interp/interpreter.h"
#include "kiln/interp/instruction_hook.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"
#include "kiln/passes/compile_pipeline.h"

namespace kiln::backend {

namespace {

class InterpreterExecutable : public Executable {
 public:
  Status build(const ir::Module& source, const CompileOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    passes::BackendPolicy policy;
    policy.loop_fusion = false;
    policy.multi_output_fusion = false;
    policy.async_collectives = false;
    KILN_ASSIGN_OR_RETURN(module_, run_compile_pipeline(source, options, policy, report_));
    const ir::Computation& entry = *module_->entry();
    report_.instructions_after = entry.size();
    for (const auto& instr : entry.instructions()) {
      if (instr->opcode() == ir::Opcode::kParameter) report_.argument_bytes += instr->shape().byte_size();
      if (ops::op_def(instr->opcode()).plumbing) continue;
      ++report_.fallback_kernels;  // every instruction is a reference evaluation here
      ++report_.fallback_by_op[std::string(ir::opcode_name(instr->opcode()))];
    }
    report_.output_bytes = entry.root()->shape().byte_size();
    report_.schedule = "program_order";
    if (!options.dump_dir.empty()) std::ofstream(options.dump_dir + "/optimized.ir") << ir::print_module(*module_);
    report_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return ok_status();
  }

  Result<std::vector<Buffer>> run(std::span<const Buffer> args) override {
    const ir::Computation& entry = *module_->entry();
    if (static_cast<int>(args.size()) != entry.num_params()) {
      return invalid_argument("the program takes {} arguments, got {}", entry.num_params(), args.size());
    }
    std::vector<ir::Literal> literals;
    literals.reserve(args.size());
    for (const Buffer& a : args) literals.push_back(a.to_literal());
    interp::InstructionHook hook;
    if (observer_ != nullptr) {
      hook = [o = observer_](const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) {
        o->on_instruction(instr, begin_ns, end_ns);
      };
    }
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Literal> outputs, interp::run_with_hook(*module_, literals, hook));
    std::vector<Buffer> buffers;
    buffers.reserve(outputs.size());
    for (const ir::Literal& v : outputs) buffers.push_back(Buffer::from_literal(v));
    return buffers;
  }

  const CompileReport& report() const override { return report_; }

  std::vector<const ir::Instr*> schedule() const override {
    std::vector<const ir::Instr*> order;
    for (const auto& instr : module_->entry()->instructions()) order.push_back(instr.get());
    return order;
  }

 private:
  std::unique_ptr<ir::Module> module_;
  CompileReport report_;
};

class InterpreterBackend : public Backend {
 public:
  std::string_view name() const override { return "interpreter"; }
  std::string description() const override { return "reference interpreter"; }
  Result<std::unique_ptr<Executable>> compile(const ir::Module& module, const CompileOptions& options) const override {
    auto exe = std::make_unique<InterpreterExecutable>();
    KILN_RETURN_IF_ERROR(exe->build(module, options));
    return std::unique_ptr<Executable>(std::move(exe));
  }
};

}  // namespace

const Backend& interpreter_backend() {
  static const InterpreterBackend backend;
  return backend;
}

}  // namespace kiln::backend
