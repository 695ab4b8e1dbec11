// The pieces every `kiln` subcommand shares: the exit-code policy, error reporting and the
// subcommand table. A subcommand lives in its own cmd_<name>.cc and is listed in
// commands.cc with one line.
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

#include "kiln/base/status.h"

namespace kiln::app {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (I/O, numerics, a bug)
inline constexpr int kExitUsage = 2;    // bad flags, arguments or config: nothing was run

// A subcommand. `add` declares its options and positionals on `cmd` (storage it binds to
// lives in the returned closure) and returns what main() runs once this subcommand has
// been parsed; the closure returns the exit code.
struct Command {
  const char* name;
  const char* summary;
  std::function<int()> (*add)(CLI::App& cmd);
};

// All subcommands, in the order `kiln --help` lists them.
const std::vector<Command>& commands();

// The exit code for a failed status: kExitUsage for bad input (invalid argument, a file or
// key not found), kExitFailure for everything else.
int exit_code_for(const Status& status);

// Prints the one-line "kiln: error: <message>" to stderr; returns exit_code_for(status).
int report_error(const Status& status);

}  // namespace kiln::app
