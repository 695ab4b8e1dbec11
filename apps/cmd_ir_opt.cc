// kiln ir-opt FILE.ir --passes=a,b [--verify_each] [--dump_ir=DIR]: runs passes on an IR file
// and prints the result, so any dump is a reproducible test case for a pass:
//   kiln ir-opt step.ir --passes=dce,cse,simplify
//   kiln ir-opt step.ir --passes="dce,fix(simplify,cse,dce)" --verify_each --dump_ir=/tmp/d
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/passes/registry.h"

namespace kiln::app {

// Reads and verifies an IR file ("-": standard input). Errors name the file:
//   step.ir:line 4, column 17: unknown operand %x.9
// Shared with cmd_ir_run.cc.
Result<std::unique_ptr<ir::Module>> load_ir_file(const std::string& path) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) return not_found("cannot open IR file {}", path);
    text << in.rdbuf();
  }
  auto module = ir::parse_module(text.str());
  if (!module.ok()) return Status(module.status().code(), path + ":" + module.status().message());
  Status verified = ops::verify(**module);
  if (!verified.ok()) return verified.with_context(path);
  return std::move(module).value();
}

std::function<int()> add_ir_opt_command(CLI::App& cmd) {
  struct Options {
    std::string file;
    std::string passes = "default";
    bool verify_each = false;
    std::string dump_ir;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("file", opts->file, "The IR file to optimize ('-' reads standard input)")
      ->required()
      ->type_name("FILE.ir");
  cmd.add_option("--passes", opts->passes,
                 "Comma-separated passes to run in order; fix(a,b) repeats a group until nothing changes; "
                 "'default' is the compiler's pipeline")
      ->type_name("a,b,...")
      ->capture_default_str();
  cmd.add_flag("--verify_each", opts->verify_each, "Verify the module after every pass");
  cmd.add_option("--dump_ir", opts->dump_ir, "Write the module before and after every pass to DIR/NN_<pass>.ir")
      ->type_name("DIR");
  std::string footer = "Passes:\n";
  for (const passes::PassInfo& info : passes::registered_passes()) {
    footer += fmt::format("  {:<10} {}\n", info.name, info.summary);
  }
  footer += fmt::format("  {:<10} {}\n", "default", passes::default_pipeline().to_string());
  cmd.footer(footer);
  return [opts]() -> int {
    passes::PipelineOptions options;
    options.verify_each = options.verify_each || opts->verify_each;  // debug builds verify anyway
    options.dump_ir = opts->dump_ir;
    auto pipeline = passes::pipeline_from_spec(opts->passes, options);
    if (!pipeline.ok()) return report_error(pipeline.status().with_context("--passes"));
    auto module = load_ir_file(opts->file);
    if (!module.ok()) return report_error(module.status());
    auto changed = pipeline->run(**module);
    if (!changed.ok()) return report_error(changed.status().with_context(opts->file));
    std::fputs(ir::print_module(**module).c_str(), stdout);
    return kExitOk;
  };
}

}  // namespace kiln::app
