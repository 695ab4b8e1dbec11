#include "kiln/passes/pipeline.h"

#include <gmock/gmock.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/ops/builder.h"
#include "kiln/passes/compile_pipeline.h"
#include "kiln/passes/cse.h"
#include "kiln/passes/dce.h"
#include "kiln/passes/registry.h"
#include "kiln/passes/simplify.h"
#include "tests/passes/pass_testing.h"
#include "tests/testing/temp_path.h"

namespace kiln::passes {
namespace {

using ::testing::HasSubstr;

const char* kModule = R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %zero = f32[] constant(0)
  %z = f32[2,3] broadcast(%zero), dims={}
  %a = f32[2,3] add(%x, %z)
  %t1 = f32[3,2] transpose(%a), perm={1,0}
  %t2 = f32[3,2] transpose(%x), perm={1,0}
  %e1 = f32[3,2] exp(%t1)
  %e2 = f32[3,2] exp(%t2)
  %dead = f32[3,2] neg(%e1)
  ROOT %m = f32[3,2] mul(%e1, %e2)
}
)";

// Breaks the module: gives the root a shape its op cannot produce, and says it changed.
class BrokenPass : public Pass {
 public:
  std::string_view name() const override { return "broken"; }
  Result<bool> run(ir::Module& module) override {
    module.entry()->root()->set_shape(ir::Shape(ir::DType::kF32, {7}));
    return true;
  }
};

// Always claims a change (renames the root back and forth): never reaches a fixed point.
class FlipPass : public Pass {
 public:
  std::string_view name() const override { return "flip"; }
  Result<bool> run(ir::Module& module) override {
    std::string& n = module.entry()->root()->mutable_meta().name;
    n = n == "a" ? "b" : "a";
    return true;
  }
};

// Wraps the root's first operand in neg(neg(.)), appending the new instructions at the end,
// after their user: the pipeline must restore program order.
class AppendingPass : public Pass {
 public:
  std::string_view name() const override { return "appending"; }
  Result<bool> run(ir::Module& module) override {
    ir::Computation* c = module.entry();
    ir::Instr* root = c->root();
    ops::Builder b(c);
    root->replace_operand(0, b.neg(b.neg(root->operand(0))));
    return true;
  }
};

// Counts its runs and changes nothing.
class CountingPass : public Pass {
 public:
  explicit CountingPass(int* runs) : runs_(runs) {}
  std::string_view name() const override { return "counting"; }
  Result<bool> run(ir::Module&) override {
    ++*runs_;
    return false;
  }

 private:
  int* runs_;
};

// Fails with an error of its own.
class FailingPass : public Pass {
 public:
  std::string_view name() const override { return "failing"; }
  Result<bool> run(ir::Module&) override { return invalid_argument("cannot handle %x"); }
};

std::unique_ptr<ir::Module> parse(const char* text = kModule) { return testing::parse_or_die(text); }

TEST(Pipeline, DefaultPipelineReachesAFixedPointAndPreservesResults) {
  auto module = parse();
  auto original = module->clone();
  PipelineOptions options;
  options.verify_each = true;
  options.fixed_point_cap_is_error = true;
  Pipeline p = default_pipeline(options);
  EXPECT_EQ(p.to_string(), "dce, fix(simplify, cse, dce), all_reduce_combiner, fix(simplify, cse, dce), reduce_scatter_reassociate, product_result_dtype");
  auto changed = p.run(*module);
  ASSERT_TRUE(changed.ok()) << changed.status().to_string();
  EXPECT_TRUE(*changed);
  // x+0 -> x makes both transposes equal, CSE merges them and then the exps.
  EXPECT_EQ(ir::print_module(*module), R"(module @m

ENTRY computation @main {
  %x = f32[2,3] parameter(), index=0
  %t1 = f32[3,2] transpose(%x), perm={1,0}
  %e1 = f32[3,2] exp(%t1)
  ROOT %m = f32[3,2] mul(%e1, %e1)
}
)");
  testing::expect_same_outputs(*original, *module);
  // Running again changes nothing.
  auto again = p.run(*module);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

// KILN_PASS_TIMING=1: one stderr line with every pass's total time and number of runs (the
// fixed-point group runs simplify, cse and dce twice here: once changing, once to confirm;
// the group after the all-reduce combiner does not run, since it combined nothing).
TEST(Pipeline, PassTimingPrintsEveryPassWithItsRuns) {
  auto module = parse();
  Pipeline p = default_pipeline({});
  setenv("KILN_PASS_TIMING", "1", 1);
  ::testing::internal::CaptureStderr();
  auto changed = p.run(*module);
  const std::string err = ::testing::internal::GetCapturedStderr();
  unsetenv("KILN_PASS_TIMING");
  ASSERT_TRUE(changed.ok());
  EXPECT_THAT(err, HasSubstr("pass timing: "));
  EXPECT_THAT(err, HasSubstr(" over 10 instructions in: "));
  EXPECT_THAT(err, ::testing::ContainsRegex("simplify [0-9.]+ ms/2"));
  EXPECT_THAT(err, ::testing::ContainsRegex("cse [0-9.]+ ms/2"));
  EXPECT_THAT(err, ::testing::ContainsRegex("dce [0-9.]+ ms/3"));  // once before the group
  // Off by default.
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(p.run(*parse()).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("pass timing"), std::string::npos);
}

TEST(Pipeline, FixedPointGroupThatNeverConvergesHitsTheCap) {
  auto module = parse();
  PipelineOptions options;
  options.max_fixed_point_iterations = 5;
  options.fixed_point_cap_is_error = true;
  Pipeline p(options);
  p.add_fixed_point("flipping", make_passes(std::make_unique<DcePass>(), std::make_unique<FlipPass>()));
  auto result = p.run(*module);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("fixed-point group 'flipping' did not converge in 5 iterations"));
  EXPECT_THAT(result.status().message(), HasSubstr("changed the module in flip"));

  // As a warning, the pipeline finishes and reports the change.
  p.mutable_options().fixed_point_cap_is_error = false;
  auto warned = p.run(*module);
  ASSERT_TRUE(warned.ok()) << warned.status().to_string();
  EXPECT_TRUE(*warned);
}

TEST(Pipeline, VerifyEachNamesTheBrokenPassAndTheInstruction) {
  auto module = parse();
  PipelineOptions options;
  options.verify_each = true;
  Pipeline p(options);
  p.add<DcePass>().add<BrokenPass>().add<CsePass>();
  auto result = p.run(*module);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("verification failed after pass 'broken'"));
  // The offending instruction, as text.
  EXPECT_THAT(result.status().message(), HasSubstr("in: %m = f32[7] mul(%e1, %e2)"));
}

TEST(Pipeline, WithoutVerifyEachABrokenPassGoesUnnoticed) {
  auto module = parse();
  PipelineOptions options;
  options.verify_each = false;
  Pipeline p(options);
  p.add<BrokenPass>();
  EXPECT_TRUE(p.run(*module).ok());
}

TEST(Pipeline, RejectsAnInputThatDoesNotVerify) {
  auto module = parse();
  module->entry()->root()->set_shape(ir::Shape(ir::DType::kF32, {7}));
  PipelineOptions options;
  options.verify_each = true;
  Pipeline p(options);
  p.add<DcePass>();
  auto result = p.run(*module);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("the pipeline's input does not verify"));
}

TEST(Pipeline, PassErrorsNameThePass) {
  auto module = parse();
  Pipeline p;
  p.add<FailingPass>();
  auto result = p.run(*module);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "pass 'failing': cannot handle %x");
}

TEST(Pipeline, RestoresProgramOrderAfterAPassAppendsInstructions) {
  auto module = parse();
  auto original = module->clone();
  PipelineOptions options;
  options.verify_each = true;
  Pipeline p(options);
  p.add<AppendingPass>();
  auto result = p.run(*module);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  // The root is last again, with the two new negs before it.
  const auto& instrs = module->entry()->instructions();
  EXPECT_EQ(instrs.back().get(), module->entry()->root());
  EXPECT_EQ(instrs[instrs.size() - 2]->opcode(), ir::Opcode::kNeg);
  testing::expect_same_outputs(*original, *module);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Pipeline, DumpIrWritesTheModuleBeforeAndAfterEveryPass) {
  std::filesystem::path dir = ::kiln::testing::temp_path("kiln_pipeline_dump_test");
  std::filesystem::remove_all(dir);
  auto module = parse();
  PipelineOptions options;
  options.dump_ir = dir.string();
  auto p = pipeline_from_spec("dce,fix(simplify,cse)", options);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  auto result = p->run(*module);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path().filename().string());
  std::sort(files.begin(), files.end());
  // dce, then simplify+cse (changes), then simplify+cse again (no change: the fixed point).
  EXPECT_EQ(files, (std::vector<std::string>{"00_input.ir", "01_dce.ir", "02_simplify.ir", "03_cse.ir",
                                             "04_simplify.ir", "05_cse.ir"}));
  EXPECT_EQ(read_file(dir / "00_input.ir"), kModule);
  EXPECT_EQ(read_file(dir / "05_cse.ir"), ir::print_module(*module));
  for (const std::string& f : files) {
    auto parsed = ir::parse_module(read_file(dir / f));
    EXPECT_TRUE(parsed.ok()) << f << ": " << parsed.status().to_string();
  }
  EXPECT_THAT(read_file(dir / "01_dce.ir"), ::testing::Not(HasSubstr("%dead")));
  std::filesystem::remove_all(dir);
}

TEST(Pipeline, BuildsFromASpecAndExplainsUnknownNames) {
  auto p = pipeline_from_spec(" dce , fix(simplify, cse,dce), cse");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->to_string(), "dce, fix(simplify, cse, dce), cse");
  auto d = pipeline_from_spec("default");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->to_string(), default_pipeline().to_string());

  auto unknown = pipeline_from_spec("dce,simplfy");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown pass 'simplfy' (did you mean 'simplify'?)"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("known passes: dce, cse, simplify"));
  EXPECT_FALSE(pipeline_from_spec("fix(dce").ok());
  EXPECT_FALSE(pipeline_from_spec("dce,,cse").ok());
  EXPECT_FALSE(pipeline_from_spec("default,dce").ok());
  EXPECT_FALSE(pipeline_from_spec("fix(fix(dce))").ok());
}

TEST(Pipeline, EveryRegisteredPassIsNamedByItsFileStem) {
  for (const PassInfo& info : registered_passes()) {
    auto pass = make_pass(info.name);
    ASSERT_TRUE(pass.ok());
    EXPECT_EQ((*pass)->name(), info.name);
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(KILN_SOURCE_DIR) / "src/kiln/passes" /
                                        (std::string(info.name) + ".h")))
        << info.name;
  }
}

// A group marked only_after_change runs when the stage before it changed the module, and
// is skipped when it did not.
TEST(Pipeline, AGroupAfterAChangeRunsOnlyWhenTheStageBeforeChangedSomething) {
  int after_nothing = 0, after_dce = 0;
  Pipeline p;
  p.add(std::make_unique<CountingPass>(&after_nothing));  // changes nothing
  p.add_fixed_point("skipped", make_passes(std::make_unique<CountingPass>(&after_nothing)), /*only_after_change=*/true);
  p.add(std::make_unique<DcePass>());  // removes %dead
  p.add_fixed_point("runs", make_passes(std::make_unique<CountingPass>(&after_dce)), /*only_after_change=*/true);
  auto module = parse();
  ASSERT_TRUE(p.run(*module).ok());
  EXPECT_EQ(after_nothing, 1);  // the plain pass; its group was skipped
  EXPECT_EQ(after_dce, 1);      // one iteration that changed nothing
}

// Given the module's owner, a compacting checkpoint replaces a changed module of at least its
// size by a deep copy (same text, fresh instructions); given a reference, after no change, or
// for a smaller module, it does not.
TEST(Pipeline, ACompactingCheckpointReplacesAChangedModuleByItsCopy) {
  Pipeline p;
  p.add(std::make_unique<DcePass>());
  p.add_checkpoint("after_dce", /*compact_from=*/5);
  p.add_checkpoint("again", /*compact_from=*/5);
  std::unique_ptr<ir::Module> module = parse();
  const ir::Module* before = module.get();
  std::vector<const ir::Module*> seen;
  auto changed = p.run(module, [&](std::string_view, const ir::Module& m) { seen.push_back(&m); });
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_NE(module.get(), before);
  EXPECT_EQ(seen[0], module.get());
  EXPECT_EQ(seen[1], module.get());  // nothing changed in between: not copied again
  EXPECT_EQ(ir::print_module(*module).find("%dead"), std::string::npos);
  auto reparsed = parse();
  ASSERT_TRUE(DcePass().run(*reparsed).ok());
  EXPECT_EQ(ir::print_module(*module), ir::print_module(*reparsed));
  // Through a reference the module stays where it is.
  std::unique_ptr<ir::Module> kept = parse();
  ASSERT_TRUE(p.run(*kept).ok());
  EXPECT_EQ(ir::print_module(*kept), ir::print_module(*reparsed));
  // A changed module smaller than the checkpoint's size stays too.
  Pipeline small;
  small.add(std::make_unique<AppendingPass>());
  small.add_checkpoint("too_small", /*compact_from=*/1000);
  std::unique_ptr<ir::Module> little = parse();
  const ir::Module* little_before = little.get();
  ASSERT_TRUE(small.run(little).ok());
  EXPECT_EQ(little.get(), little_before);
}

}  // namespace
}  // namespace kiln::passes
