// What every model family's training test checks: the family's tiny config (shrunk by
// `model` overrides) learns the fortunes corpus (UTF-8 bytes, 4 rows of 32 per global batch)
// for kFamilySteps steps on one device with a falling loss, and the same run on 4 virtual
// devices with `mesh` gives the one-device losses step for step within 1e-5 relative. Partial
// sums in another order round differently in float32 (a few 1e-7 per step); a wrong
// collective or sharding moves the loss by far more, usually from the first step.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/base/check.h"
#include "kiln/config/config.h"
#include "kiln/train/trainer.h"
#include "tests/train/sharded_tiny_run.h"

namespace kiln::train::testing {

inline constexpr int kFamilySteps = 30;
inline constexpr const char* kFortunes = "/usr/share/games/fortunes";

// The per-step losses of `model` + `run` (learning rate, backend, ...) on `devices` devices.
inline std::vector<double> fortunes_losses(const std::vector<std::string>& model, const std::vector<std::string>& run,
                                           int64_t devices, const std::vector<std::string>& mesh,
                                           const std::string& name) {
  // The process id in the name: ctest runs tests in processes of their own, at the same time.
  const std::filesystem::path out =
      std::filesystem::path(::testing::TempDir()) / ("kiln_family_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(out);
  config::LoadOptions lo;
  lo.configs_dir = std::string(KILN_SOURCE_DIR) + "/configs";
  lo.overrides = model;
  for (const std::string& s :
       {std::string("override_model_config=true"), std::string("vocab_size=258"), std::string("max_target_length=32"),
        "per_device_batch_size=" + std::to_string(4 / devices), "local_devices=" + std::to_string(devices),
        std::string("dataset_type=text"), std::string("dataset_path=") + kFortunes, std::string("tokenizer_type=bytes"),
        "dataset_cache_dir=" + (out / "cache").string(), "steps=" + std::to_string(kFamilySteps),
        std::string("enable_checkpointing=false"), std::string("log_period=100"), "run_name=" + name,
        "base_output_directory=" + out.string()}) {
    lo.overrides.push_back(s);
  }
  lo.overrides.insert(lo.overrides.end(), run.begin(), run.end());
  if (devices == 1) lo.overrides.push_back("ici_fsdp_parallelism=1");
  lo.overrides.insert(lo.overrides.end(), mesh.begin(), mesh.end());
  std::unique_ptr<Trainer> trainer = make_quiet_trainer(lo, /*write_metrics_file=*/false);
  Status s = trainer->run();
  KILN_CHECK(s.ok()) << s.to_string();
  std::vector<double> losses = step_losses(*trainer);
  trainer.reset();  // closes its files before they go
  std::filesystem::remove_all(out);
  return losses;
}

inline double mean_of(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

// The check above; `label` names the family in the printed summary.
inline void expect_learns_and_shards_alike(const std::vector<std::string>& model, const std::vector<std::string>& run,
                                           const std::vector<std::string>& mesh, const std::string& label) {
  if (!std::filesystem::exists(kFortunes)) {
    if (std::getenv("CI")) FAIL() << kFortunes << " is missing (Debian's fortunes-min)";
    GTEST_SKIP() << kFortunes << " is missing (Debian's fortunes-min)";
  }
  const std::vector<double> one = fortunes_losses(model, run, 1, {}, label + "_one");
  ASSERT_EQ(one.size(), static_cast<size_t>(kFamilySteps));
  // Each step is a new batch: the last five steps' mean well under the first five's (bytes
  // start near ln 258 = 5.55).
  const double first = mean_of(one, 0, 5), last = mean_of(one, kFamilySteps - 5, kFamilySteps);
  EXPECT_LT(last, first - 1.0) << label << ": first " << first << ", last " << last;
  const std::vector<double> four = fortunes_losses(model, run, 4, mesh, label + "_four");
  ASSERT_EQ(four.size(), one.size());
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    worst = std::max(worst, std::abs(four[i] - one[i]) / std::abs(one[i]));
    EXPECT_NEAR(four[i], one[i], 1e-5 * std::abs(one[i])) << label << " step " << i;
  }
  std::printf("%s, %d steps: loss %.4f -> %.4f (first and last 5 steps' means); 4 devices vs one: worst relative "
              "difference %.2e\n",
              label.c_str(), kFamilySteps, first, last, worst);
}

}  // namespace kiln::train::testing
