#include "kiln/backend/pjrt/aot_target.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace kiln::backend::pjrt {

namespace {

Result<YAML::Node> load_yaml(const std::string& text, const std::string& what) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return invalid_argument("{}: {}", what, e.what());
  }
}

template <typename T>
Result<T> field(const YAML::Node& node, const std::string& key, const std::string& where) {
  if (!node[key]) return invalid_argument("{}: missing {}", where, key);
  try {
    return node[key].as<T>();
  } catch (const YAML::Exception&) {
    return invalid_argument("{}: {} is not a {}", where, key, std::is_same_v<T, std::string> ? "string" : "number");
  }
}

}  // namespace

Result<std::string> gpu_target_config(const std::string& target_file_text) {
  KILN_ASSIGN_OR_RETURN(YAML::Node root, load_yaml(target_file_text, "target file"));
  const YAML::Node gpu = root["xla_gpu"];
  const std::string where = "target file, xla_gpu";
  if (!gpu || !gpu.IsMap()) return invalid_argument("target file: no xla_gpu block (XLA's description of the GPU)");
  KILN_ASSIGN_OR_RETURN(std::string name, field<std::string>(gpu, "name", where));
  KILN_ASSIGN_OR_RETURN(std::string cc, field<std::string>(gpu, "compute_capability", where));
  int major = 0, minor = 0;
  if (std::sscanf(cc.c_str(), "%d.%d", &major, &minor) != 2) {
    return invalid_argument("{}: compute_capability '{}' is not MAJOR.MINOR", where, cc);
  }
  KILN_ASSIGN_OR_RETURN(int64_t cores, field<int64_t>(gpu, "core_count", where));
  KILN_ASSIGN_OR_RETURN(int64_t fpus, field<int64_t>(gpu, "fpus_per_core", where));
  KILN_ASSIGN_OR_RETURN(double clock, field<double>(gpu, "clock_rate_ghz", where));
  KILN_ASSIGN_OR_RETURN(int64_t memory, field<int64_t>(gpu, "device_memory_bytes", where));
  KILN_ASSIGN_OR_RETURN(int64_t bandwidth, field<int64_t>(gpu, "memory_bandwidth_bytes_per_s", where));
  KILN_ASSIGN_OR_RETURN(int64_t l2, field<int64_t>(gpu, "l2_cache_bytes", where));
  KILN_ASSIGN_OR_RETURN(int64_t smem_core, field<int64_t>(gpu, "shared_memory_per_core", where));
  KILN_ASSIGN_OR_RETURN(int64_t smem_optin, field<int64_t>(gpu, "shared_memory_per_block_optin", where));
  KILN_ASSIGN_OR_RETURN(int64_t pcie, field<int64_t>(gpu, "pcie_bandwidth_bytes_per_s", where));
  KILN_ASSIGN_OR_RETURN(std::string dnn, field<std::string>(gpu, "dnn_version", where));
  int dnn_major = 0, dnn_minor = 0, dnn_patch = 0;
  std::sscanf(dnn.c_str(), "%d.%d.%d", &dnn_major, &dnn_minor, &dnn_patch);

  // The launch limits (threads, blocks, registers, the 48 KiB default shared memory per block)
  // are CUDA's for every compute capability since 7.0.
  std::string t;
  t += "gpu_device_info {\n";
  t += "  threads_per_block_limit: 1024\n  threads_per_warp: 32\n  shared_memory_per_block: 49152\n";
  t += fmt::format("  shared_memory_per_core: {}\n  threads_per_core_limit: 2048\n  core_count: {}\n", smem_core, cores);
  t += fmt::format("  fpus_per_core: {}\n", fpus);
  t += "  block_dim_limit_x: 2147483647\n  block_dim_limit_y: 65535\n  block_dim_limit_z: 65535\n";
  t += fmt::format("  memory_bandwidth: {}\n  l2_cache_size: {}\n  clock_rate_ghz: {}\n", bandwidth, l2, clock);
  t += fmt::format("  device_memory_size: {}\n  shared_memory_per_block_optin: {}\n", memory, smem_optin);
  t += fmt::format("  cuda_compute_capability {{ major: {} minor: {} }}\n", major, minor);
  t += "  registers_per_core_limit: 65536\n  registers_per_block_limit: 65536\n";
  t += "  thread_dim_limit_x: 1024\n  thread_dim_limit_y: 1024\n  thread_dim_limit_z: 64\n";
  t += "  device_vendor: \"NVIDIA Corporation\"\n";
  t += fmt::format("  platform_version: \"Compute Capability {}.{}\"\n", major, minor);
  t += fmt::format("  device_address_bits: 64\n  pcie_bandwidth: {}\n  ecc_enabled: true\n", pcie);
  t += fmt::format("  name: \"{}\"\n}}\n", name);
  t += "platform_name: \"CUDA\"\n";
  t += fmt::format("dnn_version_info {{ major: {} minor: {} patch: {} }}\n", dnn_major, dnn_minor, dnn_patch);
  t += fmt::format("device_description_str: \"{}\"\n", name);
  return t;
}

Result<AotTarget> aot_target(const config::CompileTopology& topology, const std::string& targets_dir) {
  const std::string path = fmt::format("{}/{}.yml", targets_dir, topology.target);
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("compile_topology={}: cannot read its hardware file {}", topology.name, path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  KILN_ASSIGN_OR_RETURN(YAML::Node root, load_yaml(text, path));

  AotTarget target;
  target.topology = topology;
  target.plugin = topology.platform;
  KILN_ASSIGN_OR_RETURN(target.description, field<std::string>(root, "description", path));
  KILN_ASSIGN_OR_RETURN(double capacity_gib, field<double>(root["memory"], "capacity_gib", path + ", memory"));
  target.capacity_bytes = capacity_gib * static_cast<double>(int64_t{1} << 30);
  KILN_ASSIGN_OR_RETURN(target.peak_bf16_tflops, field<double>(root["peak_tflops"], "bfloat16", path + ", peak_tflops"));

  if (topology.platform == "tpu") {
    target.spec.topology_name = topology.tpu_topology;
    // libtpu otherwise asks the cloud metadata server what it runs on, and fails after retries
    // off Google Cloud (spec/pjrt.md).
    // And libtpu lets one process at a time load it (a lock file in /tmp), which a compile
    // without a TPU does not need: two ahead-of-time compiles may run side by side.
    target.spec.environment = {{"TPU_SKIP_MDS_QUERY", "1"},
                               {"TPU_ACCELERATOR_TYPE", topology.name},
                               {"TPU_WORKER_ID", "0"},
                               {"TPU_WORKER_HOSTNAMES", "127.0.0.1"},
                               {"ALLOW_MULTIPLE_LIBTPU_LOAD", "1"}};
    return target;
  }
  KILN_ASSIGN_OR_RETURN(const int64_t per_node, field<int64_t>(root, "devices_per_node", path));
  const int64_t per_host = std::min(per_node, topology.devices);
  if (topology.devices % per_host != 0) {
    return invalid_argument("compile_topology={}: {} GPUs do not fill hosts of {}", topology.name, topology.devices,
                            per_node);
  }
  KILN_ASSIGN_OR_RETURN(std::string config_text, gpu_target_config(text));
  target.spec.options.push_back({"target_config", config_text});
  target.spec.options.push_back(
      {"topology", fmt::format("{}x{}x{}", topology.num_slices, topology.devices / per_host, per_host)});
  return target;
}

}  // namespace kiln::backend::pjrt
