// Step profiles: a Chrome trace (the JSON "Trace Event Format" that Perfetto and
// chrome://tracing open) of the profiled steps, and the per-kind time totals that the MFU
// attribution table is built from.
//
// Tracks: process "host" (pid 0) holds the trainer's own spans (step, data wait, metrics,
// checkpoint stalls, eval), one thread track per OS thread; process "device N" (pid N+1)
// holds every instruction the device's executable ran, one track per thread that ran it
// (the device comes from ops::current_device(), which the runtime sets on each virtual
// device's thread). Totals (the attribution) are the mean over the devices this process ran:
// every device runs the same program, and what one device spends in a collective is mostly
// its wait for the slowest peer, which falls on whichever device was ahead; the mean is the
// per-device figure a cost model predicts, and moves far less from run to run.
// Instruction events come through backend::InstructionObserver, so any instruction a backend
// runs (kernels, GEMMs, collective start/done pairs) shows up without trace code per op.
//
// Event names follow the IR metadata names: a fusion is "<root name>_fusion" (e.g.
// "layers.3.mlp.swiglu_fusion") with the names of the ops it fused in args.fused; a GEMM is
// "<name> gemm BxMxNxK" with its operand shapes in args; collectives keep their opcode
// ("all_gather_start", ...) with the value name.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/base/status.h"

namespace kiln::train {

// What an instruction's time counts as in the attribution table.
enum class KernelKind {
  kGemm,           // dot_general
  kGroupedMatmul,  // grouped_matmul and its weight gradient (MoE experts)
  kAttention,      // fused attention forward and backward
  kFused,          // generated elementwise / reduction fusions
  kCollective,     // collective start/done (any opcode naming one)
  kOther,          // native data movement, reductions, reference-evaluation fallbacks
  kCount
};
const char* kernel_kind_name(KernelKind kind);

// Static facts about one instruction, computed once and cached by the recorder.
struct InstrInfo {
  KernelKind kind = KernelKind::kOther;
  std::string name;       // trace event name
  std::string args_json;  // trace event args (a JSON object)
  double flops = 0;       // ops::cost_of (a multiply-add counts 2)
  double transcendentals = 0;  // ops::cost_of: exp, log, tanh, ... evaluations
  double bytes = 0;       // ops::cost_of: bytes read + bytes written
  std::string collective; // "all_gather", ... for kCollective; else ""
  bool remat = false;     // a recomputed value (name contains ".remat"): rematerialization
  // GEMM shape (kGemm only): batch x [M, K] @ [K, N], transposes as the library sees them.
  int64_t batch = 0, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // lhs stored [K, M] / rhs stored [N, K]
  std::string dtype;
};
InstrInfo describe_instruction(const ir::Instr& instr);

// Accumulated time per kernel kind (and per collective kind) over the observed steps.
struct KindTotal {
  double seconds = 0, flops = 0, bytes = 0;
  int64_t count = 0;
};
struct GemmShapeTotal {  // per distinct GEMM shape, for bench/gemm_shapes_bench
  int64_t batch = 0, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  std::string dtype;
  int64_t count = 0;
  double seconds = 0;
};
struct StepTotals {
  KindTotal kinds[static_cast<int>(KernelKind::kCount)];
  std::unordered_map<std::string, KindTotal> collectives;  // by collective kind
  KindTotal remat;                                         // recomputed instructions (not in kinds)
  std::unordered_map<std::string, GemmShapeTotal> gemm_shapes;
  double data_wait_s = 0, checkpoint_s = 0, wall_s = 0;
  // Measured: the gaps between one instruction's end and the next one's start on a device,
  // within each step (the executable's loop, frees, collective progress).
  double between_kernels_s = 0;
  int64_t steps = 0;
};

class TraceRecorder : public backend::InstructionObserver {
 public:
  // keep_events: store trace events (profiler=trace); totals are accumulated either way.
  explicit TraceRecorder(bool keep_events);

  // Between begin and end of an observed step, instructions and host spans count.
  void begin_step(int64_t step);
  void end_step(int64_t step, int64_t step_begin_ns, int64_t step_end_ns);
  bool observing() const { return observing_; }

  void on_instruction(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) override;
  // A host span ("data wait", "checkpoint save", "metrics"); category: data, checkpoint, host.
  void host_span(const std::string& name, const char* category, int64_t begin_ns, int64_t end_ns);

  // Instruction totals: the mean over the devices seen; wall, data and checkpoint time and
  // the step count: the host's.
  StepTotals totals() const;
  int64_t event_count() const { return static_cast<int64_t>(events_.size()); }
  // Writes {"traceEvents": [...], "displayTimeUnit": "ms"} with process and thread names.
  Status write_json(const std::string& path) const;

  static int64_t now_ns();

 private:
  struct Event {
    int32_t info;  // index into infos_, or -1 for a host span
    int32_t pid, tid;
    int64_t begin_ns, end_ns;
    std::string host_name;  // host spans only
    const char* category = "";
  };
  int thread_index();

  struct DeviceTotals {
    StepTotals totals;         // its instructions only
    int64_t last_end_ns = -1;  // its last instruction's end in this step
  };

  bool keep_events_;
  bool observing_ = false;
  int64_t origin_ns_ = -1;  // first event: trace timestamps start near 0
  std::vector<Event> events_;
  std::vector<InstrInfo> infos_;
  std::unordered_map<const ir::Instr*, int32_t> info_of_;
  std::unordered_map<std::thread::id, int> threads_;
  std::map<int64_t, DeviceTotals> devices_;  // by device, those whose instructions were seen
  StepTotals host_totals_;                   // wall, data wait, checkpoint, steps
  mutable std::mutex mu_;  // events_ and the maps and totals above (instructions come from several threads)
};

}  // namespace kiln::train
