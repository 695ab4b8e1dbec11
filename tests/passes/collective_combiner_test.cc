// AllGatherCombinerPass and ReduceScatterCombinerPass, IR text in and out: independent small
// collectives of one dtype and group needed (gathers) or ready (scatters) at one compute step
// become one, gathered or scattered along any dimension; one that depends on another, one of
// another dtype or group, one needed much later and one over the threshold stay apart; on 4
// virtual devices (data 2 x fsdp 2) the results are bit for bit the separate collectives',
// interpreted and compiled.
#include <cstdlib>

#include <gtest/gtest.h>

#include "kiln/backend/backend.h"
#include "kiln/base/check.h"
#include "kiln/passes/all_gather_combiner.h"
#include "kiln/passes/reduce_scatter_combiner.h"
#include "tests/passes/mesh_runner.h"
#include "tests/passes/pass_testing.h"

namespace kiln::passes {
namespace {

// A layer's input norm scale (1-D), a projection gathered along dimension 0 and one along
// dimension 1, all read at step 0: combined. Apart: a bf16 weight, a weight gathered over
// `data`, a gather of a slice of a gathered value (depends on one), and a weight read two
// products later.
constexpr const char* kGathers = R"(module @m

ENTRY computation @main {
  %x = f32[16,8] parameter(), index=0
  %scale = f32[4] parameter(), index=1
  %wq = f32[4,8] parameter(), index=2
  %wk = f32[8,4] parameter(), index=3
  %wb = bf16[4,8] parameter(), index=4
  %wd = f32[4,8] parameter(), index=5
  %wr = f32[4,8] parameter(), index=6
  %as = f32[8] all_gather(%scale), dim=0, group_size=2, mesh_axes=fsdp
  %aq = f32[8,8] all_gather(%wq), dim=0, group_size=2, mesh_axes=fsdp
  %ak = f32[8,8] all_gather(%wk), dim=1, group_size=2, mesh_axes=fsdp, name="layers.0.wk"
  %ab = bf16[8,8] all_gather(%wb), dim=0, group_size=2, mesh_axes=fsdp
  %ad = f32[8,8] all_gather(%wd), dim=0, group_size=2, mesh_axes=data
  %t = f32[4,8] slice(%aq), limit={4,8}, start={0,0}
  %at = f32[8,8] all_gather(%t), dim=0, group_size=2, mesh_axes=fsdp
  %ar = f32[8,8] all_gather(%wr), dim=0, group_size=2, mesh_axes=fsdp
  %bs = f32[16,8] broadcast(%as), dims={1}
  %n = f32[16,8] mul(%x, %bs)
  %q = f32[16,8] dot_general(%n, %aq), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %k = f32[16,8] dot_general(%n, %ak), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %abf = f32[8,8] convert(%ab)
  %b = f32[16,8] dot_general(%n, %abf), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %d = f32[16,8] dot_general(%n, %ad), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %u = f32[16,8] dot_general(%n, %at), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %h = f32[8,8] dot_general(%q, %d), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %late = f32[8,8] dot_general(%h, %ar), lhs_contract={1}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  ROOT %out = (f32[16,8], f32[16,8], f32[16,8], f32[8,8]) tuple(%k, %b, %u, %late)
}
)";

constexpr const char* kGathersCombined = R"(module @m

ENTRY computation @main {
  %x = f32[16,8] parameter(), index=0
  %scale = f32[4] parameter(), index=1
  %wq = f32[4,8] parameter(), index=2
  %wk = f32[8,4] parameter(), index=3
  %wb = bf16[4,8] parameter(), index=4
  %wd = f32[4,8] parameter(), index=5
  %wr = f32[4,8] parameter(), index=6
  %ab = bf16[8,8] all_gather(%wb), dim=0, group_size=2, mesh_axes=fsdp
  %ad = f32[8,8] all_gather(%wd), dim=0, group_size=2, mesh_axes=data
  %reshape.0 = f32[32] reshape(%wq)
  %reshape.1 = f32[32] reshape(%wk)
  %concatenate.2 = f32[68] concatenate(%scale, %reshape.0, %reshape.1), dim=0
  %all_gather.3 = f32[136] all_gather(%concatenate.2), dim=0, group_size=2, mesh_axes=fsdp
  %reshape.4 = f32[2,68] reshape(%all_gather.3)
  %slice.7 = f32[2,32] slice(%reshape.4), limit={2,36}, start={0,4}
  %reshape.8 = f32[8,8] reshape(%slice.7)
  %t = f32[4,8] slice(%reshape.8), limit={4,8}, start={0,0}
  %at = f32[8,8] all_gather(%t), dim=0, group_size=2, mesh_axes=fsdp
  %ar = f32[8,8] all_gather(%wr), dim=0, group_size=2, mesh_axes=fsdp
  %slice.5 = f32[2,4] slice(%reshape.4), limit={2,4}, start={0,0}
  %reshape.6 = f32[8] reshape(%slice.5)
  %bs = f32[16,8] broadcast(%reshape.6), dims={1}
  %n = f32[16,8] mul(%x, %bs)
  %q = f32[16,8] dot_general(%n, %reshape.8), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %slice.9 = f32[2,32] slice(%reshape.4), limit={2,68}, start={0,36}, name="layers.0.wk"
  %reshape.10 = f32[2,8,4,1] reshape(%slice.9), name="layers.0.wk"
  %transpose.11 = f32[8,2,4,1] transpose(%reshape.10), perm={1,0,2,3}, name="layers.0.wk"
  %reshape.12 = f32[8,8] reshape(%transpose.11), name="layers.0.wk"
  %k = f32[16,8] dot_general(%n, %reshape.12), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %abf = f32[8,8] convert(%ab)
  %b = f32[16,8] dot_general(%n, %abf), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %d = f32[16,8] dot_general(%n, %ad), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %u = f32[16,8] dot_general(%n, %at), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  %h = f32[8,8] dot_general(%q, %d), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %late = f32[8,8] dot_general(%h, %ar), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={0}
  ROOT %out = (f32[16,8], f32[16,8], f32[16,8], f32[8,8]) tuple(%k, %b, %u, %late)
}
)";

// Gradients: a weight's (a product, scattered along dimension 1), its bias's (a sum, one step
// earlier) and another weight's (dimension 0): combined. Apart: the same gradient over `data`,
// a bf16 one, a scatter of a scattered value (depends on one) and a gradient two products later.
constexpr const char* kScatters = R"(module @m

ENTRY computation @main {
  %x = f32[16,8] parameter(), index=0
  %dy = f32[16,16] parameter(), index=1
  %dw = f32[8,16] dot_general(%x, %dy), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %db = f32[16] reduce_sum(%dy), dims={0}
  %dv = f32[16,8] dot_general(%dy, %x), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %rw = f32[8,8] reduce_scatter(%dw), dim=1, group_size=2, mesh_axes=fsdp
  %rb = f32[8] reduce_scatter(%db), dim=0, group_size=2, mesh_axes=fsdp
  %rv = f32[8,8] reduce_scatter(%dv), dim=0, group_size=2, mesh_axes=fsdp
  %rd = f32[4,16] reduce_scatter(%dw), dim=0, group_size=2, mesh_axes=data
  %dwb = bf16[8,16] convert(%dw)
  %rwb = bf16[8,8] reduce_scatter(%dwb), dim=1, group_size=2, mesh_axes=fsdp
  %rr = f32[4,8] reduce_scatter(%rv), dim=0, group_size=2, mesh_axes=fsdp
  %h = f32[16,16] dot_general(%x, %dv), lhs_contract={1}, rhs_contract={1}, lhs_batch={}, rhs_batch={}
  %late = f32[16,16] dot_general(%h, %dy), lhs_contract={0}, rhs_contract={0}, lhs_batch={}, rhs_batch={}
  %rl = f32[8,16] reduce_scatter(%late), dim=0, group_size=2, mesh_axes=fsdp
  ROOT %out = (f32[8,8], f32[8], f32[4,16], bf16[8,8], f32[4,8], f32[8,16]) tuple(%rw, %rb, %rd, %rwb, %rr, %rl)
}
)";

constexpr const char* kScattersCombined = R"(module @m

ENTRY computation @main {
  %x = f32[16,8] parameter(), index=0
  %dy = f32[16,16] parameter(), index=1
  %dw = f32[8,16] dot_general(%x, %dy), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %db = f32[16] reduce_sum(%dy), dims={0}
  %dv = f32[16,8] dot_general(%dy, %x), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %rd = f32[4,16] reduce_scatter(%dw), dim=0, group_size=2, mesh_axes=data
  %dwb = bf16[8,16] convert(%dw)
  %rwb = bf16[8,8] reduce_scatter(%dwb), dim=1, group_size=2, mesh_axes=fsdp
  %reshape.0 = f32[8,2,8,1] reshape(%dw)
  %transpose.1 = f32[2,8,8,1] transpose(%reshape.0), perm={1,0,2,3}
  %reshape.2 = f32[2,64] reshape(%transpose.1)
  %reshape.3 = f32[2,8] reshape(%db)
  %reshape.4 = f32[2,64] reshape(%dv)
  %concatenate.5 = f32[2,136] concatenate(%reshape.2, %reshape.3, %reshape.4), dim=1
  %reshape.6 = f32[272] reshape(%concatenate.5)
  %reduce_scatter.7 = f32[136] reduce_scatter(%reshape.6), dim=0, group_size=2, mesh_axes=fsdp
  %slice.11 = f32[64] slice(%reduce_scatter.7), limit={136}, start={72}
  %reshape.12 = f32[8,8] reshape(%slice.11)
  %rr = f32[4,8] reduce_scatter(%reshape.12), dim=0, group_size=2, mesh_axes=fsdp
  %h = f32[16,16] dot_general(%x, %dv), lhs_batch={}, lhs_contract={1}, rhs_batch={}, rhs_contract={1}
  %late = f32[16,16] dot_general(%h, %dy), lhs_batch={}, lhs_contract={0}, rhs_batch={}, rhs_contract={0}
  %rl = f32[8,16] reduce_scatter(%late), dim=0, group_size=2, mesh_axes=fsdp
  %slice.8 = f32[64] slice(%reduce_scatter.7), limit={64}, start={0}
  %reshape.9 = f32[8,8] reshape(%slice.8)
  %slice.10 = f32[8] slice(%reduce_scatter.7), limit={72}, start={64}
  ROOT %out = (f32[8,8], f32[8], f32[4,16], bf16[8,8], f32[4,8], f32[8,16]) tuple(%reshape.9, %slice.10, %rd, %rwb, %rr, %rl)
}
)";

using testing::Outputs;

// Runs `module` on the 4 devices of a data 2 x fsdp 2 mesh, each with its own inputs.
Outputs run_on_mesh(const ir::Module& module, bool compiled, backend::CompileReport* report = nullptr) {
  testing::MeshRun how;
  how.compiled = compiled;
  how.options.cache_dir = ::testing::TempDir() + "kiln_combiner_cache";
  how.report = report;
  return testing::run_on_mesh(config::Mesh({"data", "fsdp"}, {2, 2}), module, how);
}

void expect_identical(const Outputs& want, const Outputs& got, const std::string& what) {
  testing::expect_identical(want, got, what, "separate", "combined");
}

// The pass turns `input` into `expected` (printed), which verifies, round-trips through the
// parser and computes the same bits as `input` on 4 devices; a second run changes nothing.
void check_combiner(Pass& pass, std::string_view input, std::string_view expected) {
  std::unique_ptr<ir::Module> module = testing::parse_or_die(input);
  ASSERT_NE(module, nullptr);
  std::unique_ptr<ir::Module> original = module->clone();
  auto changed = pass.run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_TRUE(*changed);
  std::string printed = ir::print_module(*module);
  EXPECT_EQ(printed, expected);
  Status s = ops::verify(*module);
  ASSERT_TRUE(s.ok()) << s.to_string() << "\n" << printed;
  std::unique_ptr<ir::Module> reparsed = testing::parse_or_die(printed);
  ASSERT_NE(reparsed, nullptr);
  EXPECT_EQ(ir::print_module(*reparsed), printed);
  expect_identical(run_on_mesh(*original, false), run_on_mesh(*module, false), "interpreted");
  auto again = pass.run(*module);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again) << ir::print_module(*module);
}

class CombineEnv {
 public:
  explicit CombineEnv(const char* threshold_kb) { setenv("KILN_COMBINE_THRESHOLD_KB", threshold_kb, 1); }
  ~CombineEnv() { unsetenv("KILN_COMBINE_THRESHOLD_KB"); }
};

TEST(AllGatherCombiner, GathersNeededAtOneStepBecomeOne) {
  AllGatherCombinerPass pass;
  check_combiner(pass, kGathers, kGathersCombined);
  std::unique_ptr<ir::Module> m = testing::parse_or_die(kGathers);
  ASSERT_TRUE(pass.run(*m).value());
  EXPECT_EQ(pass.removed(), 2);
}

TEST(ReduceScatterCombiner, GradientsReadyAtOneStepBecomeOne) {
  ReduceScatterCombinerPass pass;
  check_combiner(pass, kScatters, kScattersCombined);
  std::unique_ptr<ir::Module> m = testing::parse_or_die(kScatters);
  ASSERT_TRUE(pass.run(*m).value());
  EXPECT_EQ(pass.removed(), 2);
}

// Over the threshold (the default's, or a given one) and with the combiners off nothing
// merges; a threshold as large as the values lets them.
TEST(CollectiveCombiners, ThresholdDecidesWhatIsSmall) {
  constexpr const char* kTwo = R"(module @m

ENTRY computation @main {
  %w1 = f32[128,256] parameter(), index=0
  %w2 = f32[128,256] parameter(), index=1
  %a1 = f32[256,256] all_gather(%w1), dim=0, group_size=2, mesh_axes=fsdp
  %a2 = f32[256,256] all_gather(%w2), dim=0, group_size=2, mesh_axes=fsdp
  %r1 = f32[128,256] reduce_scatter(%a1), dim=0, group_size=2, mesh_axes=fsdp
  %r2 = f32[128,256] reduce_scatter(%a2), dim=0, group_size=2, mesh_axes=fsdp
  ROOT %t = (f32[128,256], f32[128,256]) tuple(%r1, %r2)
}
)";
  auto count = [](const ir::Module& m, ir::Opcode op) {
    int n = 0;
    for (const auto& i : m.entry()->instructions()) n += i->opcode() == op;
    return n;
  };
  for (const char* kb : {"", "0", "255", "256"}) {  // "": the default, 64 KiB
    CombineEnv env(kb);
    std::unique_ptr<ir::Module> m = testing::parse_or_die(kTwo);
    AllGatherCombinerPass gathers;
    ReduceScatterCombinerPass scatters;
    const bool merge = std::string(kb) == "256";  // each value is 256 KiB whole
    EXPECT_EQ(gathers.run(*m).value(), merge) << kb;
    EXPECT_EQ(scatters.run(*m).value(), merge) << kb;
    EXPECT_EQ(count(*m, ir::Opcode::kAllGather), merge ? 1 : 2) << kb;
    EXPECT_EQ(count(*m, ir::Opcode::kReduceScatter), merge ? 1 : 2) << kb;
    ASSERT_TRUE(ops::verify(*m).ok());
  }
  {
    CombineEnv env("lots");
    std::unique_ptr<ir::Module> m = testing::parse_or_die(kTwo);
    AllGatherCombinerPass pass;
    auto r = pass.run(*m);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().to_string().find("KILN_COMBINE_THRESHOLD_KB='lots'"), std::string::npos)
        << r.status().to_string();
  }
}

TEST(CollectiveCombiners, CombinedEqualSeparateOnFourDevicesCompiled) {
  for (const char* text : {kGathers, kScatters}) {
    std::unique_ptr<ir::Module> module = testing::parse_or_die(text);
    backend::CompileReport separate_report, combined_report;
    Outputs separate;
    {
      CombineEnv off("0");
      separate = run_on_mesh(*module, true, &separate_report);
    }
    Outputs combined = run_on_mesh(*module, true, &combined_report);
    expect_identical(separate, combined, "compiled");
    const std::string kind = text == kGathers ? "all_gather_start" : "reduce_scatter_start";
    EXPECT_EQ(combined_report.async_by_kind.at(kind), separate_report.async_by_kind.at(kind) - 2) << kind;
    // The combined collective overlaps compute (the latency-hiding pass moves a gather's
    // concatenation of weights up with its start, and a scatter's slices down to their
    // readers), so fewer pairs run back to back than before: 1 against 2 here.
    EXPECT_LT(combined_report.async_collectives - combined_report.overlapped_collectives,
              separate_report.async_collectives - separate_report.overlapped_collectives)
        << kind;
  }
}

}  // namespace
}  // namespace kiln::passes
