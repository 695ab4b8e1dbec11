// ragged_all_to_all: the global form on hand-checked blocks (slots, capacity cut, return),
// the per-device form on virtual devices (interpreter over the runtime's collectives, and
// the CPU kernel) against the global form, and the gradient (autodiff of the per-device
// program) against the global program's.
#include <memory>
#include <random>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kiln/autodiff/autodiff.h"
#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/ir/printer.h"
#include "kiln/ops/builder.h"
#include "kiln/ops/device_context.h"
#include "kiln/ops/registry.h"
#include "kiln/runtime/local_world.h"
#include "kiln/runtime/run_on_devices.h"
#include "tests/testing/random_literals.h"

namespace kiln {
namespace {

using ir::DType;
using ir::Literal;
using ir::Shape;

std::string module_text(const std::string& x, const std::string& sizes, const std::string& result,
                        const std::string& attrs) {
  return fmt::format("module @ragged\n\nENTRY computation @main {{\n  %x = {} parameter(), index=0\n"
                     "  %sizes = {} parameter(), index=1\n"
                     "  ROOT %r = {} ragged_all_to_all(%x, %sizes), {}\n}}\n",
                     x, sizes, result, attrs);
}

std::unique_ptr<ir::Module> parse(const std::string& text) {
  auto m = ir::parse_module(text);
  KILN_CHECK_OK(m);
  return std::move(*m);
}

Literal run_one(const std::string& text, const std::vector<Literal>& args) {
  auto out = interp::run(*parse(text), args);
  KILN_CHECK_OK(out);
  return (*out)[0];
}

TEST(RaggedAllToAll, GlobalFormMovesEachBlockIntoItsSlot) {
  // One group of 2 sources with 3 rows each; source 0 sends 1 row to 0 and 2 to 1, source 1
  // sends 2 rows to 0 and 1 to 1.
  Literal x(Shape(DType::kF32, {2, 3, 1}), {1, 2, 3, 4, 5, 6});
  Literal sizes(Shape(DType::kS32, {2, 2}), {1, 2, 2, 1});
  Literal out = run_one(module_text("f32[2,3,1]", "s32[2,2]", "f32[2,6,1]", "group_size=2, rows=3, slot=3, reverse=0"),
                        {x, sizes});
  // Destination 0: slot 0 = {1}, slot 1 = {4, 5}; destination 1: slot 0 = {2, 3}, slot 1 = {6}.
  EXPECT_EQ(out.values(), (std::vector<double>{1, 0, 0, 4, 5, 0, 2, 3, 0, 6, 0, 0}));
  Literal back = run_one(module_text("f32[2,6,1]", "s32[2,2]", "f32[2,3,1]", "group_size=2, rows=3, slot=3, reverse=1"),
                         {out, sizes});
  EXPECT_EQ(back.values(), x.values());

  // A capacity of one row per source slot drops the second row of each longer block, and
  // the return leaves zeros where the dropped rows were.
  Literal capped = run_one(module_text("f32[2,3,1]", "s32[2,2]", "f32[2,2,1]", "group_size=2, rows=3, slot=1, reverse=0"),
                           {x, sizes});
  EXPECT_EQ(capped.values(), (std::vector<double>{1, 4, 2, 6}));
  Literal capped_back = run_one(
      module_text("f32[2,2,1]", "s32[2,2]", "f32[2,3,1]", "group_size=2, rows=3, slot=1, reverse=1"), {capped, sizes});
  EXPECT_EQ(capped_back.values(), (std::vector<double>{1, 2, 0, 4, 0, 6}));
}

Status verify_text(const std::string& text) {
  KILN_ASSIGN_OR_RETURN(auto m, ir::parse_module(text));
  return ops::verify(*m);
}

TEST(RaggedAllToAll, ShapeRuleNamesWhatIsWrong) {
  Status bad = verify_text(module_text("f32[3,3,1]", "s32[3,2]", "f32[3,6,1]", "group_size=2, rows=3, slot=3, reverse=0"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("do not form groups of 2"), std::string::npos) << bad.to_string();
  Status sizes = verify_text(module_text("f32[2,3,1]", "s32[2,3]", "f32[2,6,1]", "group_size=2, rows=3, slot=3, reverse=0"));
  ASSERT_FALSE(sizes.ok());
  EXPECT_NE(sizes.message().find("sizes must be s32[2, 2]"), std::string::npos) << sizes.to_string();
  Status rows = verify_text(module_text("f32[2,4,1]", "s32[2,2]", "f32[2,3,1]", "group_size=2, rows=3, slot=3, reverse=1"));
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.message().find("must have 6 rows (group_size * slot)"), std::string::npos) << rows.to_string();
  // The per-device form (mesh_axes) holds any number of entries.
  EXPECT_TRUE(verify_text(module_text("f32[1,3,1]", "s32[1,2]", "f32[1,6,1]",
                                      "group_size=2, rows=3, slot=3, reverse=0, mesh_axes=expert"))
                  .ok());
}

// A mesh of 4 devices and the axes of the exchange: every device holds one entry.
struct MeshCase {
  config::Mesh mesh;
  std::string axes;
  int64_t group;
};

std::vector<MeshCase> meshes() {
  return {{config::Mesh({"expert"}, {4}), "expert", 4}, {config::Mesh({"fsdp", "expert"}, {2, 2}), "expert", 2}};
}

// Random sizes in [-1, rows] (negative, empty, cut at rows) and rows of F floats.
std::vector<Literal> random_args(int64_t entries, int64_t rows, int64_t g, int64_t f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> size(-1, static_cast<int>(rows));
  std::vector<double> s(entries * g);
  for (double& v : s) v = size(rng);
  return {testing::random_literal(Shape(DType::kF32, {entries, rows, f}), rng, -1, 1),
          Literal(Shape(DType::kS32, {entries, g}), s)};
}

// Entry d of a [4, ...] literal (device d's block of dimension 0).
Literal entry(const Literal& x, int64_t d) {
  std::vector<int64_t> dims = x.shape().dims();
  int64_t n = x.shape().num_elements() / dims[0];
  dims[0] = 1;
  return Literal(x.shape().with_dims(dims), std::vector<double>(x.values().begin() + d * n, x.values().begin() + (d + 1) * n));
}

// Runs `text` on every device of `mesh`, device d with entry d of each argument, on the
// interpreter or compiled; returns every output of every device.
std::vector<std::vector<Literal>> run_devices(const config::Mesh& mesh, const std::string& text,
                                              const std::vector<Literal>& global_args, bool compiled) {
  const int64_t n = mesh.num_devices();
  runtime::LocalWorld world(n);
  std::unique_ptr<ir::Module> module = parse(text);
  std::vector<std::vector<Literal>> outputs(n);
  // One executable per device, compiled in turn so that the first fills the kernel cache.
  std::vector<std::unique_ptr<backend::Executable>> exes(n);
  for (int64_t d = 0; compiled && d < n; ++d) {
    backend::CompileOptions options;
    options.cache_dir = ::testing::TempDir() + "kiln_ragged_cache";
    auto exe = backend::compile_cpu(*module, options);
    KILN_CHECK_OK(exe);
    exes[d] = std::move(*exe);
  }
  Status s = runtime::run_on_devices(world, [&](int64_t d) -> Status {
    ops::DeviceContext context{mesh, d, &world.device(d)};
    ops::ScopedDeviceContext scope(&context);
    std::vector<Literal> args;
    for (const Literal& a : global_args) args.push_back(entry(a, d));
    if (!compiled) {
      KILN_ASSIGN_OR_RETURN(outputs[d], interp::run(*module, args));
      return ok_status();
    }
    std::vector<backend::Buffer> inputs;
    for (const Literal& a : args) inputs.push_back(backend::Buffer::from_literal(a));
    KILN_ASSIGN_OR_RETURN(std::vector<backend::Buffer> got, exes[d]->run(inputs));
    for (const backend::Buffer& b : got) outputs[d].push_back(b.to_literal());
    return ok_status();
  });
  KILN_CHECK_OK(s);
  return outputs;
}

void expect_entries_equal(const Literal& global, const std::vector<std::vector<Literal>>& per_device, int output,
                          const std::string& what) {
  for (size_t d = 0; d < per_device.size(); ++d) {
    // Moves only: the same bits, f32 in both.
    EXPECT_EQ(per_device[d][output].values(), entry(global, static_cast<int64_t>(d)).values()) << what << " device " << d;
  }
}

TEST(RaggedAllToAll, PerDeviceFormEqualsGlobalFormOnVirtualDevices) {
  const int64_t rows = 5, f = 3;
  for (const MeshCase& m : meshes()) {
    for (int64_t slot : {rows, int64_t{2}}) {  // worst case, and a capacity that cuts
      for (bool compiled : {false, true}) {
        const std::string what = fmt::format("mesh {} slot {} {}", m.mesh.to_string(), slot, compiled ? "compiled" : "interpreted");
        std::vector<Literal> args = random_args(4, rows, m.group, f, 5 + slot);
        const std::string dispatch_attrs = fmt::format("group_size={}, rows={}, slot={}, reverse=0", m.group, rows, slot);
        const std::string back_attrs = fmt::format("group_size={}, rows={}, slot={}, reverse=1", m.group, rows, slot);
        const std::string x = fmt::format("f32[4,{},{}]", rows, f), xl = fmt::format("f32[1,{},{}]", rows, f);
        const std::string y = fmt::format("f32[4,{},{}]", m.group * slot, f), yl = fmt::format("f32[1,{},{}]", m.group * slot, f);
        const std::string s = fmt::format("s32[4,{}]", m.group), sl = fmt::format("s32[1,{}]", m.group);
        const std::string axes = fmt::format(", mesh_axes={}", m.axes);

        Literal sent = run_one(module_text(x, s, y, dispatch_attrs), args);
        auto got = run_devices(m.mesh, module_text(xl, sl, yl, dispatch_attrs + axes), args, compiled);
        expect_entries_equal(sent, got, 0, "dispatch " + what);

        std::mt19937_64 rng(9);
        std::vector<Literal> back_args = {
            testing::random_literal(Shape(DType::kF32, {4, m.group * slot, f}), rng, -1, 1), args[1]};
        Literal returned = run_one(module_text(y, s, x, back_attrs), back_args);
        got = run_devices(m.mesh, module_text(yl, sl, xl, back_attrs + axes), back_args, compiled);
        expect_entries_equal(returned, got, 0, "return " + what);
      }
    }
  }
}

// Module: loss = sum(ragged_all_to_all(x, sizes) * w); root (loss, d loss / d x).
std::string gradient_text(int64_t entries, int64_t rows, int64_t g, int64_t slot, int64_t f, const std::string& axes) {
  std::unique_ptr<ir::Module> m = parse(module_text(
      fmt::format("f32[{},{},{}]", entries, rows, f), fmt::format("s32[{},{}]", entries, g),
      fmt::format("f32[{},{},{}]", entries, g * slot, f),
      fmt::format("group_size={}, rows={}, slot={}, reverse=0{}", g, rows, slot, axes.empty() ? "" : ", mesh_axes=" + axes)));
  ir::Computation* c = m->entry();
  ops::Builder b(c);
  ir::Instr* w = b.parameter(2, c->root()->shape());
  ir::Instr* loss = b.reduce_sum(b.mul(c->root(), w), {0, 1, 2});
  std::vector<ir::Instr*> wrt = {c->param(0)};
  auto grads = autodiff::gradients(*c, loss, wrt);
  KILN_CHECK_OK(grads);
  c->set_root(b.tuple(std::vector<ir::Instr*>{loss, (*grads)[0]}));
  return ir::print_module(*m);
}

TEST(RaggedAllToAll, GradientOfThePerDeviceProgramEqualsTheGlobalOne) {
  const int64_t rows = 4, f = 2, slot = 3;
  for (const MeshCase& m : meshes()) {
    std::vector<Literal> args = random_args(4, rows, m.group, f, 21);
    std::mt19937_64 rng(4);
    args.push_back(testing::random_literal(Shape(DType::kF32, {4, m.group * slot, f}), rng, -1, 1));
    const std::string global = gradient_text(4, rows, m.group, slot, f, "");
    // The gradient is the return of w: the rows each source sent get w's values back.
    EXPECT_NE(global.find("reverse=1"), std::string::npos) << global;
    auto want = interp::run(*parse(global), args);
    KILN_CHECK_OK(want);
    for (bool compiled : {false, true}) {
      auto got = run_devices(m.mesh, gradient_text(1, rows, m.group, slot, f, m.axes), args, compiled);
      expect_entries_equal((*want)[1], got, 1, fmt::format("dx on {} {}", m.mesh.to_string(), compiled));
    }
  }
}

TEST(RaggedAllToAll, KernelMovesAnyDtypeAsBytes) {
  // bf16 rows and s32 rows (the count exchange of the MoE dispatch) on 4 devices.
  for (const char* dtype : {"bf16", "s32"}) {
    const config::Mesh mesh({"expert"}, {4});
    std::vector<Literal> args = random_args(4, 3, 4, 2, 33);
    Literal x(Shape(dtype == std::string("bf16") ? DType::kBF16 : DType::kS32, {4, 3, 2}), args[0].values());
    if (dtype == std::string("s32")) {
      std::vector<double> ints(x.values().size());
      for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<double>(i);
      x = Literal(x.shape(), ints);
    }
    args[0] = x;
    const std::string attrs = "group_size=4, rows=3, slot=3, reverse=0";
    Literal want = run_one(module_text(fmt::format("{}[4,3,2]", dtype), "s32[4,4]", fmt::format("{}[4,12,2]", dtype), attrs), args);
    auto got = run_devices(mesh, module_text(fmt::format("{}[1,3,2]", dtype), "s32[1,4]", fmt::format("{}[1,12,2]", dtype),
                                             attrs + ", mesh_axes=expert"),
                           args, true);
    expect_entries_equal(want, got, 0, dtype);
  }
}

TEST(BatchedGroupedMatmul, EachEntryUsesItsBlockOfExperts) {
  // 4 entries, 4 experts in blocks of 2: entries 0 and 2 use experts 0-1, entries 1 and 3
  // use experts 2-3; each entry equals the 2-D grouped matmul of its rows on its block.
  std::mt19937_64 rng(8);
  Literal x = testing::random_literal(Shape(DType::kF32, {4, 5, 3}), rng, -1, 1);
  Literal w = testing::random_literal(Shape(DType::kF32, {4, 3, 2}), rng, -1, 1);
  Literal sizes(Shape(DType::kS32, {4, 2}), {2, 3, 0, 4, 5, 0, 1, 1});
  auto batched = interp::run(*parse(R"(module @b

ENTRY computation @main {
  %x = f32[4,5,3] parameter(), index=0
  %w = f32[4,3,2] parameter(), index=1
  %s = s32[4,2] parameter(), index=2
  ROOT %y = f32[4,5,2] grouped_matmul(%x, %w, %s)
}
)"),
                             std::vector<Literal>{x, w, sizes});
  KILN_CHECK_OK(batched);
  std::unique_ptr<ir::Module> one = parse(R"(module @one

ENTRY computation @main {
  %x = f32[5,3] parameter(), index=0
  %w = f32[2,3,2] parameter(), index=1
  %s = s32[2] parameter(), index=2
  ROOT %y = f32[5,2] grouped_matmul(%x, %w, %s)
}
)");
  for (int64_t p = 0; p < 4; ++p) {
    const int64_t block = p % 2;
    Literal xp(Shape(DType::kF32, {5, 3}), std::vector<double>(x.values().begin() + p * 15, x.values().begin() + (p + 1) * 15));
    Literal wb(Shape(DType::kF32, {2, 3, 2}),
               std::vector<double>(w.values().begin() + block * 12, w.values().begin() + (block + 1) * 12));
    Literal sp(Shape(DType::kS32, {2}), {sizes.at(2 * p), sizes.at(2 * p + 1)});
    auto want = interp::run(*one, std::vector<Literal>{xp, wb, sp});
    KILN_CHECK_OK(want);
    EXPECT_EQ(entry((*batched)[0], p).values(), (*want)[0].values()) << "entry " << p;
  }
}

}  // namespace
}  // namespace kiln
