#include "command.h"

namespace kiln::app {

// Each subcommand's entry point, defined in its cmd_<name>.cc.
std::function<int()> add_config_command(CLI::App& cmd);
std::function<int()> add_train_command(CLI::App& cmd);
std::function<int()> add_compile_command(CLI::App& cmd);
std::function<int()> add_plan_command(CLI::App& cmd);
std::function<int()> add_ir_opt_command(CLI::App& cmd);
std::function<int()> add_ir_run_command(CLI::App& cmd);
std::function<int()> add_tokenize_command(CLI::App& cmd);
std::function<int()> add_convert_command(CLI::App& cmd);
std::function<int()> add_forward_command(CLI::App& cmd);
std::function<int()> add_sample_command(CLI::App& cmd);
std::function<int()> add_report_command(CLI::App& cmd);
std::function<int()> add_supervise_command(CLI::App& cmd);

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"config", "Print the resolved config (base.yml <- CONFIG.yml <- model <- key=value) as YAML",
       add_config_command},
      {"train", "Train the configured model (MaxText's train.py): kiln train [CONFIG.yml] [key=value ...]", add_train_command},
      {"supervise", "Run a training command and restart it from its last checkpoint when it fails: kiln supervise "
                    "[--max_restarts N] [--restart_command \"CMD\"] -- kiln train ...",
       add_supervise_command},
      {"compile", "Compile the training step without running it and report kernels, FLOPs and memory (--json)",
       add_compile_command},
      {"plan", "Predict the step's time, memory and MFU on a target (target=h100, tpu-v6e, cpu, ...); --search ranks meshes; --calibrate measures this CPU",
       add_plan_command},
      {"ir-opt", "Run passes on an IR file and print the result (--passes=dce,cse,simplify)", add_ir_opt_command},
      {"ir-run", "Run an IR file with the reference interpreter on random or given inputs", add_ir_run_command},
      {"tokenize", "Text files -> token shards + manifest (--output DIR FILE...); --ids [--decode]: stdin text <-> ids", add_tokenize_command},
      {"convert", "Model weights (GPT-OSS, Llama 3, Qwen3-MoE, DeepSeek-V3) between Hugging Face and Kiln checkpoints: --from hf|kiln --to kiln|hf IN OUT", add_convert_command},
      {"forward", "Run a checkpoint's model on token ids: kiln forward CKPT tokens=FILE out=LOGITS.npy (+ per-token loss)", add_forward_command},
      {"sample", "Continue a prompt with a checkpoint: kiln sample CKPT prompt=\"...\" max_new_tokens=N temperature=T seed=S", add_sample_command},
      {"report", "A run's page: kiln report RUN_DIR -> RUN_DIR/report.html (charts and tables, offline); RUN_A RUN_B -o OUT.html overlays runs; --follow keeps it live",
       add_report_command},
  };
  return kCommands;
}

}  // namespace kiln::app
