#include "kiln/backend/pjrt/aot_compile.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <regex>

#include "kiln/backend/pjrt/compile_options_proto.h"
#include "kiln/backend/pjrt/hlo_census.h"

namespace kiln::backend::pjrt {

namespace {

// Destroys what PJRT made when the scope ends, whatever path leaves it.
struct TopologyHandle {
  const PJRT_Api* api = nullptr;
  PJRT_TopologyDescription* topology = nullptr;
  ~TopologyHandle() {
    if (topology == nullptr) return;
    PJRT_TopologyDescription_Destroy_Args args{};
    args.struct_size = PJRT_TopologyDescription_Destroy_Args_STRUCT_SIZE;
    args.topology = topology;
    (void)KILN_PJRT_CALL(*api, PJRT_TopologyDescription_Destroy, &args);
  }
};

struct ExecutableHandle {
  const PJRT_Api* api = nullptr;
  PJRT_Executable* executable = nullptr;
  ~ExecutableHandle() {
    if (executable == nullptr) return;
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable;
    (void)KILN_PJRT_CALL(*api, PJRT_Executable_Destroy, &args);
  }
};

std::vector<PJRT_NamedValue> named_values(const std::vector<NamedOption>& options) {
  std::vector<PJRT_NamedValue> out;
  for (const NamedOption& o : options) {
    PJRT_NamedValue v{};
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = o.name.data();
    v.name_size = o.name.size();
    if (const auto* s = std::get_if<std::string>(&o.value)) {
      v.type = PJRT_NamedValue_kString;
      v.string_value = s->data();
      v.value_size = s->size();
    } else {
      v.type = PJRT_NamedValue_kInt64;
      v.int64_value = std::get<int64_t>(o.value);
      v.value_size = 1;
    }
    out.push_back(v);
  }
  return out;
}

Result<std::string> platform_of(const PJRT_Api& api, const PJRT_TopologyDescription* topology) {
  PJRT_TopologyDescription_PlatformName_Args args{};
  args.struct_size = PJRT_TopologyDescription_PlatformName_Args_STRUCT_SIZE;
  args.topology = topology;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_TopologyDescription_PlatformName, &args));
  return std::string(args.platform_name, args.platform_name_size);
}

// The optimized program: asked once for its size, then into a buffer of that size.
Result<std::string> optimized_program(const PJRT_Api& api, PJRT_Executable* executable) {
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  PJRT_Executable_OptimizedProgram_Args args{};
  args.struct_size = PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE;
  args.executable = executable;
  args.program = &program;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Executable_OptimizedProgram, &args));
  std::string code(program.code_size, '\0');
  program.code = code.data();
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Executable_OptimizedProgram, &args));
  const std::string_view format(program.format, program.format_size);
  if (format == "hlo") return code;
  if (format == "hlo_with_config") return hlo_module_of(code);
  return unimplemented("pjrt: the optimized program came as '{}', not a serialized HLO module", format);
}

}  // namespace

Result<const Plugin*> load_for_topology(const std::string& path, const TopologySpec& topology) {
  setenv("TF_CPP_MIN_LOG_LEVEL", "1", /*overwrite=*/0);
  for (const auto& [name, value] : topology.environment) setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
  return Plugin::load(path);
}

Result<AotExecutable> compile_for_topology(const Plugin& plugin, const TopologySpec& spec,
                                           std::string_view stablehlo_text, int num_replicas) {
  const PJRT_Api& api = plugin.api();
  for (size_t offset : {offsetof(PJRT_Api, PJRT_TopologyDescription_Create), offsetof(PJRT_Api, PJRT_Compile),
                        offsetof(PJRT_Api, PJRT_Executable_OptimizedProgram)}) {
    if (!plugin.has(offset)) {
      return unimplemented("pjrt: {} (PJRT C API {}) cannot compile without its hardware", plugin.path(),
                           plugin.version());
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<PJRT_NamedValue> options = named_values(spec.options);
  PJRT_TopologyDescription_Create_Args create{};
  create.struct_size = PJRT_TopologyDescription_Create_Args_STRUCT_SIZE;
  create.topology_name = spec.topology_name.data();
  create.topology_name_size = spec.topology_name.size();
  create.create_options = options.data();
  create.num_options = options.size();
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_TopologyDescription_Create, &create));
  TopologyHandle topology{&api, create.topology};

  AotExecutable out;
  KILN_ASSIGN_OR_RETURN(out.platform, platform_of(api, topology.topology));
  // No device assignment: the compiler takes the topology's first num_replicas devices.
  const std::string compile_options = compile_options_proto(num_replicas, /*num_partitions=*/1);
  std::string code(stablehlo_text);
  PJRT_Program program = stablehlo_program(code);
  PJRT_Compile_Args args{};
  args.struct_size = PJRT_Compile_Args_STRUCT_SIZE;
  args.topology = topology.topology;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  args.client = nullptr;
  KILN_RETURN_IF_ERROR(KILN_PJRT_CALL(api, PJRT_Compile, &args));
  ExecutableHandle executable{&api, args.executable};
  out.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  KILN_ASSIGN_OR_RETURN(out.memory, executable_memory_stats(plugin, executable.executable));
  KILN_ASSIGN_OR_RETURN(out.optimized_hlo, optimized_program(api, executable.executable));
  return out;
}

std::optional<double> compile_time_oom_gib(std::string_view message) {
  if (message.find("CompileTimeHbmOom") == std::string_view::npos) return std::nullopt;
  static const std::regex kNeeded(R"(HLO temporaries \(([0-9.]+)G\))");
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(message.begin(), message.end(), m, kNeeded)) return std::nullopt;
  return std::stod(m[1].str());
}

}  // namespace kiln::backend::pjrt
