#include "tests/backend/pjrt/pjrt_testing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/buffer.h"
#include "kiln/backend/pjrt/pjrt_client.h"
#include "kiln/backend/pjrt/plugin_path.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "tests/backend/pjrt/child_process.h"
#include "tests/testing/random_literals.h"

namespace kiln::backend::pjrt::testing {
namespace {

// The child's results travel through a pipe as: per device, per output, dtype, rank, dims,
// byte count, bytes (native byte order: the parent is the same machine). An error travels as
// "E" + its message.
void put_i64(std::string& out, int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
int64_t get_i64(std::string_view& in) {
  int64_t v = 0;
  std::memcpy(&v, in.data(), sizeof v);
  in.remove_prefix(sizeof v);
  return v;
}

std::string encode(const std::vector<std::vector<Buffer>>& outputs) {
  std::string out = "R";
  put_i64(out, static_cast<int64_t>(outputs.size()));
  for (const auto& device : outputs) {
    put_i64(out, static_cast<int64_t>(device.size()));
    for (const Buffer& b : device) {
      put_i64(out, static_cast<int64_t>(b.shape().dtype()));
      put_i64(out, b.shape().rank());
      for (int64_t d : b.shape().dims()) put_i64(out, d);
      put_i64(out, b.byte_size());
      out.append(static_cast<const char*>(b.data()), static_cast<size_t>(b.byte_size()));
    }
  }
  return out;
}

Result<Outputs> decode(std::string_view in) {
  if (in.empty()) return internal_error("the child sent nothing");
  if (in[0] == 'E') return internal_error("{}", in.substr(1));
  in.remove_prefix(1);
  Outputs outputs(static_cast<size_t>(get_i64(in)));
  for (auto& device : outputs) {
    const int64_t n = get_i64(in);
    for (int64_t i = 0; i < n; ++i) {
      const auto dtype = static_cast<ir::DType>(get_i64(in));
      std::vector<int64_t> dims(static_cast<size_t>(get_i64(in)));
      for (int64_t& d : dims) d = get_i64(in);
      const int64_t bytes = get_i64(in);
      Buffer b(ir::Shape(dtype, dims));
      std::memcpy(b.data(), in.data(), static_cast<size_t>(bytes));
      in.remove_prefix(static_cast<size_t>(bytes));
      device.push_back(b.to_literal());
    }
  }
  return outputs;
}

// In the child: load the CPU plugin, compile, run, and bring the results back.
Result<std::vector<std::vector<Buffer>>> compile_and_run(const std::string& stablehlo, int num_devices,
                                                         const std::vector<std::vector<ir::Literal>>& args) {
  KILN_ASSIGN_OR_RETURN(std::string path, resolve_plugin("cpu"));
  KILN_ASSIGN_OR_RETURN(const Plugin* plugin, Plugin::load(path));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::create(*plugin, num_devices));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<LoadedExecutable> exe, client->compile(stablehlo, num_devices));
  std::vector<std::vector<DeviceBuffer>> buffers(static_cast<size_t>(num_devices));
  std::vector<std::vector<DeviceBuffer*>> pointers(static_cast<size_t>(num_devices));
  for (int d = 0; d < num_devices; ++d) {
    for (const ir::Literal& a : args.at(static_cast<size_t>(d))) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer b, client->to_device(Buffer::from_literal(a), d));
      buffers[d].push_back(std::move(b));
    }
    for (DeviceBuffer& b : buffers[d]) pointers[d].push_back(&b);
  }
  KILN_ASSIGN_OR_RETURN(auto outputs, exe->execute(pointers, {}));
  std::vector<std::vector<Buffer>> host(static_cast<size_t>(num_devices));
  for (int d = 0; d < num_devices; ++d) {
    for (const DeviceBuffer& b : outputs[d]) {
      KILN_ASSIGN_OR_RETURN(Buffer h, b.to_host());
      host[d].push_back(std::move(h));
    }
  }
  return host;
}

double default_tolerance(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF64: return 1e-12;
    case ir::DType::kF32: return 1e-5;
    case ir::DType::kBF16: return 1e-2;
    default: return 0;
  }
}

}  // namespace

std::string module_text(std::string_view params, std::string_view body) {
  return fmt::format("module @t\n\nENTRY computation @main {{\n{}{}}}\n", params, body);
}

std::unique_ptr<ir::Module> parse(const std::string& text) {
  auto module = ir::parse_module(text);
  EXPECT_TRUE(module.ok()) << module.status().message() << "\n" << text;
  return module.ok() ? std::move(*module) : nullptr;
}

Result<Outputs> run_stablehlo_on_cpu_plugin(const std::string& stablehlo, int num_devices,
                                            const std::vector<std::vector<ir::Literal>>& args) {
  if (static_cast<int>(args.size()) != num_devices) {
    return invalid_argument("{} devices, arguments for {}", num_devices, args.size());
  }
  ChildResult child = run_in_child_returning([&] {
    Result<std::vector<std::vector<Buffer>>> r = compile_and_run(stablehlo, num_devices, args);
    return r.ok() ? encode(*r) : "E" + r.status().message();
  });
  if (!child.ok()) {
    // Keep the program that killed the plugin for whoever reads the failure.
    const std::string kept = ::testing::TempDir() + "kiln_pjrt_crash.mlir";
    std::ofstream(kept) << stablehlo;
    return internal_error("{} (program kept in {}){}", child.describe(), kept,
                          child.failures.empty() ? "" : "; " + child.failures);
  }
  return decode(child.output);
}

Result<Outputs> run_on_cpu_plugin(const ir::Module& module, const EmitOptions& options,
                                  const std::vector<std::vector<ir::Literal>>& args) {
  KILN_ASSIGN_OR_RETURN(std::string text, emit_stablehlo(module, options));
  return run_stablehlo_on_cpu_plugin(text, static_cast<int>(options.mesh.num_devices()), args);
}

Result<Outputs> run_on_interpreter(const ir::Module& module, const config::Mesh& mesh,
                                   const std::vector<std::vector<ir::Literal>>& args) {
  const int64_t n = mesh.num_devices();
  if (static_cast<int64_t>(args.size()) != n) return invalid_argument("{} devices, arguments for {}", n, args.size());
  if (n == 1) {
    KILN_ASSIGN_OR_RETURN(std::vector<ir::Literal> out, interp::run(module, args[0]));
    return Outputs{std::move(out)};
  }
  runtime::LocalWorld world(n);
  Outputs out(static_cast<size_t>(n));
  KILN_RETURN_IF_ERROR(runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    KILN_ASSIGN_OR_RETURN(out[d], interp::run(module, args[d]));
    return ok_status();
  }));
  return out;
}

std::vector<ir::Literal> random_args(const ir::Module& module, uint64_t seed,
                                     const std::vector<std::pair<double, double>>& ranges) {
  std::mt19937_64 rng(seed);
  const ir::Computation& entry = *module.entry();
  std::vector<ir::Literal> args;
  for (int i = 0; i < entry.num_params(); ++i) {
    const ir::Shape& s = entry.param(i)->shape();
    auto [lo, hi] = i < static_cast<int>(ranges.size()) ? ranges[i]
                    : ir::is_floating(s.dtype())       ? std::pair<double, double>{-2.0, 2.0}
                                                       : std::pair<double, double>{0.0, 4.0};
    args.push_back(kiln::testing::random_literal(s, rng, lo, hi));
  }
  return args;
}

void expect_close(const Outputs& want, const Outputs& got, const std::string& what, double relative) {
  ASSERT_EQ(want.size(), got.size()) << what << ": devices";
  for (size_t d = 0; d < want.size(); ++d) {
    ASSERT_EQ(want[d].size(), got[d].size()) << what << ": outputs of device " << d;
    for (size_t o = 0; o < want[d].size(); ++o) {
      const ir::Literal& w = want[d][o];
      const ir::Literal& g = got[d][o];
      const std::string where = fmt::format("{}: device {} output {}", what, d, o);
      ASSERT_EQ(w.shape(), g.shape()) << where;
      const double tol = relative >= 0 ? relative : default_tolerance(w.shape().dtype());
      int64_t reported = 0;
      for (int64_t i = 0; i < w.shape().num_elements() && reported < 10; ++i) {
        const double a = w.at(i), b = g.at(i);
        bool ok = std::isnan(a) ? std::isnan(b) : std::isinf(a) ? a == b : std::fabs(a - b) <= tol * (1 + std::fabs(a));
        if (!ok) {
          ADD_FAILURE() << where << " [" << i << "]: interpreter " << a << ", plugin " << b << " (tolerance " << tol
                        << ")";
          ++reported;
        }
      }
    }
  }
}

}  // namespace kiln::backend::pjrt::testing
