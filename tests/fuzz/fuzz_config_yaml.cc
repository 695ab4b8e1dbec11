// A CONFIG.yml as `kiln train CONFIG.yml` reads it: over the project's base.yml and model
// files, with every key typed, validated and the derived values (mesh, batch) computed.
#include "kiln/config/config.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  static const std::string configs = kiln::config::find_configs_dir();
  const std::string dir = kiln::fuzz::fresh_dir("config_yaml");
  kiln::config::LoadOptions options;
  options.config_path = kiln::fuzz::write_file(dir, "fuzz.yml", {reinterpret_cast<const char*>(data), size});
  options.configs_dir = configs;
  kiln::Result<kiln::config::Config> config = kiln::config::load(options);
  if (config.ok()) (void)config->to_yaml();
  return 0;
}
