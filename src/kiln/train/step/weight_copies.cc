#include "kiln/train/step/weight_copies.h"

#include <algorithm>
#include <cstring>

#include "kiln/base/check.h"
#include "kiln/ir/dtype.h"
#include "kiln/train/step/step_program.h"
#include "kiln/train/step/step_runner.h"

namespace kiln::train {

std::vector<WeightCopy> attach_weight_copies(frontend::Graph& g, const std::vector<frontend::Tensor>& params) {
  std::vector<WeightCopy> copies;
  ir::Computation& entry = g.computation();
  for (size_t i = 0; i < params.size(); ++i) {
    ir::Instr* p = params[i].instr();
    if (p->shape().dtype() != ir::DType::kF32) continue;
    std::vector<ir::Instr*> casts;
    for (ir::Instr* user : p->users()) {
      if (user->opcode() == ir::Opcode::kConvert && user->shape().dtype() == ir::DType::kBF16 &&
          std::find(casts.begin(), casts.end(), user) == casts.end()) {
        casts.push_back(user);
      }
    }
    if (casts.empty()) continue;
    // Named after its parameter (traced at the top scope, so its name is the spec's).
    frontend::Tensor copy =
        g.parameter("bf16_copy." + p->meta().name, p->shape().with_dtype(ir::DType::kBF16), p->meta().axes);
    for (ir::Instr* cast : casts) {
      KILN_CHECK(entry.root() != cast) << "a weight cast is the step's root: " << cast->to_string();
      cast->replace_all_uses_with(copy.instr());
    }
    entry.remove(casts);
    copies.push_back({static_cast<int64_t>(i), copy});
  }
  // The copies were appended after their readers: put them first again.
  if (!copies.empty()) entry.topo_sort();
  return copies;
}

std::unique_ptr<ir::Module> move_params(std::unique_ptr<ir::Module> module, int64_t first, int64_t moved_begin) {
  ir::Computation& entry = *module->entry();
  const int64_t n = entry.num_params();
  KILN_CHECK(0 <= first && first <= moved_begin && moved_begin <= n) << first << " " << moved_begin << " " << n;
  const int64_t moved = n - moved_begin;
  std::vector<ir::Instr*> old(entry.params().begin(), entry.params().end());
  for (int64_t i = first; i < n; ++i) {
    const int64_t to = i >= moved_begin ? first + (i - moved_begin) : i + moved;
    old[i]->mutable_attrs().set("index", to);
  }
  // The parameter table is filled as instructions are added: a clone builds it anew.
  return module->clone();
}

Status refresh_weight_copies(StepRunner& runner, const StepProgram& program) {
  const int64_t local_devices = runner.layout().local_devices;
  for (int64_t k = 0; k < program.num_copies(); ++k) {
    const int64_t param = program.param_arg(program.weight_copy_of[k]), copy = program.copy_arg(k);
    if (!(runner.arg_sharding(param) == runner.arg_sharding(copy))) {
      return internal_error("the bf16 copy of parameter {} is sharded {} but the parameter {}", param,
                            runner.arg_sharding(copy).to_string(), runner.arg_sharding(param).to_string());
    }
    for (int64_t local = 0; local < local_devices; ++local) {
      const std::string wide = runner.arg_bytes(param, local);
      const size_t count = wide.size() / sizeof(float);
      std::string narrow(count * sizeof(uint16_t), '\0');
      for (size_t e = 0; e < count; ++e) {
        float v;
        std::memcpy(&v, wide.data() + e * sizeof(float), sizeof(float));
        const uint16_t bits = ir::float_to_bf16_bits(v);  // the step's convert rounds the same way
        std::memcpy(narrow.data() + e * sizeof(uint16_t), &bits, sizeof(uint16_t));
      }
      KILN_RETURN_IF_ERROR(runner.set_arg_bytes(copy, narrow, local));
    }
  }
  return ok_status();
}

}  // namespace kiln::train
