#include "kiln/train/observability/trace.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/ops/device_context.h"
#include "kiln/ops/registry.h"

namespace kiln::train {

namespace {

using ir::Opcode;

double product(const ir::Shape& s, const std::vector<int64_t>& dims) {
  double p = 1;
  for (int64_t d : dims) p *= static_cast<double>(s.dims()[d]);
  return p;
}

// "all_gather" for "all_gather_start" / "all_gather_done" / "all_gather"; else "".
std::string collective_kind(std::string_view opcode) {
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "collective_permute"}) {
    if (opcode.find(kind) != std::string_view::npos) return kind;
  }
  return "";
}

std::string value_name(const ir::Instr& instr) {
  return instr.meta().name.empty() ? "%" + instr.id() : instr.meta().name;
}

}  // namespace

const char* kernel_kind_name(KernelKind kind) {
  switch (kind) {
    case KernelKind::kGemm: return "gemm";
    case KernelKind::kGroupedMatmul: return "grouped_matmul";
    case KernelKind::kAttention: return "attention";
    case KernelKind::kFused: return "fusion";
    case KernelKind::kCollective: return "collective";
    case KernelKind::kOther: return "other_kernel";
    case KernelKind::kCount: break;
  }
  return "?";
}

InstrInfo describe_instruction(const ir::Instr& instr) {
  InstrInfo info;
  const std::string_view opcode = ir::opcode_name(instr.opcode());
  const std::string name = value_name(instr);
  ops::Cost cost = ops::cost_of(instr);
  info.flops = cost.flops;
  info.transcendentals = cost.transcendentals;
  // The op's own count of the memory it touches: every output of a multi-output fusion;
  // a gather reads only the rows it picks (an embedding lookup, the loss's pick of the
  // label's logit), a slice only the window.
  info.bytes = cost.bytes_read + cost.bytes_written;
  info.remat = name.find(".remat") != std::string::npos;
  nlohmann::json args = {{"op", std::string(opcode)}, {"value", name}, {"shape", instr.shape().to_string()}};
  info.collective = collective_kind(opcode);

  // What kind of kernel runs it is the op's registry trait (its kernel class; a fusion
  // calls its body), so a new op lands in the right row without a change here.
  const ops::OpDef& def = ops::op_def(instr.opcode());
  if (def.kernel_class == ops::KernelClass::kGemm) {
    info.kind = KernelKind::kGemm;
    const ir::Shape& lhs = instr.operand(0)->shape();
    const ir::Shape& rhs = instr.operand(1)->shape();
    const ir::Attrs& a = instr.attrs();
    const double batch = product(lhs, a.get_ints("lhs_batch")), k = product(lhs, a.get_ints("lhs_contract"));
    info.batch = static_cast<int64_t>(batch);
    info.k = static_cast<int64_t>(k);
    info.m = static_cast<int64_t>(static_cast<double>(lhs.num_elements()) / (batch * k));
    info.n = static_cast<int64_t>(static_cast<double>(rhs.num_elements()) / (batch * k));
    info.dtype = std::string(ir::dtype_name(lhs.dtype()));
    // As the library sees it when no copy is needed: lhs is [M, K] unless its last dim is free.
    const std::vector<int64_t> lc = a.get_ints("lhs_contract"), rc = a.get_ints("rhs_contract");
    info.trans_a = std::find(lc.begin(), lc.end(), lhs.rank() - 1) == lc.end();
    info.trans_b = std::find(rc.begin(), rc.end(), rhs.rank() - 1) != rc.end();
    info.name = fmt::format("{} gemm {}x{}x{}x{}", name, info.batch, info.m, info.n, info.k);
    args["lhs"] = lhs.to_string();
    args["rhs"] = rhs.to_string();
    args["bmnk"] = {info.batch, info.m, info.n, info.k};
    args["trans"] = std::string(info.trans_a ? "T" : "N") + (info.trans_b ? "T" : "N");
    args["gflop"] = info.flops / 1e9;
  } else if (def.kernel_class == ops::KernelClass::kGroupedMatmul || def.kernel_class == ops::KernelClass::kAttention) {
    info.kind = def.kernel_class == ops::KernelClass::kAttention ? KernelKind::kAttention : KernelKind::kGroupedMatmul;
    info.name = fmt::format("{} {}", name, opcode);
    args["gflop"] = info.flops / 1e9;
  } else if (def.calls_body) {
    info.kind = KernelKind::kFused;
    // The source names of what was fused, in program order, without repeats; a body
    // without names (optimizer arithmetic, compiler-made values) lists its opcodes instead,
    // and an unnamed fusion is named after them, as XLA does ("mul_add_fusion").
    std::vector<std::string> fused, ops;
    std::set<std::string> seen, seen_ops;
    for (const auto& inner : instr.called()[0]->instructions()) {
      if (inner->opcode() == Opcode::kParameter || inner->opcode() == Opcode::kConstant) continue;
      const std::string op(ir::opcode_name(inner->opcode()));
      if (seen_ops.insert(op).second) ops.push_back(op);
      if (!inner->meta().name.empty() && seen.insert(inner->meta().name).second) fused.push_back(inner->meta().name);
    }
    if (instr.meta().name.empty()) {
      std::string joined;
      for (size_t i = 0; i < ops.size() && i < 3; ++i) joined += (i ? "_" : "") + ops[i];
      info.name = (joined.empty() ? "%" + instr.id() : joined) + "_fusion";
    } else {
      info.name = name + "_fusion";
    }
    args["fused"] = fused.empty() ? ops : fused;
    args["body"] = ops;
    args["kind"] = instr.attrs().get_string("kind");
    args["mbytes"] = info.bytes / 1e6;
    // An elementwise kernel's arithmetic (a sigmoid, a norm's rsqrt) can outweigh its bytes.
    args["mflop"] = info.flops / 1e6;
    args["mtranscendental"] = info.transcendentals / 1e6;
  } else if (!info.collective.empty()) {
    info.kind = KernelKind::kCollective;
    info.name = fmt::format("{} {}", opcode, name);
  } else {
    info.kind = KernelKind::kOther;
    info.name = fmt::format("{} {}", name, opcode);
    args["mbytes"] = info.bytes / 1e6;  // what a byte-bound kernel's time goes with, as for fusions
  }
  info.args_json = args.dump();
  return info;
}

TraceRecorder::TraceRecorder(bool keep_events) : keep_events_(keep_events) {}

int64_t TraceRecorder::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int TraceRecorder::thread_index() {  // callers hold mu_
  auto [it, inserted] = threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()));
  return it->second;
}

void TraceRecorder::begin_step(int64_t /*step*/) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [device, d] : devices_) d.last_end_ns = -1;
  observing_ = true;
}

void TraceRecorder::end_step(int64_t step, int64_t step_begin_ns, int64_t step_end_ns) {
  observing_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  host_totals_.wall_s += 1e-9 * static_cast<double>(step_end_ns - step_begin_ns);
  ++host_totals_.steps;
  if (keep_events_) {
    if (origin_ns_ < 0) origin_ns_ = step_begin_ns;
    Event e{-1, 0, thread_index(), step_begin_ns, step_end_ns, fmt::format("step {}", step), "step"};
    events_.push_back(std::move(e));
  }
}

void TraceRecorder::on_instruction(const ir::Instr& instr, int64_t begin_ns, int64_t end_ns) {
  if (!observing_) return;
  // Virtual devices run their programs on their own threads, each under its device context.
  const int64_t device = ops::current_device().device;
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = info_of_.emplace(&instr, static_cast<int32_t>(infos_.size()));
  if (inserted) infos_.push_back(describe_instruction(instr));
  const InstrInfo& info = infos_[it->second];
  DeviceTotals& d = devices_[device];
  if (keep_events_) {
    if (origin_ns_ < 0) origin_ns_ = begin_ns;
    events_.push_back(Event{it->second, static_cast<int32_t>(device) + 1, thread_index(), begin_ns, end_ns, "", ""});
  }
  StepTotals& totals = d.totals;
  if (d.last_end_ns >= 0 && begin_ns > d.last_end_ns) totals.between_kernels_s += 1e-9 * static_cast<double>(begin_ns - d.last_end_ns);
  d.last_end_ns = std::max(d.last_end_ns, end_ns);
  const double s = 1e-9 * static_cast<double>(end_ns - begin_ns);
  auto add = [&](KindTotal& t) {
    t.seconds += s;
    t.flops += info.flops;
    t.bytes += info.bytes;
    ++t.count;
  };
  // A recomputed value counts as rematerialization only, not also in its kernel's row.
  if (info.remat) {
    add(totals.remat);
  } else {
    add(totals.kinds[static_cast<int>(info.kind)]);
    if (!info.collective.empty()) add(totals.collectives[info.collective]);
  }
  if (info.kind == KernelKind::kGemm && !info.remat) {  // the shapes of the gemm row
    GemmShapeTotal& g = totals.gemm_shapes[fmt::format("{} {}x{}x{}x{} {}{}", info.dtype, info.batch, info.m,
                                                        info.n, info.k, info.trans_a ? 'T' : 'N',
                                                        info.trans_b ? 'T' : 'N')];
    g.batch = info.batch, g.m = info.m, g.n = info.n, g.k = info.k, g.dtype = info.dtype;
    g.trans_a = info.trans_a, g.trans_b = info.trans_b;
    ++g.count;
    g.seconds += s;
  }
}

StepTotals TraceRecorder::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  StepTotals mean = host_totals_;
  if (devices_.empty()) return mean;
  const double n = static_cast<double>(devices_.size());
  const auto n_int = static_cast<int64_t>(devices_.size());
  auto add = [&](KindTotal& into, const KindTotal& t) {
    into.seconds += t.seconds / n, into.flops += t.flops / n, into.bytes += t.bytes / n;
    into.count += t.count;  // summed here, divided below: every device runs the same program
  };
  for (const auto& [device, d] : devices_) {
    const StepTotals& t = d.totals;
    for (int k = 0; k < static_cast<int>(KernelKind::kCount); ++k) add(mean.kinds[k], t.kinds[k]);
    for (const auto& [kind, c] : t.collectives) add(mean.collectives[kind], c);
    add(mean.remat, t.remat);
    for (const auto& [key, g] : t.gemm_shapes) {
      GemmShapeTotal& m = mean.gemm_shapes[key];
      const int64_t count = m.count + g.count;
      const double seconds = m.seconds + g.seconds / n;
      m = g;
      m.count = count, m.seconds = seconds;
    }
    mean.between_kernels_s += t.between_kernels_s / n;
  }
  for (KindTotal& k : mean.kinds) k.count /= n_int;
  for (auto& [kind, c] : mean.collectives) c.count /= n_int;
  mean.remat.count /= n_int;
  for (auto& [key, g] : mean.gemm_shapes) g.count /= n_int;
  return mean;
}

void TraceRecorder::host_span(const std::string& name, const char* category, int64_t begin_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  const double s = 1e-9 * static_cast<double>(end_ns - begin_ns);
  if (std::string_view(category) == "data") host_totals_.data_wait_s += s;
  if (std::string_view(category) == "checkpoint") host_totals_.checkpoint_s += s;
  if (keep_events_) {
    if (origin_ns_ < 0) origin_ns_ = begin_ns;
    events_.push_back(Event{-1, 0, thread_index(), begin_ns, end_ns, name, category});
  }
}

Status TraceRecorder::write_json(const std::string& path) const {
  std::ofstream out(path);
  if (!out) return io_error("cannot open {} for writing", path);
  // Hand-streamed (not one big json object): a trace holds ~10^5 events.
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out << fmt::format(R"({{"name": "process_name", "ph": "M", "pid": 0, "args": {{"name": "host"}}}})");
  std::set<int64_t> devices = {0};  // a trace names device 0 even when no instruction ran
  for (const auto& [d, totals] : devices_) devices.insert(d);
  for (int64_t d : devices) {
    out << fmt::format(",\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {}, \"args\": {{\"name\": \"device {}\"}}}}",
                       d + 1, d);
  }
  std::set<std::pair<int, int>> tracks;
  for (const Event& e : events_) tracks.insert({e.pid, e.tid});
  for (const auto& [pid, tid] : tracks) {
    const std::string thread = tid == 0 ? "main thread" : fmt::format("thread {}", tid);
    out << fmt::format(",\n{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, \"args\": {{\"name\": "
                       "\"{}\"}}}}",
                       pid, tid, pid == 0 ? thread : "executor " + thread);
  }
  const int64_t origin = origin_ns_ < 0 ? 0 : origin_ns_;
  for (const Event& e : events_) {
    const double ts = 1e-3 * static_cast<double>(e.begin_ns - origin), dur = 1e-3 * static_cast<double>(e.end_ns - e.begin_ns);
    if (e.info >= 0) {
      const InstrInfo& info = infos_[e.info];
      out << fmt::format(",\n{{\"name\": {}, \"cat\": \"{}\", \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, "
                         "\"dur\": {:.3f}, \"args\": {}}}",
                         nlohmann::json(info.name).dump(), kernel_kind_name(info.kind), e.pid, e.tid, ts, dur,
                         info.args_json);
    } else {
      out << fmt::format(",\n{{\"name\": {}, \"cat\": \"{}\", \"ph\": \"X\", \"pid\": {}, \"tid\": {}, \"ts\": {:.3f}, "
                         "\"dur\": {:.3f}}}",
                         nlohmann::json(e.host_name).dump(), e.category, e.pid, e.tid, ts, dur);
    }
  }
  out << "\n]}\n";
  out.close();
  if (!out) return io_error("cannot write {}", path);
  return ok_status();
}

}  // namespace kiln::train
