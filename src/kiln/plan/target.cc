#include "kiln/plan/target.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/backend/backend.h"
#include "kiln/config/config.h"
#include "kiln/ir/opcode.h"

namespace kiln::plan {
namespace fs = std::filesystem;

const char* kernel_class_key(train::KernelKind kind) {
  switch (kind) {
    case train::KernelKind::kGemm: return "gemm";
    case train::KernelKind::kGroupedMatmul: return "grouped_matmul";
    case train::KernelKind::kAttention: return "attention";
    case train::KernelKind::kFused: return "fused";
    case train::KernelKind::kOther: return "other";
    default: return "collective";
  }
}

bool rated_by_flops(train::KernelKind kind) {
  return kind == train::KernelKind::kGemm || kind == train::KernelKind::kGroupedMatmul ||
         kind == train::KernelKind::kAttention;
}

namespace {

// Reads `key` of `node` as a number > 0 (>= 0 with allow_zero); errors name the file and key.
Result<double> number(const YAML::Node& node, const std::string& key, const std::string& where,
                      const std::string& path, bool allow_zero = false) {
  const YAML::Node v = node[key];
  if (!v) return invalid_argument("{}: missing {}{}", where, path, key);
  double x = 0;
  try {
    x = v.as<double>();
  } catch (const YAML::Exception&) {
    return invalid_argument("{}: {}{} is not a number", where, path, key);
  }
  if (!(allow_zero ? x >= 0 : x > 0) || !std::isfinite(x)) {
    return invalid_argument("{}: {}{} = {} must be {} and finite", where, path, key, x,
                            allow_zero ? ">= 0" : "> 0");
  }
  return x;
}

// Reads a kernel class's optional fixed_us_by_opcode: a map of opcode -> us >= 0.
Status fixed_by_opcode(const YAML::Node& k, const std::string& where, const std::string& path, KernelRate& r) {
  const YAML::Node m = k["fixed_us_by_opcode"];
  if (!m) return ok_status();
  if (!m.IsMap()) return invalid_argument("{}: {}fixed_us_by_opcode must map opcodes to microseconds", where, path);
  for (const auto& entry : m) {
    const std::string opcode = entry.first.as<std::string>();
    if (!ir::parse_opcode(opcode)) {
      return invalid_argument("{}: {}fixed_us_by_opcode.{} is not an opcode (e.g. gather, slice, sort)", where, path,
                              opcode);
    }
    KILN_ASSIGN_OR_RETURN(r.fixed_us_by_opcode[opcode],
                          number(m, opcode, where, path + "fixed_us_by_opcode.", /*allow_zero=*/true));
  }
  return ok_status();
}

// Reads a kernel class's optional efficiency_by_signature: a map of fusion signature -> > 0.
Status efficiency_by_signature(const YAML::Node& k, const std::string& where, const std::string& path,
                               KernelRate& r) {
  const YAML::Node m = k["efficiency_by_signature"];
  if (!m) return ok_status();
  if (!m.IsMap()) {
    return invalid_argument("{}: {}efficiency_by_signature must map fusion signatures (\"loop add,mul -> f32\") to "
                            "efficiencies",
                            where, path);
  }
  for (const auto& entry : m) {
    const std::string signature = entry.first.as<std::string>();
    KILN_ASSIGN_OR_RETURN(r.efficiency_by_signature[signature],
                          number(m, signature, where, path + "efficiency_by_signature."));
  }
  return ok_status();
}

// Reads the optional per-step-dtype map `key` of `root` ({float32: x, bfloat16: y}) into f32
// and bf16; absent, they keep their defaults.
Status per_dtype(const YAML::Node& root, const std::string& key, const std::string& where, bool allow_zero,
                 double& f32, double& bf16, const std::string& path = "") {
  const YAML::Node n = root[key];
  if (!n) return ok_status();
  if (!n.IsMap()) return invalid_argument("{}: {}{} is a map (float32, bfloat16)", where, path, key);
  KILN_ASSIGN_OR_RETURN(f32, number(n, "float32", where, path + key + ".", allow_zero));
  KILN_ASSIGN_OR_RETURN(bf16, number(n, "bfloat16", where, path + key + ".", allow_zero));
  return ok_status();
}

// Writes what per_dtype reads.
void write_per_dtype(YAML::Emitter& out, const std::string& key, double f32, double bf16) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "float32" << YAML::Value
      << f32 << YAML::Key << "bfloat16" << YAML::Value << bf16 << YAML::EndMap;
}

Result<std::string> text(const YAML::Node& node, const std::string& key, const std::string& where,
                         const std::string& path) {
  const YAML::Node v = node[key];
  if (!v || !v.IsScalar()) return invalid_argument("{}: missing {}{} (a string)", where, path, key);
  return v.as<std::string>();
}

Result<Link> link(const YAML::Node& links, const std::string& key, const std::string& where) {
  const YAML::Node n = links[key];
  if (!n || !n.IsMap()) return invalid_argument("{}: missing links.{} (name, bandwidth_gbs, latency_us)", where, key);
  Link l;
  const std::string path = "links." + key + ".";
  KILN_ASSIGN_OR_RETURN(l.name, text(n, "name", where, path));
  KILN_ASSIGN_OR_RETURN(l.bandwidth_gbs, number(n, "bandwidth_gbs", where, path));
  KILN_ASSIGN_OR_RETURN(l.latency_us, number(n, "latency_us", where, path, /*allow_zero=*/true));
  return l;
}

// The optional `attention` map (AttentionModel).
Result<AttentionModel> attention_model(const YAML::Node& n, const std::string& where) {
  if (!n.IsMap()) return invalid_argument("{}: attention is a map (tile, in_step, rates)", where);
  AttentionModel m;
  const YAML::Node tile = n["tile"];
  if (!tile || !tile.IsSequence() || tile.size() != 2) {
    return invalid_argument("{}: attention.tile must be [queries, keys] per tile", where);
  }
  try {
    m.tile_q = tile[0].as<int64_t>(), m.tile_k = tile[1].as<int64_t>();
  } catch (const YAML::Exception&) {
    return invalid_argument("{}: attention.tile must be two whole numbers", where);
  }
  if (m.tile_q <= 0 || m.tile_k <= 0) return invalid_argument("{}: attention.tile must be > 0", where);
  const YAML::Node in_step = n["in_step"];
  if (!in_step || !in_step.IsMap()) return invalid_argument("{}: missing attention.in_step (float32, bfloat16)", where);
  KILN_ASSIGN_OR_RETURN(m.in_step_f32, number(in_step, "float32", where, "attention.in_step."));
  KILN_ASSIGN_OR_RETURN(m.in_step_bf16, number(in_step, "bfloat16", where, "attention.in_step."));
  const YAML::Node rates = n["rates"];
  if (!rates || !rates.IsSequence() || rates.size() == 0) {
    return invalid_argument("{}: attention.rates must list (op, dtype, head_dim, fixed_us, row_ns, pair_ns)", where);
  }
  for (size_t i = 0; i < rates.size(); ++i) {
    const YAML::Node r = rates[i];
    const std::string path = fmt::format("attention.rates[{}].", i);
    if (!r.IsMap()) return invalid_argument("{}: {} is not a map", where, path);
    AttentionRate a;
    KILN_ASSIGN_OR_RETURN(a.op, text(r, "op", where, path));
    if (a.op != "attention" && a.op != "attention_grad") {
      return invalid_argument("{}: {}op = '{}' (accepted: attention, attention_grad)", where, path, a.op);
    }
    KILN_ASSIGN_OR_RETURN(std::string dtype, text(r, "dtype", where, path));
    if (dtype != "float32" && dtype != "bfloat16") {
      return invalid_argument("{}: {}dtype = '{}' (accepted: float32, bfloat16)", where, path, dtype);
    }
    a.bf16 = dtype == "bfloat16";
    KILN_ASSIGN_OR_RETURN(double dh, number(r, "head_dim", where, path));
    a.head_dim = static_cast<int64_t>(dh);
    KILN_ASSIGN_OR_RETURN(a.fixed_us, number(r, "fixed_us", where, path, true));
    KILN_ASSIGN_OR_RETURN(a.row_ns, number(r, "row_ns", where, path, true));
    KILN_ASSIGN_OR_RETURN(a.pair_ns, number(r, "pair_ns", where, path, true));
    m.rates.push_back(a);
  }
  return m;
}

// One GEMM shape and its efficiency (gemm_shapes, gemm_sizes.products): dtype, out_dtype
// (optional), batch, m, n, k, trans_a, trans_b, efficiency.
Result<GemmShapeRate> gemm_shape(const YAML::Node& g, const std::string& where, const std::string& path) {
  if (!g.IsMap()) return invalid_argument("{}: {} is not a map", where, path);
  GemmShapeRate r;
  KILN_ASSIGN_OR_RETURN(r.dtype, text(g, "dtype", where, path));
  if (g["out_dtype"]) {
    KILN_ASSIGN_OR_RETURN(r.out_dtype, text(g, "out_dtype", where, path));
  }
  for (const std::string* d : {&r.dtype, &r.out_dtype}) {
    if (*d != "f32" && *d != "bf16" && !(d == &r.out_dtype && d->empty())) {
      return invalid_argument("{}: {}{} = '{}' (accepted: f32, bf16)", where, path,
                              d == &r.dtype ? "dtype" : "out_dtype", *d);
    }
  }
  int64_t* dims[] = {&r.batch, &r.m, &r.n, &r.k};
  const char* names[] = {"batch", "m", "n", "k"};
  for (int d = 0; d < 4; ++d) {
    KILN_ASSIGN_OR_RETURN(double v, number(g, names[d], where, path));
    *dims[d] = static_cast<int64_t>(v);
  }
  try {
    r.trans_a = g["trans_a"].as<bool>(), r.trans_b = g["trans_b"].as<bool>();
  } catch (const YAML::Exception&) {
    return invalid_argument("{}: {}trans_a and trans_b must be true or false", where, path);
  }
  KILN_ASSIGN_OR_RETURN(r.efficiency, number(g, "efficiency", where, path));
  return r;
}

void write_gemm_shape(YAML::Emitter& out, const GemmShapeRate& r) {
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "dtype" << YAML::Value << r.dtype;
  if (!r.out_dtype.empty()) out << YAML::Key << "out_dtype" << YAML::Value << r.out_dtype;
  out << YAML::Key << "batch" << YAML::Value << r.batch << YAML::Key << "m" << YAML::Value << r.m << YAML::Key << "n"
      << YAML::Value << r.n << YAML::Key << "k" << YAML::Value << r.k << YAML::Key << "trans_a" << YAML::Value
      << r.trans_a << YAML::Key << "trans_b" << YAML::Value << r.trans_b << YAML::Key << "efficiency" << YAML::Value
      << r.efficiency << YAML::EndMap;
}

}  // namespace

std::optional<double> AttentionModel::seconds(const std::string& op, bool bf16, int64_t head_dim, double rows,
                                              double visited, bool bf16_step) const {
  const AttentionRate* best = nullptr;
  for (const AttentionRate& r : rates) {
    if (r.op != op || r.bf16 != bf16) continue;
    if (!best || std::abs(r.head_dim - head_dim) < std::abs(best->head_dim - head_dim)) best = &r;
  }
  if (!best) return std::nullopt;
  const double width = static_cast<double>(head_dim) / static_cast<double>(best->head_dim);
  const double isolated = 1e-6 * best->fixed_us + 1e-9 * (rows * best->row_ns + visited * best->pair_ns * width);
  return isolated * (bf16_step ? in_step_bf16 : in_step_f32);
}

std::optional<double> Target::gemm_shape_efficiency(const train::InstrInfo& g, const std::string& out_dtype) const {
  auto log2_ratio = [](int64_t a, int64_t b) {
    return std::abs(std::log2(static_cast<double>(std::max<int64_t>(a, 1)) / static_cast<double>(std::max<int64_t>(b, 1))));
  };
  const GemmShapeRate* best = nullptr;
  double best_distance = 2.0 + 1e-9;  // within 4x over the dimensions together
  for (const GemmShapeRate& r : gemm_shapes) {
    if (r.dtype != g.dtype || r.trans_a != g.trans_a || r.trans_b != g.trans_b) continue;
    if (!r.out_dtype.empty() && !out_dtype.empty() && r.out_dtype != out_dtype) continue;
    const double d = log2_ratio(r.batch, g.batch) + log2_ratio(r.m, g.m) + log2_ratio(r.n, g.n) + log2_ratio(r.k, g.k);
    if (d < best_distance) best_distance = d, best = &r;
  }
  if (!best) return std::nullopt;
  return best->efficiency;
}

std::optional<double> GemmSizeModel::alone(const std::string& dtype, const std::string& out_dtype, bool trans_a,
                                           bool trans_b, double flops) const {
  // (log2 FLOPs, efficiency) of the products with these dtypes, in its layout when it has any.
  std::vector<std::pair<double, double>> curve;
  for (const bool same_layout : {true, false}) {
    for (const GemmShapeRate& r : products) {
      if (r.dtype != dtype || (!out_dtype.empty() && !r.out_dtype.empty() && r.out_dtype != out_dtype)) continue;
      if (same_layout && (r.trans_a != trans_a || r.trans_b != trans_b)) continue;
      curve.push_back({std::log2(r.flops()), r.efficiency});
    }
    if (!curve.empty()) break;
  }
  if (curve.empty()) return std::nullopt;
  std::sort(curve.begin(), curve.end());
  const double x = std::log2(std::max(flops, 1.0));
  if (x <= curve.front().first) return curve.front().second;
  if (x >= curve.back().first) return curve.back().second;
  for (size_t i = 1; i < curve.size(); ++i) {
    const auto [x0, e0] = curve[i - 1];
    const auto [x1, e1] = curve[i];
    if (x > x1) continue;
    return x1 > x0 ? e0 + (e1 - e0) * (x - x0) / (x1 - x0) : e1;
  }
  return curve.back().second;
}

std::optional<double> Target::large_gemm_efficiency(const train::InstrInfo& g, const std::string& out_dtype) const {
  if (gemm_sizes.empty()) return std::nullopt;
  for (const GemmShapeRate& r : gemm_shapes) {
    if (r.dtype == g.dtype && r.flops() >= g.flops) return std::nullopt;  // within the step's own sizes
  }
  const std::optional<double> alone = gemm_sizes.alone(g.dtype, out_dtype, g.trans_a, g.trans_b, g.flops);
  if (!alone) return std::nullopt;
  return *alone / gemm_sizes.in_step(g.dtype);
}

Result<Target> parse_target(const std::string& yaml_text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return invalid_argument("{}: not YAML: {}", where, e.msg);
  }
  if (!root.IsMap()) return invalid_argument("{}: a target file is a YAML mapping", where);
  static const std::vector<std::string> kKeys = {
      "name",    "description",        "sources",          "peak_tflops",         "memory",
      "links",   "devices_per_node",   "kernels",          "kernels_bf16",        "host_us_per_kernel",
      "collectives_overlap", "collective_in_step", "collective_wait", "attention", "gemm_shapes",
      "gemm_sizes", "calibrated", "xla_gpu"};  // xla_gpu: for ahead-of-time compiles (backend/pjrt/aot_target.h)
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
      return invalid_argument("{}: unknown key '{}' (accepted: {})", where, key, fmt::join(kKeys, ", "));
    }
  }
  Target t;
  KILN_ASSIGN_OR_RETURN(t.name, text(root, "name", where, ""));
  KILN_ASSIGN_OR_RETURN(t.description, text(root, "description", where, ""));
  const YAML::Node sources = root["sources"];
  if (!sources || !sources.IsSequence() || sources.size() == 0) {
    return invalid_argument("{}: sources must list where every figure comes from", where);
  }
  for (const auto& s : sources) t.sources.push_back(s.as<std::string>());
  const YAML::Node peak = root["peak_tflops"];
  if (!peak || !peak.IsMap()) return invalid_argument("{}: missing peak_tflops (bfloat16, float32)", where);
  KILN_ASSIGN_OR_RETURN(t.peak_tflops_bf16, number(peak, "bfloat16", where, "peak_tflops."));
  KILN_ASSIGN_OR_RETURN(t.peak_tflops_f32, number(peak, "float32", where, "peak_tflops."));
  const YAML::Node mem = root["memory"];
  if (!mem || !mem.IsMap()) return invalid_argument("{}: missing memory (capacity_gib, bandwidth_gbs)", where);
  KILN_ASSIGN_OR_RETURN(t.memory_gib, number(mem, "capacity_gib", where, "memory."));
  KILN_ASSIGN_OR_RETURN(t.memory_bandwidth_gbs, number(mem, "bandwidth_gbs", where, "memory."));
  const YAML::Node links = root["links"];
  if (!links || !links.IsMap()) return invalid_argument("{}: missing links (intra, inter)", where);
  KILN_ASSIGN_OR_RETURN(t.intra, link(links, "intra", where));
  KILN_ASSIGN_OR_RETURN(t.inter, link(links, "inter", where));
  KILN_ASSIGN_OR_RETURN(double per_node, number(root, "devices_per_node", where, ""));
  if (per_node != static_cast<double>(static_cast<int64_t>(per_node))) {
    return invalid_argument("{}: devices_per_node = {} must be a whole number", where, per_node);
  }
  t.devices_per_node = static_cast<int64_t>(per_node);
  const YAML::Node kernels = root["kernels"];
  if (!kernels || !kernels.IsMap()) {
    return invalid_argument("{}: missing kernels (gemm, grouped_matmul, attention, fused, other)", where);
  }
  for (train::KernelKind kind : kKernelClasses) {
    const std::string key = kernel_class_key(kind);
    const YAML::Node k = kernels[key];
    if (!k || !k.IsMap()) return invalid_argument("{}: missing kernels.{} (efficiency, fixed_us)", where, key);
    KernelRate& r = t.rate(kind);
    KILN_ASSIGN_OR_RETURN(r.efficiency, number(k, "efficiency", where, "kernels." + key + "."));
    KILN_ASSIGN_OR_RETURN(r.fixed_us, number(k, "fixed_us", where, "kernels." + key + ".", true));
    KILN_RETURN_IF_ERROR(fixed_by_opcode(k, where, "kernels." + key + ".", r));
    KILN_RETURN_IF_ERROR(efficiency_by_signature(k, where, "kernels." + key + ".", r));
  }
  if (const YAML::Node bf16 = root["kernels_bf16"]) {
    if (!bf16.IsMap()) return invalid_argument("{}: kernels_bf16 is a map like kernels", where);
    t.bf16_rates = true;
    for (train::KernelKind kind : kKernelClasses) {
      const std::string key = kernel_class_key(kind);
      const YAML::Node k = bf16[key];
      if (!k || !k.IsMap()) return invalid_argument("{}: missing kernels_bf16.{} (efficiency, fixed_us)", where, key);
      KernelRate& r = t.kernels_bf16[static_cast<int>(kind)];
      KILN_ASSIGN_OR_RETURN(r.efficiency, number(k, "efficiency", where, "kernels_bf16." + key + "."));
      KILN_ASSIGN_OR_RETURN(r.fixed_us, number(k, "fixed_us", where, "kernels_bf16." + key + ".", true));
      KILN_RETURN_IF_ERROR(fixed_by_opcode(k, where, "kernels_bf16." + key + ".", r));
      KILN_RETURN_IF_ERROR(efficiency_by_signature(k, where, "kernels_bf16." + key + ".", r));
    }
  }
  KILN_ASSIGN_OR_RETURN(t.host_us_per_kernel, number(root, "host_us_per_kernel", where, "", true));
  if (const YAML::Node overlap = root["collectives_overlap"]) {
    try {
      t.collectives_overlap = overlap.as<bool>();
    } catch (const YAML::Exception&) {
      return invalid_argument("{}: collectives_overlap must be true or false", where);
    }
  }
  KILN_RETURN_IF_ERROR(
      per_dtype(root, "collective_in_step", where, false, t.collective_in_step_f32, t.collective_in_step_bf16));
  KILN_RETURN_IF_ERROR(per_dtype(root, "collective_wait", where, true, t.collective_wait_f32, t.collective_wait_bf16));
  if (const YAML::Node a = root["attention"]) {
    KILN_ASSIGN_OR_RETURN(t.attention, attention_model(a, where));
  }
  if (const YAML::Node shapes = root["gemm_shapes"]) {
    if (!shapes.IsSequence()) return invalid_argument("{}: gemm_shapes is a list", where);
    for (size_t i = 0; i < shapes.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(GemmShapeRate r, gemm_shape(shapes[i], where, fmt::format("gemm_shapes[{}].", i)));
      t.gemm_shapes.push_back(r);
    }
  }
  if (const YAML::Node sizes = root["gemm_sizes"]) {
    if (!sizes.IsMap()) return invalid_argument("{}: gemm_sizes is a map (in_step, products)", where);
    if (!sizes["in_step"]) return invalid_argument("{}: missing gemm_sizes.in_step (float32, bfloat16)", where);
    KILN_RETURN_IF_ERROR(per_dtype(sizes, "in_step", where, false, t.gemm_sizes.in_step_f32, t.gemm_sizes.in_step_bf16,
                                   "gemm_sizes."));
    const YAML::Node products = sizes["products"];
    if (!products || !products.IsSequence() || products.size() == 0) {
      return invalid_argument("{}: gemm_sizes.products must list the swept GEMMs", where);
    }
    for (size_t i = 0; i < products.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(GemmShapeRate r, gemm_shape(products[i], where, fmt::format("gemm_sizes.products[{}].", i)));
      t.gemm_sizes.products.push_back(r);
    }
  }
  if (root["calibrated"]) t.calibrated = root["calibrated"].as<std::string>();
  return t;
}

namespace {

// One kernel class's rate as a flow map: {efficiency, fixed_us[, fixed_us_by_opcode][,
// efficiency_by_signature]}.
void emit_rate(YAML::Emitter& out, const KernelRate& r) {
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "efficiency" << YAML::Value << r.efficiency << YAML::Key
      << "fixed_us" << YAML::Value << r.fixed_us;
  if (!r.fixed_us_by_opcode.empty()) {
    out << YAML::Key << "fixed_us_by_opcode" << YAML::Value << YAML::BeginMap;
    for (const auto& [opcode, us] : r.fixed_us_by_opcode) out << YAML::Key << opcode << YAML::Value << us;
    out << YAML::EndMap;
  }
  if (!r.efficiency_by_signature.empty()) {
    out << YAML::Key << "efficiency_by_signature" << YAML::Value << YAML::BeginMap;
    for (const auto& [signature, e] : r.efficiency_by_signature) out << YAML::Key << signature << YAML::Value << e;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

}  // namespace

std::string target_to_yaml(const Target& t) {
  YAML::Emitter out;
  out.SetDoublePrecision(6);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << t.name;
  out << YAML::Key << "description" << YAML::Value << t.description;
  if (!t.calibrated.empty()) out << YAML::Key << "calibrated" << YAML::Value << t.calibrated;
  out << YAML::Key << "sources" << YAML::Value << YAML::BeginSeq;
  for (const std::string& s : t.sources) out << s;
  out << YAML::EndSeq;
  out << YAML::Key << "peak_tflops" << YAML::Value << YAML::BeginMap << YAML::Key << "bfloat16" << YAML::Value
      << t.peak_tflops_bf16 << YAML::Key << "float32" << YAML::Value << t.peak_tflops_f32 << YAML::EndMap;
  out << YAML::Key << "memory" << YAML::Value << YAML::BeginMap << YAML::Key << "capacity_gib" << YAML::Value
      << t.memory_gib << YAML::Key << "bandwidth_gbs" << YAML::Value << t.memory_bandwidth_gbs << YAML::EndMap;
  out << YAML::Key << "links" << YAML::Value << YAML::BeginMap;
  for (const auto& [key, l] : {std::pair<const char*, const Link*>{"intra", &t.intra}, {"inter", &t.inter}}) {
    out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value
        << l->name << YAML::Key << "bandwidth_gbs" << YAML::Value << l->bandwidth_gbs << YAML::Key << "latency_us"
        << YAML::Value << l->latency_us << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "devices_per_node" << YAML::Value << t.devices_per_node;
  out << YAML::Key << "kernels" << YAML::Value << YAML::BeginMap;
  for (train::KernelKind kind : kKernelClasses) {
    out << YAML::Key << kernel_class_key(kind) << YAML::Value;
    emit_rate(out, t.rate(kind));
  }
  out << YAML::EndMap;
  if (t.bf16_rates) {
    out << YAML::Key << "kernels_bf16" << YAML::Value << YAML::BeginMap;
    for (train::KernelKind kind : kKernelClasses) {
      const KernelRate& r = t.kernels_bf16[static_cast<int>(kind)];
      out << YAML::Key << kernel_class_key(kind) << YAML::Value;
      emit_rate(out, r);
    }
    out << YAML::EndMap;
  }
  out << YAML::Key << "host_us_per_kernel" << YAML::Value << t.host_us_per_kernel;
  if (!t.collectives_overlap) out << YAML::Key << "collectives_overlap" << YAML::Value << false;
  if (t.collective_in_step_f32 != 1 || t.collective_in_step_bf16 != 1) {
    write_per_dtype(out, "collective_in_step", t.collective_in_step_f32, t.collective_in_step_bf16);
  }
  if (t.collective_wait_f32 != 0 || t.collective_wait_bf16 != 0) {
    write_per_dtype(out, "collective_wait", t.collective_wait_f32, t.collective_wait_bf16);
  }
  if (!t.attention.empty()) {
    const AttentionModel& m = t.attention;
    out << YAML::Key << "attention" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "tile" << YAML::Value << YAML::Flow << YAML::BeginSeq << m.tile_q << m.tile_k << YAML::EndSeq;
    out << YAML::Key << "in_step" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "float32"
        << YAML::Value << m.in_step_f32 << YAML::Key << "bfloat16" << YAML::Value << m.in_step_bf16 << YAML::EndMap;
    out << YAML::Key << "rates" << YAML::Value << YAML::BeginSeq;
    for (const AttentionRate& r : m.rates) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "op" << YAML::Value << r.op << YAML::Key << "dtype"
          << YAML::Value << (r.bf16 ? "bfloat16" : "float32") << YAML::Key << "head_dim" << YAML::Value << r.head_dim
          << YAML::Key << "fixed_us" << YAML::Value << r.fixed_us << YAML::Key << "row_ns" << YAML::Value << r.row_ns
          << YAML::Key << "pair_ns" << YAML::Value << r.pair_ns << YAML::EndMap;
    }
    out << YAML::EndSeq << YAML::EndMap;
  }
  if (!t.gemm_shapes.empty()) {
    out << YAML::Key << "gemm_shapes" << YAML::Value << YAML::BeginSeq;
    for (const GemmShapeRate& r : t.gemm_shapes) write_gemm_shape(out, r);
    out << YAML::EndSeq;
  }
  if (!t.gemm_sizes.empty()) {
    out << YAML::Key << "gemm_sizes" << YAML::Value << YAML::BeginMap;
    write_per_dtype(out, "in_step", t.gemm_sizes.in_step_f32, t.gemm_sizes.in_step_bf16);
    out << YAML::Key << "products" << YAML::Value << YAML::BeginSeq;
    for (const GemmShapeRate& r : t.gemm_sizes.products) write_gemm_shape(out, r);
    out << YAML::EndSeq << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string targets_dir() {
  const std::string configs = config::find_configs_dir();
  return configs.empty() ? std::string() : (fs::path(configs) / "targets").string();
}

std::string calibrated_cpu_path(int threads_per_device) {
  return (fs::path(backend::default_cache_dir()) / "targets" / fmt::format("cpu-{}t.yml", threads_per_device))
      .string();
}

std::vector<std::string> available_targets() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(targets_dir(), ec)) {
    if (e.path().extension() == ".yml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  names.insert(names.begin(), "cpu");
  return names;
}

Result<Target> load_target(const std::string& name, int threads_per_device) {
  std::string path;
  if (name == "cpu") {
    path = calibrated_cpu_path(threads_per_device);
    if (!fs::exists(path)) {
      return not_found(
          "target=cpu: this machine is not calibrated for {} thread(s) per device ({} is missing); run `kiln plan "
          "--calibrate` with the same mesh first",
          threads_per_device, path);
    }
  } else if (name.size() > 4 && name.substr(name.size() - 4) == ".yml") {
    path = name;
  } else {
    path = (fs::path(targets_dir()) / (name + ".yml")).string();
    if (name.find('/') != std::string::npos || !fs::exists(path)) {
      return invalid_argument("unknown target '{}' (accepted: {}, or a path to a .yml target file)", name,
                              fmt::join(available_targets(), ", "));
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot read target file {}", path);
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_target(buf.str(), path);
}

double Target::wait_basis(double compute_s) {
  return compute_s > 0 ? kWaitReferenceS * std::pow(compute_s / kWaitReferenceS, kWaitExponent) : 0;
}

}  // namespace kiln::plan
