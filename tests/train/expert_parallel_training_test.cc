// Token-routed expert parallelism in training (models/gpt_oss/expert_parallel.cc): with a
// capacity (dropped pairs are not sent) and on the compiled executor (native ragged
// all-to-all kernels), the 4-device runs give the one-device losses; and the compiled step
// of fsdp 2 × expert 2 exchanges tokens with ragged all-to-alls and never gathers an
// expert's weights over the expert axis (sharded_training_test covers the dropless
// interpreter runs of expert 4 and fsdp 2 × expert 2 for 20 steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"
#include "tests/testing/temp_path.h"

namespace kiln::train {
namespace {

std::vector<std::string> model_overrides(int64_t devices) { return testing::sharded_tiny_overrides(devices); }

std::vector<double> run_losses(const std::vector<std::string>& extra, int64_t devices, const std::string& name,
                               const std::string& backend, int steps) {
  return testing::sharded_tiny_losses(extra, devices, "ep_" + name, backend, steps);
}

// `kiln compile --json` of the test model on `devices` devices with `extra` settings, its
// IR dumped into `dump` (emptied first); returns the report and fails the test on an error.
std::string compile_report(int64_t devices, const std::vector<std::string>& extra, const std::filesystem::path& dump) {
  std::filesystem::remove_all(dump);
  std::string cmd = std::string(KILN_BINARY) + " compile --json";
  for (const std::string& s : model_overrides(devices)) cmd += " " + s;
  for (const std::string& s : extra) cmd += " " + s;
  cmd += " dump_ir=" + dump.string() + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string report;
  if (pipe == nullptr) return report;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) report.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << report;
  return report;
}

// float32 sums in another order (each token's k rows, the experts' partial gradients):
// 1e-4 relative, as sharded_training_test.
void expect_same(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::abs(want[i])) << "step " << i;
}

TEST(ExpertParallelTraining, CapacityDropsTheSamePairsAsOneDevice) {
  // capacity_factor=1: some pairs are dropped; they must be the same ones on every mesh.
  const std::vector<std::string> cap = {"capacity_factor=1.0"};
  std::vector<double> want = run_losses(cap, 1, "cap_single", "interpreter", 8);
  for (const std::vector<std::string>& mesh : {std::vector<std::string>{"ici_fsdp_parallelism=1", "ici_expert_parallelism=4"},
                                               std::vector<std::string>{"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"},
                                               // no expert axis: each shard drops its own pairs, nothing is exchanged
                                               std::vector<std::string>{"ici_fsdp_parallelism=4", "ici_expert_parallelism=1"}}) {
    std::vector<std::string> extra = cap;
    extra.insert(extra.end(), mesh.begin(), mesh.end());
    expect_same(run_losses(extra, 4, "cap_" + mesh[0].substr(4, 4) + mesh[1].back(), "interpreter", 8), want);
  }
}

TEST(ExpertParallelTraining, CompiledFsdpTimesExpertMatchesOneDevice) {
  std::vector<double> want = run_losses({}, 1, "compiled_single", "cpu", 3);
  expect_same(run_losses({"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, 4, "compiled_fsdp2expert2", "cpu", 3),
              want);
}

TEST(ExpertParallelTraining, StepExchangesTokensAndNeverGathersExpertsOverTheExpertAxis) {
  std::filesystem::path dump = ::kiln::testing::temp_path("kiln_ep_dump");
  std::string report = compile_report(4, {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}, dump);
  // The backend runs every exchange as an async pair, and the report counts them so.
  EXPECT_NE(report.find("\"ragged_all_to_all_start\""), std::string::npos) << report;

  std::ifstream ir(dump / "optimized.ir");
  ASSERT_TRUE(ir.good()) << "no optimized.ir in " << dump;
  int ragged = 0, expert_gathers = 0;
  for (std::string line; std::getline(ir, line);) {
    if (line.find(" ragged_all_to_all_start(") != std::string::npos) ++ragged;
    EXPECT_EQ(line.find(" ragged_all_to_all("), std::string::npos) << "a blocking exchange left: " << line;
    // The expert axis alone: weights are only ever gathered over fsdp (their model dim).
    if (line.find(" all_gather(") != std::string::npos && line.find("mesh_axes=expert") != std::string::npos) {
      ++expert_gathers;
      ADD_FAILURE() << line;
    }
  }
  // Per layer: the forward and the rematerialized forward each dispatch the rows and their
  // expert ids and return the rows (3 each); the backward's return and dispatch (2). Each is
  // a ragged_all_to_all_start / _done pair.
  EXPECT_EQ(ragged, 16);
  EXPECT_EQ(expert_gathers, 0);
}

// Chunked dropless dispatch (num_moe_chunks): each device's 8 tokens in 4 chunks of 2,
// dispatched, computed and combined one after the other, give the unchunked run's losses
// (each token's pairs stay in its chunk; only the experts' gradient partial sums are added
// in another order), with expert parallelism 2 (fsdp 2 x expert 2) and 4, on the compiled
// executor (its scheduler orders the chunks).
class ChunkedDispatch : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ChunkedDispatch, EqualsTheUnchunkedLosses) {
  std::vector<std::string> whole = GetParam(), chunked = GetParam();
  whole.push_back("num_moe_chunks=1");
  chunked.push_back("num_moe_chunks=4");
  const std::string tag = testing::mesh_name(GetParam());
  const std::vector<double> want = run_losses(whole, 4, "whole_" + tag, "cpu", 5);
  const std::vector<double> got = run_losses(chunked, 4, "chunked_" + tag, "cpu", 5);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << "step " << i;
  // Training moved the loss: the comparison is not of two untrained constants.
  EXPECT_LT(want.back(), want.front());
}

// The buffers hold one chunk: every exchange of the chunked step receives at most
// expert shards x 2 tokens x 2 picks rows per device, a quarter of the unchunked step's.
TEST_P(ChunkedDispatch, ExchangeBuffersHoldOneChunk) {
  const int64_t groups = std::stoll(GetParam().back().substr(GetParam().back().find('=') + 1));
  auto largest_exchange = [&](const std::string& chunks) {
    std::vector<std::string> extra = GetParam();
    extra.push_back("num_moe_chunks=" + chunks);
    std::filesystem::path dump =
        ::kiln::testing::temp_path("kiln_chunk_dump_" + testing::mesh_name(GetParam()) + "_" + chunks);
    compile_report(4, extra, dump);
    std::ifstream ir(dump / "optimized.ir");
    EXPECT_TRUE(ir.good()) << "no optimized.ir in " << dump;
    int64_t rows = 0, exchanges = 0;
    for (std::string line; std::getline(ir, line);) {
      const size_t at = line.find(" ragged_all_to_all_start(");
      if (at == std::string::npos) continue;
      ++exchanges;
      // "%ragged_all_to_all_start.7 = f32[1,16,64] ragged_all_to_all_start(...)"
      const size_t open = line.find('[', line.find(" = "));
      rows = std::max<int64_t>(rows, std::stoll(line.substr(line.find(',', open) + 1)));
    }
    EXPECT_GT(exchanges, 0) << dump / "optimized.ir";
    return rows;
  };
  EXPECT_EQ(largest_exchange("1"), groups * 8 * 2);
  EXPECT_EQ(largest_exchange("4"), groups * 2 * 2);
}

INSTANTIATE_TEST_SUITE_P(ExpertParallelism, ChunkedDispatch,
                         ::testing::Values(std::vector<std::string>{"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"},
                                           std::vector<std::string>{"ici_fsdp_parallelism=1", "ici_expert_parallelism=4"}));

// grad_reduce_dtype reaches the compiled step: in bf16 compute the gradients' reduce-scatters
// are bf16 by default (the products' own dtype) and f32 with grad_reduce_dtype=float32.
TEST(GradReduceDtype, NamesTheDtypeOfTheCompiledStepsGradientReduceScatters) {
  auto scatter_dtypes = [](const std::string& key) {
    std::vector<std::string> extra = {"ici_fsdp_parallelism=2", "ici_expert_parallelism=2", "dtype=bfloat16"};
    if (!key.empty()) extra.push_back("grad_reduce_dtype=" + key);
    std::filesystem::path dump = ::kiln::testing::temp_path("kiln_grad_reduce_dump_" + key);
    compile_report(4, extra, dump);
    std::ifstream ir(dump / "optimized.ir");
    EXPECT_TRUE(ir.good()) << "no optimized.ir in " << dump;
    std::set<std::string> dtypes;
    for (std::string line; std::getline(ir, line);) {
      if (line.find(" reduce_scatter_start(") == std::string::npos || line.find(".grad\"") == std::string::npos) continue;
      const size_t eq = line.find(" = ");
      dtypes.insert(line.substr(eq + 3, line.find('[', eq) - eq - 3));
    }
    return dtypes;
  };
  EXPECT_EQ(scatter_dtypes(""), std::set<std::string>{"bf16"});
  EXPECT_EQ(scatter_dtypes("float32"), std::set<std::string>{"f32"});
}

// Each device routes only its own tokens: on 4 devices every sort and top-k of the
// compiled step (the router's top-k, the sorts of each shard's pairs by expert, the
// receivers' ordering, the inverse permutations) has one shard's rows (dimension 0 is 1,
// not the 4 of the global program), and none runs on the reference fallback. fsdp 4 has no
// expert axis (shards keep their pairs, no exchange); fsdp 2 x expert 2 exchanges them.
class RoutingPerDevice : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(RoutingPerDevice, SortsAndTopKsHoldOneShardAndRunNatively) {
  std::string tag;
  for (const std::string& m : GetParam()) tag += m.substr(4, 2) + m.substr(m.find('=') + 1);
  std::filesystem::path dump = ::kiln::testing::temp_path("kiln_routing_dump_" + tag);
  std::string report = compile_report(4, GetParam(), dump);
  EXPECT_NE(report.find("\"fallback_kernels\": 0"), std::string::npos) << report;

  std::ifstream ir(dump / "optimized.ir");
  ASSERT_TRUE(ir.good()) << "no optimized.ir in " << dump;
  int orderings = 0;
  for (std::string line; std::getline(ir, line);) {
    // No shard's grouped rows or indices ([4 shards, 8 tokens x 2 picks, ..]) are gathered:
    // the weight and bias gradients are partial sums per shard (reduce-scattered).
    if (line.find(" all_gather(") != std::string::npos && line.find("[4,16") != std::string::npos) {
      ADD_FAILURE() << "routed rows gathered: " << line;
    }
    if (line.find(" sort(") == std::string::npos && line.find(" topk(") == std::string::npos) continue;
    ++orderings;
    // "%sort.1 = (s32[1,16], s32[1,16]) sort(...)": the first dimension of the values.
    const size_t open = line.find("= (");
    ASSERT_NE(open, std::string::npos) << line;
    const size_t bracket = line.find('[', open);
    EXPECT_EQ(line.substr(bracket, 3), "[1,") << line;
  }
  EXPECT_GE(orderings, 4) << "no routing found in " << dump / "optimized.ir";
}

INSTANTIATE_TEST_SUITE_P(Meshes, RoutingPerDevice,
                         ::testing::Values(std::vector<std::string>{"ici_fsdp_parallelism=4"},
                                           std::vector<std::string>{"ici_fsdp_parallelism=2", "ici_expert_parallelism=2"}));

}  // namespace
}  // namespace kiln::train
