// kiln: the command-line entry point. Parses global flags, picks the subcommand from the
// table in commands.cc and maps every failure to the exit-code policy in command.h.
#include <cstdio>
#include <exception>
#include <utility>

#include "command.h"
#include "malloc_settings.h"
#include "kiln/base/logging.h"

namespace kiln::app {

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound: return kExitUsage;
    default: return kExitFailure;
  }
}

int report_error(const Status& status) {
  std::fprintf(stderr, "kiln: error: %s\n", status.message().c_str());
  return exit_code_for(status);
}

namespace {

int run(int argc, char** argv) {
  CLI::App app("Kiln: trains large language models from a MaxText-style config, compiling the "
               "whole training step into one optimised program.",
               "kiln");
  app.set_version_flag("--version", "kiln " KILN_VERSION);
  int verbosity = 0;
  app.add_option("--v", verbosity, "Log verbosity: show KILN_VLOG(n) messages for n <= N")
      ->type_name("N")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  // Lets global flags follow the subcommand too (`kiln config --v=2`); must be set before
  // the subcommands are added, which inherit it.
  app.fallthrough();

  std::vector<std::pair<CLI::App*, std::function<int()>>> runners;
  for (const Command& c : commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    runners.emplace_back(sub, c.add(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "kiln: error: %s (see kiln --help)\n", e.what());
    return kExitUsage;
  }
  if (app.count("--v")) set_verbosity(verbosity);
  for (auto& [sub, run_command] : runners) {
    if (sub->parsed()) return run_command();
  }
  return kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace
}  // namespace kiln::app

int main(int argc, char** argv) {
  kiln::app::reexec_with_hugepage_heap(argv);  // first: a tunable is read at process start
  kiln::app::fix_malloc_thresholds();
  try {
    return kiln::app::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln: error: unexpected failure: %s\n", e.what());
    return kiln::app::kExitFailure;
  }
}
