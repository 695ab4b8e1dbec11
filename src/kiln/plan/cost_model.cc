#include "kiln/plan/cost_model.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/strings.h"
#include "kiln/ir/opcode.h"
#include "kiln/ops/collective_bytes.h"
#include "kiln/ops/registry.h"
#include "kiln/plan/attention_cost.h"

namespace kiln::plan {
namespace {

using train::KernelKind;

// How a collective's group lies over the nodes, seen from device 0's group: g members,
// `per_node` of them on each of `nodes` nodes (uniform), or not uniform (flat ring).
struct GroupLayout {
  int64_t g = 1, per_node = 1, nodes = 1;
  bool uniform = true;
};
GroupLayout group_layout(const ir::Instr& instr, const config::Mesh& mesh, int64_t devices_per_node) {
  std::vector<int64_t> members;
  if (instr.attrs().has("mesh_axes")) {
    members = mesh.group(0, split(instr.attrs().get_string("mesh_axes"), ','));
  } else {
    for (int64_t d = 0; d < instr.attrs().get_int_or("group_size", mesh.num_devices()); ++d) members.push_back(d);
  }
  std::map<int64_t, int64_t> per_node;  // node -> members on it
  for (int64_t m : members) ++per_node[m / devices_per_node];
  GroupLayout l;
  l.g = std::max<int64_t>(1, static_cast<int64_t>(members.size()));
  l.nodes = static_cast<int64_t>(per_node.size());
  l.per_node = per_node.empty() ? 1 : per_node.begin()->second;
  for (const auto& [node, count] : per_node) l.uniform = l.uniform && count == l.per_node;
  return l;
}

// A ring's stage over `members` devices on one link: time for `bytes` (the stage's whole
// gathered or summed buffer), `passes` 1 (gather or scatter) or 2 (all-reduce).
double ring_seconds(int64_t members, double bytes, int passes, const Link& link) {
  if (members <= 1) return 0;
  const double steps = static_cast<double>(members - 1);
  return passes * (steps / static_cast<double>(members) * bytes / (link.bandwidth_gbs * 1e9) +
                   steps * link.latency_us * 1e-6);
}

// Seconds of one collective of `kind` moving `bytes` (ops::collective_bytes) over a group
// laid out as `l`. Within a node the flat ring on `intra`; across nodes two levels, as NCCL's
// and XLA's multi-slice collectives run: the bytes are first reduced (or last gathered) over
// the node's k members on `intra`, and only 1/k of them crosses `inter`, once per device (each
// device its own NIC, as the targets' inter bandwidth is per device). All-to-all: the (k-1)/g
// of the send buffer for the node's own members goes over intra while the (g-k)/g for other
// nodes goes over inter, at once (the slower bounds the time), one message per peer.
double collective_seconds(const std::string& kind, double bytes, const GroupLayout& l, const Link& intra,
                          const Link& inter) {
  if (l.nodes <= 1) return ring_seconds(l.g, bytes, kind == "all_reduce" ? 2 : 1, intra);
  if (!l.uniform || l.per_node <= 1) return ring_seconds(l.g, bytes, kind == "all_reduce" ? 2 : 1, inter);
  const int64_t k = l.per_node, n = l.nodes;
  const double across = bytes / static_cast<double>(k);
  if (kind == "all_gather" || kind == "reduce_scatter") {
    return ring_seconds(k, bytes, 1, intra) + ring_seconds(n, across, 1, inter);
  }
  if (kind == "all_reduce") {
    return 2 * ring_seconds(k, bytes, 1, intra) + ring_seconds(n, across, 2, inter);
  }
  // all_to_all, ragged_all_to_all
  const double g = static_cast<double>(l.g);
  const double intra_s = static_cast<double>(k - 1) / g * bytes / (intra.bandwidth_gbs * 1e9);
  const double inter_s = static_cast<double>(l.g - k) / g * bytes / (inter.bandwidth_gbs * 1e9);
  return std::max(intra_s, inter_s) + static_cast<double>(k - 1) * intra.latency_us * 1e-6 +
         static_cast<double>(l.g - k) * inter.latency_us * 1e-6;
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

std::string result_dtype(const ir::Instr& instr) {
  return instr.shape().is_tuple() ? "" : std::string(ir::dtype_name(instr.shape().dtype()));
}

std::string fusion_signature(const ir::Instr& fusion) {
  std::set<std::string_view> opcodes, dtypes;
  for (const auto& inner : fusion.called()[0]->instructions()) {
    if (inner->opcode() == ir::Opcode::kParameter || inner->opcode() == ir::Opcode::kConstant) continue;
    opcodes.insert(ir::opcode_name(inner->opcode()));
  }
  const ir::Shape& result = fusion.shape();
  if (result.is_tuple()) {
    for (const ir::Shape& e : result.elements()) dtypes.insert(ir::dtype_name(e.dtype()));
  } else {
    dtypes.insert(ir::dtype_name(result.dtype()));
  }
  return fmt::format("{} {} -> {}", fusion.attrs().get_string("kind"), fmt::join(opcodes, ","), fmt::join(dtypes, ","));
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
                      bool bf16_step, std::string_view opcode) {
  const KernelRate& r = target.rate(kind, bf16_step);
  return r.fixed_us_of(opcode) * 1e-6 + roofline_seconds(target, kind, flops, bytes, bf16_kernel) / r.efficiency;
}

double kernel_seconds(const Target& target, const ir::Instr& instr, const train::InstrInfo& info, double flops,
                      double bytes, bool bf16_step) {
  const KernelKind kind = info.kind;
  if (kind == KernelKind::kGemm && !target.gemm_shapes.empty()) {
    const std::string out_dtype = result_dtype(instr);
    std::optional<double> efficiency = target.gemm_shape_efficiency(info, out_dtype);
    if (!efficiency) efficiency = target.large_gemm_efficiency(info, out_dtype);
    if (efficiency) return roofline_seconds(target, kind, flops, bytes, computes_in_bf16(instr)) / *efficiency;
  }
  if (kind == KernelKind::kAttention && !target.attention.empty()) {
    if (std::optional<AttentionWork> w = attention_work(instr, target.attention.tile_q, target.attention.tile_k)) {
      if (std::optional<double> s =
              target.attention.seconds(w->op, w->bf16, w->head_dim, w->rows, w->visited_pairs, bf16_step)) {
        return *s;
      }
    }
  }
  if (kind == KernelKind::kFused) {
    const KernelRate& r = target.rate(kind, bf16_step);
    if (!r.efficiency_by_signature.empty()) {
      const double efficiency = r.efficiency_of(fusion_signature(instr));
      return r.fixed_us * 1e-6 + roofline_seconds(target, kind, flops, bytes, computes_in_bf16(instr)) / efficiency;
    }
  }
  return kernel_seconds(target, kind, flops, bytes, computes_in_bf16(instr), bf16_step,
                        ir::opcode_name(instr.opcode()));
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
  double since_issue = 0;  // compute since the last collective's issue (or the step's start)
  std::unordered_map<const ir::Instr*, std::pair<double, std::string>> in_flight;  // start -> (end, kind)
  // Issues a collective on the engine at `now`; returns when it ends.
  auto issue = [&](const ir::Instr& instr, const std::string& kind) {
    const GroupLayout layout = group_layout(instr, mesh, std::max<int64_t>(1, target.devices_per_node));
    const Link& link = layout.nodes > 1 ? target.inter : target.intra;
    double bytes = static_cast<double>(ops::collective_bytes(instr).value_or(0));
    if (kind == "ragged_all_to_all" && load > 0) bytes *= load;
    // The transfer, and the wait for the slowest device that drifted behind since the last
    // collective (devices sharing a calibrated CPU's cores; 0 elsewhere).
    const double seconds =
        target.collective_in_step(options.bf16_step) * collective_seconds(kind, bytes, layout, target.intra, target.inter) +
        target.collective_wait_seconds(options.bf16_step, since_issue);
    since_issue = 0;
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
      const double end = issue(*instr, kind);
      if (target.collectives_overlap) {
        in_flight[instr] = {end, kind};
      } else {
        wait_until(end, kind);  // the device's own thread moves the data
      }
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
    const double seconds = kernel_seconds(target, *instr, info, flops, bytes, options.bf16_step);
    ClassEstimate& c = p.classes[static_cast<int>(info.kind)];
    ++c.count;
    c.flops += flops;
    c.bytes += bytes;
    c.seconds += seconds;
    p.compute_s += seconds;
    ++p.kernels;
    now += seconds;
    since_issue += seconds;
  }
  p.step_s = now;
  return p;
}

}  // namespace kiln::plan
