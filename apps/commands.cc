#include "command.h"

namespace kiln::app {

// Each subcommand's entry point, defined in its cmd_<name>.cc.
std::function<int()> add_config_command(CLI::App& cmd);

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"config", "Print the resolved config (base.yml <- CONFIG.yml <- model <- key=value) as YAML",
       add_config_command},
  };
  return kCommands;
}

}  // namespace kiln::app
