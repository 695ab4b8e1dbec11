// kiln config [CONFIG.yml] [key=value ...]: prints the config a run would use, the way
// MaxText logs its resolved config at start-up, so a user can check it before running.
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "kiln/config/config.h"

namespace kiln::app {

std::function<int()> add_config_command(CLI::App& cmd) {
  struct Options {
    std::vector<std::string> settings;
    bool no_derived = false;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("settings", opts->settings,
                 "An optional CONFIG.yml first, then key=value overrides (e.g. "
                 "model_name=gpt-oss-20b ici_fsdp_parallelism=2)")
      ->type_name("[CONFIG.yml] [key=value ...]");
  cmd.add_flag("--no-derived", opts->no_derived,
               "Print only the keys, without the derived: section");
  std::string configs_dir = config::find_configs_dir();
  if (!configs_dir.empty()) {
    cmd.footer(fmt::format("Models (model_name=...): {}\nKeys and defaults: {}/base.yml",
                           fmt::join(config::available_models(configs_dir), ", "), configs_dir));
  }
  return [opts]() -> int {
    Result<config::Config> cfg = config::load(opts->settings);
    if (!cfg.ok()) return report_error(cfg.status());
    std::fputs(cfg->to_yaml(!opts->no_derived).c_str(), stdout);
    return kExitOk;
  };
}

}  // namespace kiln::app
