// kiln ir-run FILE.ir [--inputs=FILE] [--seed=N]: runs the entry computation with the
// reference interpreter and prints each output as `shape values`, one per line:
//   f32[2,3] {0.5, 1, -2, 3, 0.25, 7}
// Inputs are seeded random values (floats uniform in [-2, 2), integers in [0, 4), pred
// coin flips; the same seed gives the same inputs on every machine), or come from an
// inputs file with one literal per parameter, in parameter order, in that same format:
//   # comments and blank lines are skipped
//   f32[2,3] {1, 2, 3, 4, 5, 6}
//   s32[] 3
// so the outputs of one run (or --dump_inputs) can be fed to another.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "command.h"
#include "kiln/base/strings.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"

namespace kiln::app {

// Defined in cmd_ir_opt.cc.
Result<std::unique_ptr<ir::Module>> load_ir_file(const std::string& path);

namespace {

// Mersenne Twister output is fixed by the standard; the mapping to values is ours, so inputs
// do not depend on the standard library's distributions.
ir::Literal random_input(const ir::Shape& shape, std::mt19937_64& rng) {
  std::vector<double> values(shape.num_elements());
  ir::DType dtype = shape.dtype();
  for (double& v : values) {
    uint64_t bits = rng();
    if (dtype == ir::DType::kPred) {
      v = static_cast<double>(bits & 1);
    } else if (ir::is_integral(dtype)) {
      v = static_cast<double>(bits % 4);
    } else {
      v = -2.0 + 4.0 * (static_cast<double>(bits >> 11) * 0x1.0p-53);
    }
  }
  return ir::Literal(shape, std::move(values));
}

std::string literal_line(const ir::Literal& literal) {
  return literal.shape().to_string() + " " + literal.values_to_string();
}

// Tuple outputs (a root tuple is already split by interp::run) print one element per line.
void print_output(const ir::Literal& literal) {
  if (literal.shape().is_tuple()) {
    for (const ir::Literal& e : literal.elements()) print_output(e);
    return;
  }
  std::fputs((literal_line(literal) + "\n").c_str(), stdout);
}

Status line_error(const std::string& file, int line, size_t column, const std::string& message) {
  return invalid_argument("{}:line {}, column {}: {}", file, line, column + 1, message);
}

Result<double> parse_value(std::string_view text) {
  std::string t(trim(text));
  if (t == "nan" || t == "-nan") return std::nan("");
  if (t == "inf" || t == "+inf") return HUGE_VAL;
  if (t == "-inf") return -HUGE_VAL;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0') return invalid_argument("'{}' is not a number", t);
  return v;
}

// One line "f32[2,3] {1, 2, 3, 4, 5, 6}" or "s32[] 3".
Result<ir::Literal> parse_input_line(const std::string& file, int line_no, const std::string& line) {
  size_t start = line.find_first_not_of(" \t");
  size_t close = line.find(']', start);
  if (close == std::string::npos) return line_error(file, line_no, start, "expected a shape like f32[2,3]");
  auto shape = ir::parse_shape(std::string_view(line).substr(start, close + 1 - start));
  if (!shape.ok()) return line_error(file, line_no, start, shape.status().message());
  if (shape->is_tuple()) return line_error(file, line_no, start, "inputs are arrays, not tuples");
  std::string_view rest = std::string_view(line).substr(close + 1);
  size_t values_col = line.find_first_not_of(" \t", close + 1);
  if (values_col == std::string::npos) values_col = line.size();
  std::string_view body = trim(rest);
  std::vector<double> values;
  std::vector<std::string> items;
  if (!body.empty() && body.front() == '{') {
    if (body.back() != '}') return line_error(file, line_no, values_col, "missing '}' at the end of the values");
    std::string_view inner = trim(body.substr(1, body.size() - 2));
    if (!inner.empty()) items = split(inner, ',');
  } else if (!body.empty()) {
    items.emplace_back(body);
  }
  for (const std::string& item : items) {
    auto v = parse_value(item);
    if (!v.ok()) return line_error(file, line_no, values_col, v.status().message());
    values.push_back(*v);
  }
  if (static_cast<int64_t>(values.size()) != shape->num_elements()) {
    return line_error(file, line_no, values_col,
                      fmt::format("{} needs {} values, got {}", shape->to_string(), shape->num_elements(), values.size()));
  }
  return ir::Literal(*shape, std::move(values));
}

Result<std::vector<ir::Literal>> read_inputs(const std::string& file, const ir::Computation& entry) {
  std::ifstream in(file);
  if (!in) return not_found("cannot open inputs file {}", file);
  std::vector<ir::Literal> inputs;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string_view t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    KILN_ASSIGN_OR_RETURN(ir::Literal literal, parse_input_line(file, line_no, line));
    int i = static_cast<int>(inputs.size());
    if (i >= entry.num_params()) {
      return line_error(file, line_no, 0, fmt::format("more inputs than the {} parameters of @{}", entry.num_params(),
                                                      entry.name()));
    }
    const ir::Shape& want = entry.param(i)->shape();
    if (literal.shape() != want) {
      return line_error(file, line_no, 0, fmt::format("input {} is {} but parameter {} (%{}) is {}", i,
                                                      literal.shape().to_string(), i, entry.param(i)->id(),
                                                      want.to_string()));
    }
    inputs.push_back(std::move(literal));
  }
  if (static_cast<int>(inputs.size()) != entry.num_params()) {
    return invalid_argument("{}: {} inputs for the {} parameters of @{}", file, inputs.size(), entry.num_params(),
                            entry.name());
  }
  return inputs;
}

}  // namespace

std::function<int()> add_ir_run_command(CLI::App& cmd) {
  struct Options {
    std::string file;
    std::string inputs;
    uint64_t seed = 0;
    std::string dump_inputs;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("file", opts->file, "The IR file to run ('-' reads standard input)")->required()->type_name("FILE.ir");
  cmd.add_option("--inputs", opts->inputs,
                 "Inputs, one `shape values` literal per parameter and line, e.g. `f32[2] {1, 2.5}`")
      ->type_name("FILE");
  cmd.add_option("--seed", opts->seed, "Seed of the random inputs (without --inputs)")->capture_default_str();
  cmd.add_option("--dump_inputs", opts->dump_inputs, "Also write the inputs used to FILE, in the --inputs format")
      ->type_name("FILE");
  return [opts]() -> int {
    auto module = load_ir_file(opts->file);
    if (!module.ok()) return report_error(module.status());
    const ir::Computation& entry = *(*module)->entry();
    std::vector<ir::Literal> inputs;
    if (!opts->inputs.empty()) {
      auto read = read_inputs(opts->inputs, entry);
      if (!read.ok()) return report_error(read.status());
      inputs = std::move(read).value();
    } else {
      std::mt19937_64 rng(opts->seed);
      for (int i = 0; i < entry.num_params(); ++i) inputs.push_back(random_input(entry.param(i)->shape(), rng));
    }
    if (!opts->dump_inputs.empty()) {
      std::ofstream out(opts->dump_inputs);
      for (int i = 0; i < entry.num_params(); ++i) {
        out << "# %" << entry.param(i)->id() << "\n" << literal_line(inputs[i]) << "\n";
      }
      if (!out) return report_error(io_error("cannot write {}", opts->dump_inputs));
    }
    auto outputs = interp::run(**module, inputs);
    if (!outputs.ok()) return report_error(outputs.status().with_context(opts->file));
    for (const ir::Literal& out : *outputs) print_output(out);
    return kExitOk;
  };
}

}  // namespace kiln::app
