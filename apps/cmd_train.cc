// kiln train [CONFIG.yml] [key=value ...]: trains the configured model, as MaxText's
// `python3 -m maxtext.trainers.pre_train.train base.yml key=value ...` does: resolve the
// config, build the model, trace the whole step once, then run `steps` steps, logging
// MaxText's per-step line and writing {base_output_directory}/{run_name}/metrics.jsonl.
// Exit codes: 0 done, 2 bad config (nothing was run), 1 the run failed (NaN/Inf loss, I/O).
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"

namespace kiln::app {

std::function<int()> add_train_command(CLI::App& cmd) {
  struct Options {
    std::vector<std::string> settings;
    bool dry_run = false;
  };
  auto opts = std::make_shared<Options>();
  cmd.add_option("settings", opts->settings,
                 "An optional CONFIG.yml first, then key=value overrides (e.g. model_name=gpt-oss-tiny "
                 "steps=20 reuse_example_batch=1)")
      ->type_name("[CONFIG.yml] [key=value ...]");
  cmd.add_flag("--dry-run", opts->dry_run,
               "Print the start-up report (parameter counts, FLOPs per step) and exit without building the step");
  cmd.footer("Keys: learning_rate, lr_schedule_type, steps, per_device_batch_size, max_target_length, "
             "gradient_clipping_threshold, adam_*, adamw_mask, reuse_example_batch, init_weights_seed, "
             "run_name, base_output_directory, hardware_peak_tflops, ... (see `kiln config`).");
  return [opts]() -> int {
    Result<config::Config> cfg = config::load(opts->settings);
    if (!cfg.ok()) return report_error(cfg.status());
    std::printf("kiln train: config from %s\n", fmt::format("{}", fmt::join(cfg->files(), " <- ")).c_str());
    std::fflush(stdout);
    Result<std::unique_ptr<models::Model>> model = models::make_model(*cfg);
    if (!model.ok()) return report_error(model.status());
    if (opts->dry_run) {
      for (const std::string& line : train::startup_report(*cfg, **model)) std::printf("%s\n", line.c_str());
      return kExitOk;
    }
    Result<std::unique_ptr<train::Trainer>> trainer = train::Trainer::create(*cfg, std::move(*model));
    if (!trainer.ok()) return report_error(trainer.status());
    Status status = (*trainer)->run();
    if (!status.ok()) {
      report_error(status);
      return kExitFailure;  // the run started: a failure now is never a usage error
    }
    return kExitOk;
  };
}

}  // namespace kiln::app
