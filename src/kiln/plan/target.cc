#include "kiln/plan/target.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "kiln/backend/cpu/codegen/compile_cache.h"
#include "kiln/config/config.h"

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

}  // namespace

Result<Target> parse_target(const std::string& yaml_text, const std::string& where) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return invalid_argument("{}: not YAML: {}", where, e.msg);
  }
  if (!root.IsMap()) return invalid_argument("{}: a target file is a YAML mapping", where);
  static const std::vector<std::string> kKeys = {"name",  "description", "sources", "peak_tflops",
                                                 "memory", "links",      "devices_per_node", "kernels",
                                                 "kernels_bf16", "host_us_per_kernel", "calibrated"};
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
    }
  }
  KILN_ASSIGN_OR_RETURN(t.host_us_per_kernel, number(root, "host_us_per_kernel", where, "", true));
  if (root["calibrated"]) t.calibrated = root["calibrated"].as<std::string>();
  return t;
}

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
    out << YAML::Key << kernel_class_key(kind) << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
        << "efficiency" << YAML::Value << t.rate(kind).efficiency << YAML::Key << "fixed_us" << YAML::Value
        << t.rate(kind).fixed_us << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (t.bf16_rates) {
    out << YAML::Key << "kernels_bf16" << YAML::Value << YAML::BeginMap;
    for (train::KernelKind kind : kKernelClasses) {
      const KernelRate& r = t.kernels_bf16[static_cast<int>(kind)];
      out << YAML::Key << kernel_class_key(kind) << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
          << "efficiency" << YAML::Value << r.efficiency << YAML::Key << "fixed_us" << YAML::Value << r.fixed_us
          << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  out << YAML::Key << "host_us_per_kernel" << YAML::Value << t.host_us_per_kernel;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string targets_dir() {
  const std::string configs = config::find_configs_dir();
  return configs.empty() ? std::string() : (fs::path(configs) / "targets").string();
}

std::string calibrated_cpu_path(int threads_per_device) {
  return (fs::path(backend::cpu::default_cache_dir()) / "targets" / fmt::format("cpu-{}t.yml", threads_per_device))
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

}  // namespace kiln::plan
