// ragged_all_to_all's CPU kernel over MPI: CTest runs this under `mpirun -np 2`, each rank
// driving 2 virtual devices (a mesh fsdp 2 × expert 2 whose expert groups, {0,1} and {2,3},
// stay within a rank, and expert 4, whose group spans both). Every device runs the compiled
// per-device dispatch and return on its own entry; the results must equal the global
// form's reference evaluation bit for bit. Prints one line per case; exits non-zero on a
// mismatch.
#include <cstdio>
#include <random>

#include <fmt/format.h>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ops/device_context.h"
#include "kiln/runtime/mpi_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "kiln/runtime/world.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Literal;
using ir::Shape;

// Dispatch then return: root (received rows, rows back at their senders).
std::string program(int64_t entries, int64_t g, int64_t f, const std::string& axes) {
  const int64_t rows = 5, slot = 4;  // slot < rows: a capacity that cuts
  return fmt::format(R"(module @ragged

ENTRY computation @main {{
  %x = f32[{0},{2},{4}] parameter(), index=0
  %sizes = s32[{0},{1}] parameter(), index=1
  %y = f32[{0},{5},{4}] ragged_all_to_all(%x, %sizes), group_size={1}, rows={2}, slot={3}, reverse=0{6}
  %z = f32[{0},{2},{4}] ragged_all_to_all(%y, %sizes), group_size={1}, rows={2}, slot={3}, reverse=1{6}
  ROOT %r = (f32[{0},{5},{4}], f32[{0},{2},{4}]) tuple(%y, %z)
}}
)",
                     entries, g, rows, slot, f, g * slot, axes.empty() ? "" : ", mesh_axes=" + axes);
}

Literal entry(const Literal& x, int64_t d) {
  std::vector<int64_t> dims = x.shape().dims();
  const int64_t n = x.shape().num_elements() / dims[0];
  dims[0] = 1;
  return Literal(x.shape().with_dims(dims), std::vector<double>(x.values().begin() + d * n, x.values().begin() + (d + 1) * n));
}

Status check(runtime::World& world, const config::Mesh& mesh, const std::string& axes, int64_t g, int64_t f) {
  std::mt19937_64 rng(13 + g);
  std::uniform_real_distribution<double> value(-1, 1);
  std::uniform_int_distribution<int> size(-1, 5);
  std::vector<double> xs(4 * 5 * f), ss(4 * g);
  for (double& v : xs) v = value(rng);
  for (double& v : ss) v = size(rng);
  const std::vector<Literal> args = {Literal(Shape(DType::kF32, {4, 5, f}), xs), Literal(Shape(DType::kS32, {4, g}), ss)};
  KILN_ASSIGN_OR_RETURN(auto global, ir::parse_module(program(4, g, f, "")));
  KILN_ASSIGN_OR_RETURN(std::vector<Literal> want, interp::run(*global, args));
  KILN_ASSIGN_OR_RETURN(auto local, ir::parse_module(program(1, g, f, axes)));
  return runtime::run_on_devices(world, [&](int64_t l) -> Status {
    runtime::Collectives& c = world.device(l);
    const int64_t d = c.device();
    ops::DeviceContext context{mesh, d, &c};
    ops::ScopedDeviceContext scope(&context);
    backend::CompileOptions options;
    options.cache_dir = fmt::format("{}/kiln_ragged_mpi_cache", std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<backend::Executable> exe, backend::compile_cpu(*local, options));
    std::vector<backend::Buffer> inputs = {backend::Buffer::from_literal(entry(args[0], d)),
                                           backend::Buffer::from_literal(entry(args[1], d))};
    KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> got, exe->run(inputs));
    for (int i = 0; i < 2; ++i) {
      if (got[i].to_literal().values() != entry(want[i], d).values()) {
        return internal_error("{} on {}: device {} output {} differs from the global form", axes, mesh.to_string(), d, i);
      }
    }
    return ok_status();
  });
}

}  // namespace
}  // namespace kiln

int main() {
  using namespace kiln;
  auto world = runtime::make_world(/*mesh_devices=*/4, /*local_devices=*/2, {.timeout_s = 20});
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().to_string().c_str());
    return 1;
  }
  struct Case {
    config::Mesh mesh;
    std::string axes;
    int64_t g, f;
  };
  // Rows of 3 floats, and of 1024 (blocks past MPI's eager limit: both sides must post the
  // data in the same phase, or two members sending each other large blocks deadlock).
  const Case cases[] = {{config::Mesh({"fsdp", "expert"}, {2, 2}), "expert", 2, 3},
                        {config::Mesh({"expert"}, {4}), "expert", 4, 3},
                        {config::Mesh({"fsdp", "expert"}, {2, 2}), "expert", 2, 1024}};
  int failures = 0;
  for (const Case& c : cases) {
    Status s = check(**world, c.mesh, c.axes, c.g, c.f);
    std::printf("rank %lld: ragged_all_to_all over %s (groups of %lld, rows of %lld): %s\n",
                static_cast<long long>((*world)->rank()), c.mesh.to_string().c_str(), static_cast<long long>(c.g),
                static_cast<long long>(c.f), s.ok() ? "ok" : s.to_string().c_str());
    failures += s.ok() ? 0 : 1;
  }
  return failures == 0 ? 0 : 1;
}
