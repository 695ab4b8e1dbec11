// kiln sample CHECKPOINT_DIR prompt="..." max_new_tokens=N temperature=T seed=S [key=value ...]:
// continues a prompt with a checkpoint's model, decoded by the configured tokenizer
// (tokenizer_type / tokenizer_path of the saved config). temperature=0 is greedy (argmax);
// T > 0 samples from softmax(logits / T) with a seeded generator, so a seed repeats a sample.
//
// There is no KV cache: every new token reruns the compiled forward pass over the whole
// sequence (compiled once for prompt + max_new_tokens positions; the causal mask keeps the
// positions not generated yet from affecting earlier ones). Fine for the small models a
// CPU trains, quadratic in the length.
#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "command.h"
#include "forward_program.h"
#include "kiln/data/tokenizer.h"

namespace kiln::app {

namespace {

Status run_sample(const std::string& dir, const std::vector<std::string>& settings) {
  std::string prompt;
  int64_t max_new = 32, seed = 0;
  double temperature = 0.0;
  std::vector<std::string> overrides;
  try {
    for (const std::string& s : settings) {
      if (s.starts_with("prompt=")) prompt = s.substr(7);
      else if (s.starts_with("max_new_tokens=")) max_new = std::stoll(s.substr(15));
      else if (s.starts_with("temperature=")) temperature = std::stod(s.substr(12));
      else if (s.starts_with("seed=")) seed = std::stoll(s.substr(5));
      else overrides.push_back(s);
    }
  } catch (const std::exception&) {
    return invalid_argument("kiln sample: max_new_tokens, temperature and seed take numbers");
  }
  if (max_new < 1) return invalid_argument("max_new_tokens={}: expected at least 1", max_new);
  if (!(temperature >= 0)) return invalid_argument("temperature={}: expected 0 (greedy) or more", temperature);

  // The tokenizer the checkpoint's config names: load the config once through the program.
  // The prompt length decides the program's shape, so tokenize with a first look at the config.
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ForwardProgram> probe, ForwardProgram::load(dir, overrides, 0, 0));
  const config::Config& cfg = probe->config();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tok,
                        data::make_tokenizer(cfg.get_string("tokenizer_type"), cfg.get_string("tokenizer_path"),
                                             cfg.get_string("tokenizer_dir")));
  std::vector<int32_t> ids;
  if (cfg.get_bool("add_bos") && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
  for (int32_t id : tok->encode(prompt)) ids.push_back(id);
  if (ids.empty()) return invalid_argument("prompt is empty and the tokenizer has no BOS: nothing to continue");
  const int64_t prompt_len = static_cast<int64_t>(ids.size());
  const int64_t T = prompt_len + max_new;
  probe.reset();
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ForwardProgram> program, ForwardProgram::load(dir, overrides, 1, T));
  const int64_t V = program->vocab_size();
  fmt::print("kiln sample: checkpoint {} (step {}), tokenizer {}, {} prompt tokens, {} new, {}\n",
             program->step_dir(), program->step(), tok->name(), prompt_len, max_new,
             temperature == 0 ? std::string("greedy") : fmt::format("temperature {} seed {}", temperature, seed));

  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<int32_t> inputs(static_cast<size_t>(T), 0), targets(inputs.size(), 0), positions(inputs.size()),
      segments(inputs.size(), 1);
  for (int64_t t = 0; t < T; ++t) positions[t] = static_cast<int32_t>(t);
  std::vector<int32_t> generated;
  while (static_cast<int64_t>(ids.size()) < T) {
    std::copy(ids.begin(), ids.end(), inputs.begin());
    KILN_ASSIGN_OR_RETURN(ForwardOutputs out, program->run(inputs, targets, positions, segments));
    const int64_t last = static_cast<int64_t>(ids.size()) - 1;
    const double* row = out.logits.values().data() + last * V;
    int32_t next = 0;
    if (temperature == 0) {
      next = static_cast<int32_t>(std::max_element(row, row + V) - row);
    } else {
      const double top = *std::max_element(row, row + V);
      std::vector<double> p(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) p[v] = std::exp((row[v] - top) / temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int64_t>(p.begin(), p.end())(rng));
    }
    if (next >= tok->vocab_size()) {
      // A model vocabulary larger than the tokenizer's (padding ids): nothing to decode.
      fmt::print("(stopped: the model chose id {}, outside the tokenizer's {} ids)\n", next, tok->vocab_size());
      break;
    }
    ids.push_back(next);
    generated.push_back(next);
    if (next == tok->eos_id()) break;
  }
  KILN_ASSIGN_OR_RETURN(std::string text, tok->decode(generated));
  fmt::print("ids: {}\n", fmt::join(generated, " "));
  fmt::print("{}{}\n", prompt, text);
  return ok_status();
}

}  // namespace

std::function<int()> add_sample_command(CLI::App& cmd) {
  struct Args {
    std::string dir;
    std::vector<std::string> settings;
  };
  auto args = std::make_shared<Args>();
  cmd.add_option("checkpoint", args->dir, "a checkpoint step directory, or a checkpoints directory (its latest)")
      ->required();
  cmd.add_option("settings", args->settings,
                 "prompt=\"...\" max_new_tokens=N temperature=T (0: greedy) seed=S [key=value ...]")
      ->type_name("key=value ...");
  return [args]() -> int {
    Status st = run_sample(args->dir, args->settings);
    return st.ok() ? kExitOk : report_error(st);
  };
}

}  // namespace kiln::app
