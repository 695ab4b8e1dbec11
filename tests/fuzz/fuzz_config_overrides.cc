// Command-line overrides: each line of the input is one `key=value` argument of
// `kiln train key=value ...`, applied over base.yml as the command applies them.
#include <string_view>

#include "kiln/config/config.h"
#include "tests/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  static const std::string configs = kiln::config::find_configs_dir();
  kiln::config::LoadOptions options;
  options.configs_dir = configs;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (!rest.empty() && options.overrides.size() < 64) {
    const size_t eol = rest.find('\n');
    options.overrides.emplace_back(rest.substr(0, eol));
    rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
  }
  kiln::Result<kiln::config::Config> config = kiln::config::load(options);
  if (config.ok()) (void)config->to_yaml();
  return 0;
}
