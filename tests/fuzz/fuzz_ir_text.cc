// The IR text format (kiln ir-run / ir-opt FILE.ir): parsed; a module that parses must print
// to text that parses again to the same text; one that verifies (structure and every op's
// rule) runs on the reference interpreter when its values are small enough to be a test.
#include <cstdlib>

#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/registry.h"
#include "tests/fuzz/fuzz_files.h"

namespace {

// The interpreter runs a module only when no value is larger than this many elements and
// there are few instructions: the fuzzer looks for wrong reads, not for big programs.
constexpr int64_t kMaxElements = 1 << 12;
constexpr int64_t kMaxInstructions = 64;

bool small_enough(const kiln::ir::Module& module) {
  for (const auto& computation : module.computations()) {
    if (computation->size() > kMaxInstructions) return false;
    for (const auto& instr : computation->instructions()) {
      if (instr->shape().is_tuple()) {
        for (const kiln::ir::Shape& e : instr->shape().elements()) {
          if (e.is_tuple() || e.num_elements() > kMaxElements) return false;
        }
      } else if (instr->shape().num_elements() > kMaxElements) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const unsigned char* data, size_t size) {
  using namespace kiln;
  Result<std::unique_ptr<ir::Module>> module = ir::parse_module({reinterpret_cast<const char*>(data), size});
  if (!module.ok()) return 0;
  const std::string printed = ir::print_module(**module);
  Result<std::unique_ptr<ir::Module>> again = ir::parse_module(printed);
  if (!again.ok() || ir::print_module(**again) != printed) {
    std::fprintf(stderr, "printed module does not round-trip:\n%s\n", printed.c_str());
    std::abort();
  }
  if (!ops::verify(**module).ok() || !small_enough(**module)) return 0;
  const ir::Computation* entry = (*module)->entry();
  std::vector<ir::Literal> args;
  for (const ir::Instr* p : entry->params()) args.emplace_back(p->shape());
  (void)interp::run(**module, args);
  return 0;
}
