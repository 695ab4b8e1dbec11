#include "kiln/backend/cpu/memory/memory_plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kiln/backend/cpu/kernels/kernel.h"
#include "kiln/base/check.h"
#include "kiln/memory/memory_stages.h"

namespace kiln::backend::cpu {

using ir::Instr;
using memory::Placement;

bool async_collectives_enabled(const CompileOptions& options) {
  const char* env = std::getenv("KILN_ASYNC_COLLECTIVES");
  if (env != nullptr && *env != '\0') return std::string(env) != "0";
  return options.async_collectives;
}

int64_t overlap_limit_bytes(const CompileOptions& options) {
  const char* env = std::getenv("KILN_OVERLAP_LIMIT_MB");
  if (env != nullptr && *env != '\0') return static_cast<int64_t>(std::atof(env) * 1048576.0);
  return options.overlap_limit_bytes;
}

Status MemoryPlan::build(const ir::Computation& computation, const CompileOptions& options,
                         const std::function<bool(const Instr*)>& fallback, CompileReport& report) {
  // The pipeline's memory stages (memory/memory_stages.h): schedule, latency hiding, buffer
  // assignment. What is the CPU's own is below: the report and the kernels' scratch.
  memory::MemoryStageOptions mopts;
  mopts.donated = options.donated;
  mopts.overlap_limit_bytes = overlap_limit_bytes(options);
  mopts.device_memory_bytes = options.device_memory_bytes;
  KILN_ASSIGN_OR_RETURN(memory::MemoryStages stages, memory::run_memory_stages(computation, mopts));
  model_ = std::move(stages.model);
  assignment_ = std::move(stages.assignment);
  donated_ = options.donated;
  report.async_collectives = stages.hiding.pairs;
  report.overlapped_collectives = stages.hiding.overlapped;
  report.overlap_limit_bytes = stages.hiding.limit_bytes;
  report.overlap_limit_fraction = stages.overlap_limit_fraction;
  report.schedule = stages.choice.name;
  const memory::BufferAssignment& a = assignment_;
  report.argument_bytes = a.argument_bytes;
  report.constant_bytes = a.constant_bytes;
  report.arena_bytes = a.arena_bytes;
  report.output_bytes = a.output_bytes;
  report.peak_value_bytes = a.max_live_arena_bytes + a.output_bytes;
  report.saved_activation_bytes = a.saved_activation_bytes;
  report.in_place_reuses = a.in_place_reuses;
  report.donated_in_place = a.donated_in_place;
  report.kernel_scratch_bytes = 0;
  for (const Instr* instr : a.schedule) {
    report.kernel_scratch_bytes = std::max(report.kernel_scratch_bytes, kernel_scratch_bytes(*instr, fallback(instr)));
  }
  report.planned_peak_bytes = a.argument_bytes + a.constant_bytes + a.arena_bytes + a.output_bytes +
                              report.kernel_scratch_bytes;
  return ok_status();
}

Status MemoryPlan::begin_run(std::span<const Buffer> args) {
  for (const auto& [out, arg] : donated_) {
    for (size_t other = 0; other < args.size(); ++other) {
      if (static_cast<int64_t>(other) != arg && args[other].data() == args[arg].data() && args[arg].byte_size() > 0) {
        return invalid_argument("argument {} is donated (updated in place) but shares its storage with argument {}",
                                arg, other);
      }
    }
  }
  if (!arena_ && assignment_.arena_bytes > 0) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(64, static_cast<size_t>(assignment_.arena_bytes)));
    KILN_CHECK(p != nullptr) << "out of memory allocating the " << assignment_.arena_bytes << "-byte arena";
    arena_ = std::shared_ptr<std::byte[]>(p, [](std::byte* q) { std::free(q); });
  }
  return ok_status();
}

Buffer MemoryPlan::planned(int id, std::span<const Buffer> args) {
  const memory::Slot& slot = assignment_.slots[id];
  const ir::Shape& shape = model_->buffer(id).shape;
  switch (slot.placement) {
    case Placement::kArena: return Buffer::in_storage(shape, arena_, slot.offset);
    case Placement::kDonated: return args[slot.argument].view(shape);
    case Placement::kOutput: return Buffer(shape, *pool_);
    case Placement::kArgument:
    case Placement::kConstant: break;
  }
  KILN_CHECK(false) << "no planned storage for a " << memory::placement_name(slot.placement) << " buffer";
  return Buffer();
}

void MemoryPlan::prepare(const Instr* instr, std::span<const Buffer> args, Value& out) {
  const auto& defined = model_->defined(instr);
  out.clear();
  if (defined.empty()) {
    out.resize(1);  // a view: its kernel puts the operand's storage here
    return;
  }
  for (int id : defined) out.push_back(planned(id, args));
  prepared_.clear();
  for (const Buffer& b : out) prepared_.push_back(b.data());
}

void MemoryPlan::settle(const Instr* instr, std::span<const Buffer> args, Value& out) {
  const auto& defined = model_->defined(instr);
  KILN_CHECK(defined.empty() || out.size() == defined.size())
      << "kernel gave " << out.size() << " buffers for " << instr->to_string();
  for (size_t e = 0; e < defined.size(); ++e) {
    // Written where prepare() put it. (Asking planned() again would give an output of its
    // own new storage, and an async collective's start is still writing into the first.)
    if (e < prepared_.size() && out[e].data() == prepared_[e]) continue;
    Buffer want = planned(defined[e], args);
    if (out[e].data() == want.data()) continue;
    // The kernel allocated its own result: move it into the storage the plan gave it.
    KILN_CHECK_EQ(out[e].byte_size(), want.byte_size()) << instr->to_string();
    std::memcpy(want.data(), out[e].data(), static_cast<size_t>(want.byte_size()));
    out[e] = std::move(want);
  }
}

int64_t kernel_scratch_bytes(const Instr& instr, bool fallback) {
  if (fallback) {
    // The reference evaluation: operands and result as ir::Literal (8 bytes per element),
    // and the result's own Buffer.
    int64_t elements = 0;
    for (const Instr* o : instr.operands()) elements += o->shape().is_tuple() ? o->shape().byte_size() : o->shape().num_elements();
    if (instr.shape().is_tuple()) {
      for (const auto& e : instr.shape().elements()) elements += e.num_elements();
    } else {
      elements += instr.shape().num_elements();
    }
    return 8 * elements + instr.shape().byte_size();
  }
  // A native kernel says what it allocates (its entry in the kernel table).
  const NativeKernelEntry* entry = find_native_entry(instr);
  return entry != nullptr && entry->scratch_bytes ? entry->scratch_bytes(instr) : 0;
}

}  // namespace kiln::backend::cpu
