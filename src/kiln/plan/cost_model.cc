#include "kiln/plan/cost_model.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "kiln/base/strings.h"
#include "kiln/ir/opcode.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/ops/registry.h"

namespace kiln::plan {
namespace {

using train::KernelKind;

// Ring traffic per device over a group of g, as multiples of (bytes / bw, latency).
struct Traffic {
  double bytes_factor, hops;
};
Traffic ring_traffic(const std::string& kind, int64_t g) {
  const double steps = static_cast<double>(g - 1);
  if (kind == "all_reduce") return {2.0 * steps / static_cast<double>(g), 2.0 * steps};
  return {steps / static_cast<double>(g), steps};
}

// The group's members seen from device 0, and whether they span nodes.
bool crosses_nodes(const ir::Instr& instr, const config::Mesh& mesh, int64_t devices_per_node, int64_t* group_size) {
  std::vector<int64_t> members;
  if (instr.attrs().has("mesh_axes")) {
    members = mesh.group(0, split(instr.attrs().get_string("mesh_axes"), ','));
  } else {
    for (int64_t d = 0; d < instr.attrs().get_int_or("group_size", mesh.num_devices()); ++d) members.push_back(d);
  }
  *group_size = static_cast<int64_t>(members.size());
  for (int64_t m : members) {
    if (m / devices_per_node != members.front() / devices_per_node) return true;
  }
  return false;
}

// Bytes of a grouped matmul's operands and result that hold one row per routed token.
double routed_row_bytes(const ir::Instr& instr) {
  const int64_t rows = instr.operand(0)->shape().dim(0);
  double bytes = 0;
  auto add = [&](const ir::Shape& s) {
    if (!s.is_tuple() && s.rank() >= 2 && s.dim(0) == rows) bytes += static_cast<double>(s.byte_size());
  };
  for (const ir::Instr* o : instr.operands()) add(o->shape());
  add(instr.shape());
  return bytes;
}

}  // namespace

bool computes_in_bf16(const ir::Instr& instr) {
  return instr.num_operands() > 0 && !instr.operand(0)->shape().is_tuple() &&
         instr.operand(0)->shape().dtype() == ir::DType::kBF16;
}

std::optional<train::InstrInfo> describe_kernel(const ir::Instr& instr) {
  const ops::OpDef& def = ops::op_def(instr.opcode());
  if (def.plumbing) return std::nullopt;
  if (def.async_role != ops::AsyncRole::kNone || def.aliases_operand) return std::nullopt;
  train::InstrInfo info = train::describe_instruction(instr);
  if (info.kind == KernelKind::kCollective || !info.collective.empty()) return std::nullopt;
  return info;
}

double kernel_seconds(const Target& target, KernelKind kind, double flops, double bytes, bool bf16_kernel,
                      bool bf16_step) {
  const KernelRate& r = target.rate(kind, bf16_step);
  return r.fixed_us * 1e-6 + roofline_seconds(target, kind, flops, bytes, bf16_kernel) / r.efficiency;
}

double roofline_seconds(const Target& target, KernelKind kind, double flops, double bytes, bool bf16) {
  const double memory = bytes / (target.memory_bandwidth_gbs * 1e9);
  if (!rated_by_flops(kind)) return memory;
  return std::max(flops / (target.peak_tflops(bf16) * 1e12), memory);
}

StepPrediction predict_step(std::span<const ir::Instr* const> schedule, const config::Mesh& mesh,
                            const Target& target, const PredictOptions& options) {
  StepPrediction p;
  const int64_t experts = mesh.size("expert");
  const double load = experts > 1 ? (options.routing_load > 0 ? std::min(1.0, options.routing_load)
                                                              : 1.0 / static_cast<double>(experts))
                                  : 0.0;
  p.routing_load = load;
  double now = 0, engine_free = 0;
  std::unordered_map<const ir::Instr*, std::pair<double, std::string>> in_flight;  // start -> (end, kind)
  // Issues a collective on the engine at `now`; returns when it ends.
  auto issue = [&](const ir::Instr& instr, const std::string& kind) {
    int64_t g = 1;
    const bool inter = crosses_nodes(instr, mesh, std::max<int64_t>(1, target.devices_per_node), &g);
    const Link& link = inter ? target.inter : target.intra;
    double bytes = static_cast<double>(ops::collective_bytes(instr).value_or(0));
    if (kind == "ragged_all_to_all" && load > 0) bytes *= load;
    const Traffic t = ring_traffic(kind, std::max<int64_t>(g, 1));
    const double seconds = t.bytes_factor * bytes / (link.bandwidth_gbs * 1e9) + t.hops * link.latency_us * 1e-6;
    const double begin = std::max(now, engine_free);
    engine_free = begin + seconds;
    CollectiveEstimate& c = p.collectives[kind];
    ++c.count;
    c.bytes += bytes;
    c.seconds += seconds;
    c.link = link.name;
    p.collective_s += seconds;
    return engine_free;
  };
  auto wait_until = [&](double end, const std::string& kind) {
    if (end <= now) return;
    p.collectives[kind].exposed_s += end - now;
    p.exposed_s += end - now;
    now = end;
  };
  for (const ir::Instr* instr : schedule) {
    if (ops::op_def(instr->opcode()).plumbing) continue;
    // The host's time between two instructions the device runs (views and async halves too).
    const double host = target.host_us_per_kernel * 1e-6;
    p.host_s += host;
    now += host;
    ++p.instructions;
    const ops::OpDef& def = ops::op_def(instr->opcode());
    if (def.async_role == ops::AsyncRole::kStart) {
      const std::string kind(ir::opcode_name(def.async_of));
      in_flight[instr] = {issue(*instr, kind), kind};
      continue;
    }
    if (def.async_role == ops::AsyncRole::kDone) {
      auto it = in_flight.find(instr->operand(0));
      if (it != in_flight.end()) wait_until(it->second.first, it->second.second);
      continue;
    }
    if (def.aliases_operand) continue;  // a view of its operand: nothing runs
    const train::InstrInfo info = train::describe_instruction(*instr);
    if (info.kind == KernelKind::kCollective || !info.collective.empty()) {
      const std::string kind(ir::opcode_name(instr->opcode()));
      wait_until(issue(*instr, kind), kind);
      ++p.kernels;
      continue;
    }
    double flops = info.flops, bytes = info.bytes;
    if (info.kind == KernelKind::kGroupedMatmul && load > 0) {
      // The kernel stops at the rows its groups hold: its FLOPs and the bytes of every array
      // with one row per routed token (dimension 0 as long as x's) scale with the load; the
      // expert weights do not.
      flops *= load;
      bytes -= (1 - load) * routed_row_bytes(*instr);
    }
    const double seconds = kernel_seconds(target, info.kind, flops, bytes, computes_in_bf16(*instr), options.bf16_step);
    ClassEstimate& c = p.classes[static_cast<int>(info.kind)];
    ++c.count;
    c.flops += flops;
    c.bytes += bytes;
    c.seconds += seconds;
    p.compute_s += seconds;
    ++p.kernels;
    now += seconds;
  }
  p.step_s = now;
  return p;
}

}  // namespace kiln::plan
