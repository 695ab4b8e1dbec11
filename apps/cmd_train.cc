// kiln train [CONFIG.yml] [key=value ...]: trains the configured model, as MaxText's
// `python3 -m maxtext.trainers.pre_train.train base.yml key=value ...` does: resolve the
// config, build the model, trace the whole step once, then run `steps` steps, logging
// MaxText's per-step line and writing {base_output_directory}/{run_name}/metrics.jsonl.
// Exit codes: 0 done, 2 bad config (nothing was run), 1 the run failed (NaN/Inf loss, I/O).
//
// Under mpirun (several ranks) every rank runs this with the same arguments: the mesh counts
// every rank's devices, each rank drives its local_devices of them, rank 0 alone prints and
// writes metrics, TensorBoard, profiles and checkpoints, and an error on any rank after the
// ranks have met ends the whole job (MpiWorld::abort_job) instead of leaving the others to
// wait for the collective timeout.
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "kiln/runtime/mpi_world.h"
#include "kiln/runtime/world.h"
#include "kiln/train/preemption.h"
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
    Result<int64_t> ranks = runtime::launcher_num_ranks();
    if (!ranks.ok()) return report_error(ranks.status());
    Result<config::Config> cfg = config::load(opts->settings, *ranks);
    if (!cfg.ok()) return report_error(cfg.status());
    if (const auto& topology = cfg->derived().compile_topology) {
      return report_error(invalid_argument(
          "compile_topology={}: compiles ahead of time for hardware that is not here, nothing can train on it; use "
          "`kiln compile` with it, or leave it unset to train on this machine's devices",
          topology->name));
    }
    // Under MPI: meet the other ranks now (MPI_Init), so every later error can end the job.
    std::shared_ptr<runtime::World> world;
    runtime::MpiWorld* mpi = nullptr;
    if (*ranks > 1 && !opts->dry_run) {
      Result<std::unique_ptr<runtime::World>> made = runtime::make_world(*cfg);
      if (!made.ok()) return report_error(made.status());
      world = std::move(*made);
      mpi = dynamic_cast<runtime::MpiWorld*>(world.get());
      if (world->rank() != 0) {
        // Ranks other than 0 compute the same steps but write nothing of their own.
        std::vector<std::string> quiet = opts->settings;
        quiet.insert(quiet.end(), {"enable_tensorboard=false", "profiler=", "report=false", "metrics_file="});
        cfg = config::load(quiet, *ranks);
        if (!cfg.ok()) mpi->abort_job(cfg.status(), kExitUsage);
      }
    }
    const bool primary = world == nullptr || world->rank() == 0;
    auto fail = [&](const Status& status, int code) {
      if (mpi != nullptr) mpi->abort_job(status, code);  // prints "kiln: error: rank R: ..."
      report_error(status);
      return code;
    };
    if (primary) {
      std::printf("kiln train: config from %s\n", fmt::format("{}", fmt::join(cfg->files(), " <- ")).c_str());
      std::fflush(stdout);
    }
    Result<std::unique_ptr<models::Model>> model = models::make_model(*cfg);
    if (!model.ok()) return fail(model.status(), exit_code_for(model.status()));
    if (opts->dry_run) {
      for (const std::string& line : train::startup_report(*cfg, **model)) std::printf("%s\n", line.c_str());
      return kExitOk;
    }
    train::TrainerOptions options;
    options.world = world;
    if (!primary) {
      options.console = nullptr;
      options.write_metrics_file = false;
    }
    Result<std::unique_ptr<train::Trainer>> trainer = train::Trainer::create(*cfg, std::move(*model), options);
    if (!trainer.ok()) return fail(trainer.status(), exit_code_for(trainer.status()));
    Status status = (*trainer)->run();
    if (!status.ok()) return fail(status, kExitFailure);  // the run started: never a usage error
    return (*trainer)->preempted_by() != 0 ? train::kExitPreempted : kExitOk;
  };
}

}  // namespace kiln::app
