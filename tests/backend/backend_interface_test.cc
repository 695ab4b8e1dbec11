// The backend interface (backend.h) with both backends behind it: the CPU backend and the
// reference interpreter as a backend. Both run the same compile pipeline, so the same
// module gives the same values through either; a gpt-oss-tiny training step, every state
// output and metric, shows it on a whole program.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/backend/backend.h"
#include "kiln/config/config.h"
#include "kiln/interp/interpreter.h"
#include "kiln/ir/parser.h"
#include "kiln/models/model.h"
#include "kiln/ops/registry.h"
#include "kiln/train/step/step_program.h"
#include "tests/testing/random_literals.h"
#include "tests/testing/temp_path.h"
#include "tests/train/sharded_tiny_run.h"

namespace kiln::backend {
namespace {

TEST(Backends, AreFoundByNameAndAnUnknownNameListsThem) {
  auto cpu = backend_named("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu");
  auto interp = backend_named("interpreter");
  ASSERT_TRUE(interp.ok());
  EXPECT_EQ((*interp)->name(), "interpreter");
  auto bad = backend_named("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown backend 'tpu'; known backends: cpu, pjrt, interpreter");
}

void expect_close(const Buffer& got, const Buffer& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << "[" << i << "]";
      continue;
    }
    if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << "[" << i << "]";
      continue;
    }
    ASSERT_NEAR(g, w, tolerance * (1 + std::fabs(w))) << what << "[" << i << "]";
  }
}

// Every op's registry examples through the interpreter backend: the pipeline keeps the
// values, and the report counts every instruction as a reference evaluation.
TEST(InterpreterBackend, RunsEveryOpsExamplesAsTheInterpreterDoes) {
  int64_t examples = 0;
  for (int op = 0; op < ir::kNumOpcodes; ++op) {
    const ops::OpDef& def = ops::op_def(static_cast<ir::Opcode>(op));
    for (const ops::OpExample& ex : def.examples) {
      auto module = ir::parse_module(ex.ir);
      ASSERT_TRUE(module.ok()) << module.status().to_string();
      CompileOptions options;
      options.verify_each = true;
      auto exe = interpreter_backend().compile(**module, options);
      ASSERT_TRUE(exe.ok()) << def.name << ": " << exe.status().to_string();
      std::mt19937_64 rng(11);
      std::vector<ir::Literal> literals;
      std::vector<Buffer> buffers;
      for (const ir::Instr* p : (*module)->entry()->params()) {
        if (p->shape().is_tuple()) continue;
        auto [lo, hi] = static_cast<size_t>(literals.size()) < ex.ranges.size() ? ex.ranges[literals.size()]
                        : ir::is_floating(p->shape().dtype())                    ? std::pair<double, double>{-2.0, 2.0}
                                                                                 : std::pair<double, double>{0.0, 4.0};
        literals.push_back(testing::random_literal(p->shape(), rng, lo, hi));
        buffers.push_back(Buffer::from_literal(literals.back()));
      }
      if (literals.size() != static_cast<size_t>((*module)->entry()->num_params())) continue;
      auto want = interp::run(**module, literals);
      if (!want.ok()) continue;  // needs a device context (collectives): covered by the sharded tests
      auto got = (*exe)->run(buffers);
      ASSERT_TRUE(got.ok()) << def.name << ": " << got.status().to_string();
      ASSERT_EQ(got->size(), want->size()) << def.name;
      for (size_t i = 0; i < want->size(); ++i) {
        expect_close((*got)[i], Buffer::from_literal((*want)[i]), 1e-6, std::string(def.name));
      }
      ++examples;
    }
  }
  EXPECT_GT(examples, 100);
}

// A gpt-oss-tiny training step (forward, backward, AdamW) through both backends from the
// same arguments: every updated parameter and moment and every metric agree to f32 rounding
// (the CPU backend computes in f32, the interpreter in double rounded per op).
TEST(Backends, GiveTheSameTrainingStep) {
  config::LoadOptions lo;
  lo.overrides = train::testing::sharded_tiny_overrides(1);
  lo.overrides.push_back("ici_fsdp_parallelism=1");
  auto cfg = config::load(lo);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto model = models::make_model(*cfg);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto step_options = train::StepProgramOptions::from_config(*cfg);
  ASSERT_TRUE(step_options.ok());
  auto program = train::build_step_program(**model, *step_options);
  ASSERT_TRUE(program.ok()) << program.status().to_string();

  std::mt19937_64 rng(3);
  std::vector<Buffer> args;
  const ir::Computation& entry = *program->module->entry();
  for (int i = 0; i < entry.num_params(); ++i) {
    const ir::Shape& s = entry.param(i)->shape();
    ir::Literal value = ir::is_floating(s.dtype()) ? testing::random_literal(s, rng, 0.0, 0.05)
                                                   : testing::random_literal(s, rng, 0, 4);
    if (i == program->batch_arg(3)) value = testing::random_literal(s, rng, 1, 1);  // one segment
    args.push_back(Buffer::from_literal(value));
  }
  CompileOptions options = CompileOptions::from_config(*cfg);
  options.cache_dir = kiln::testing::temp_path("kiln_backend_interface_cache").string();
  std::vector<std::vector<Buffer>> outputs;
  for (const Backend* b : {&cpu_backend(), &interpreter_backend()}) {
    auto exe = b->compile(*program->module, options);
    ASSERT_TRUE(exe.ok()) << b->name() << ": " << exe.status().to_string();
    EXPECT_GT((*exe)->report().instructions_after, 0) << b->name();
    auto out = (*exe)->run(args);
    ASSERT_TRUE(out.ok()) << b->name() << ": " << out.status().to_string();
    outputs.push_back(std::move(*out));
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  ASSERT_EQ(static_cast<int64_t>(outputs[0].size()), program->num_outputs());
  const double loss = outputs[1][program->metric_output(train::StepMetric::kLoss)].get(0);
  EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
  for (size_t i = 0; i < outputs[0].size(); ++i) {
    expect_close(outputs[0][i], outputs[1][i], 2e-4, "output " + std::to_string(i));
  }
}

}  // namespace
}  // namespace kiln::backend
