// kiln forward CHECKPOINT_DIR tokens=FILE out=LOGITS.npy [grads_out=FILE] [key=value ...]:
// runs a checkpoint's model (compiled forward pass, apps/forward_program.h) on token ids
// and writes the logits f32 [B, T, V] to out and the per-token loss f32 [B, T] to loss_out
// (default: out with ".loss.npy"): loss[b, t] = -log p(ids[b, t+1] | ids[b, :t+1]), 0
// where there is no next token (the last token of a row, padding). The tool for parity
// checks against other implementations.
//
// tokens: a .npy of ids ([N]: one sequence; [B, N]: B sequences) or a token shard (one row
// per document, shorter ones padded: segment 0, no loss). Other key=value pairs override
// the checkpoint's saved config.
//
// grads_out=GRADS.safetensors also runs the training step's gradient on the same rows
// (ForwardProgram::gradients: the loss the trainer differentiates, with the tokens that
// have a next token counted and the aux terms weighted as configured, so
// load_balance_loss_weight=0 z_loss_multiplier=0 leave the mean cross-entropy) and writes
// d loss / d param for every parameter under its Hugging Face name (the names
// `kiln convert --to hf` gives the weights, kiln/checkpoint/hf_gpt_oss.h: the mapping is a
// permutation, so it moves gradients as it moves weights), with the loss and its terms in
// the file's metadata. scripts/parity.sh compares them with transformers'.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <fmt/format.h>

#include "command.h"
#include "forward_program.h"
#include "kiln/checkpoint/hf_family.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/data/shard.h"
#include "npy.h"

namespace kiln::app {

namespace {

struct TokenRows {
  int64_t batch = 0, len = 0;
  std::vector<int32_t> ids;      // [batch, len]
  std::vector<int64_t> lengths;  // per row: tokens before the padding
};

Result<TokenRows> read_tokens(const std::string& path) {
  TokenRows rows;
  if (path.ends_with(".npy")) {
    KILN_ASSIGN_OR_RETURN(NpyIds npy, read_npy_ids(path));
    rows.batch = npy.dims.size() == 2 ? npy.dims[0] : 1;
    rows.len = npy.dims.back();
    for (int64_t v : npy.values) {
      if (v < 0 || v > INT32_MAX) return invalid_argument("tokens={}: id {} is not a token id", path, v);
      rows.ids.push_back(static_cast<int32_t>(v));
    }
    rows.lengths.assign(static_cast<size_t>(rows.batch), rows.len);
  } else {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<data::Shard> shard, data::Shard::open(path));
    rows.batch = shard->num_documents();
    for (int64_t i = 0; i < rows.batch; ++i) rows.len = std::max(rows.len, shard->document_size(i));
    rows.ids.assign(static_cast<size_t>(rows.batch * rows.len), 0);
    for (int64_t i = 0; i < rows.batch; ++i) {
      std::vector<int32_t> doc = shard->document(i);
      std::copy(doc.begin(), doc.end(), rows.ids.begin() + i * rows.len);
      rows.lengths.push_back(static_cast<int64_t>(doc.size()));
    }
  }
  if (rows.batch == 0 || rows.len == 0) return invalid_argument("tokens={} holds no tokens", path);
  return rows;
}

// The training step's gradient on `rows` (each row's tokens that have a next token count),
// written to `path` under Hugging Face names.
Status write_gradients(ForwardProgram& program, const TokenRows& rows, const std::vector<int32_t>& targets,
                       const std::vector<int32_t>& positions, const std::string& path) {
  // Segment 0 for a token without a target (the last of a row, padding): not counted. It
  // sits after every counted token of its row, so the causal mask keeps it out of their
  // attention and the counted tokens' logits are the forward pass's.
  std::vector<int32_t> counted(rows.ids.size(), 0);
  for (int64_t b = 0; b < rows.batch; ++b) {
    for (int64_t t = 0; t + 1 < rows.lengths[b]; ++t) counted[b * rows.len + t] = 1;
  }
  KILN_ASSIGN_OR_RETURN(GradientOutputs out, program.gradients(rows.ids, targets, positions, counted));
  checkpoint::TensorMap kiln;
  const std::vector<models::ParamSpec>& specs = program.model().params();
  for (size_t i = 0; i < specs.size(); ++i) kiln.emplace(specs[i].name, std::move(out.grads.at(i)));
  const std::string& block = program.config().get_string("decoder_block");
  KILN_ASSIGN_OR_RETURN(const checkpoint::HfFamily* family, checkpoint::hf_family_for_block(block));
  Result<checkpoint::TensorMap> hf = family->to_hf(kiln, program.config().to_yaml());
  if (!hf.ok()) return hf.status().with_context("grads_out=" + path + ": naming the gradients as Hugging Face's");
  std::vector<checkpoint::NamedTensor> named;
  for (const auto& [name, t] : *hf) named.emplace_back(name, &t);
  const std::map<std::string, std::string> metadata = {
      {"format", "kiln-gradients"},
      {"step", std::to_string(program.step())},
      {"loss", fmt::format("{:.9g}", out.loss)},
      {"xent_sum", fmt::format("{:.9g}", out.xent_sum)},
      {"total_weights", fmt::format("{:.9g}", out.total_weights)},
      {"moe_lb_loss", fmt::format("{:.9g}", out.moe_lb_loss)},
      {"z_loss", fmt::format("{:.9g}", out.z_loss)}};
  KILN_RETURN_IF_ERROR(checkpoint::write_safetensors(path, named, metadata));
  fmt::print("training loss {:.6f} (cross-entropy {:.6f} over {} tokens, moe_lb_loss {:.6f}, z_loss {:.6f}); "
             "wrote its gradient for {} parameters (Hugging Face names) to {}\n",
             out.loss, out.xent_sum / std::max(out.total_weights, 1.0), out.total_weights, out.moe_lb_loss, out.z_loss,
             named.size(), path);
  return ok_status();
}

Status run_forward(const std::string& dir, const std::vector<std::string>& settings) {
  std::string tokens_path, out_path, loss_path, grads_path;
  std::vector<std::string> overrides;
  for (const std::string& s : settings) {
    if (s.starts_with("tokens=")) tokens_path = s.substr(7);
    else if (s.starts_with("out=")) out_path = s.substr(4);
    else if (s.starts_with("loss_out=")) loss_path = s.substr(9);
    else if (s.starts_with("grads_out=")) grads_path = s.substr(10);
    else overrides.push_back(s);
  }
  if (tokens_path.empty() || out_path.empty()) {
    return invalid_argument("kiln forward needs tokens=FILE (.npy of ids or a token shard) and out=LOGITS.npy");
  }
  if (loss_path.empty()) {
    loss_path = (out_path.ends_with(".npy") ? out_path.substr(0, out_path.size() - 4) : out_path) + ".loss.npy";
  }
  KILN_ASSIGN_OR_RETURN(TokenRows rows, read_tokens(tokens_path));
  const int64_t B = rows.batch, T = rows.len;
  std::vector<int32_t> targets(rows.ids.size(), 0), positions(rows.ids.size(), 0), segments(rows.ids.size(), 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < rows.lengths[b]; ++t) {
      positions[b * T + t] = static_cast<int32_t>(t);
      segments[b * T + t] = 1;
      if (t + 1 < rows.lengths[b]) targets[b * T + t] = rows.ids[b * T + t + 1];
    }
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ForwardProgram> program, ForwardProgram::load(dir, overrides, B, T));
  fmt::print("kiln forward: checkpoint {} (step {}), {} x {} tokens\n", program->step_dir(), program->step(), B, T);
  for (int32_t id : rows.ids) {
    if (id >= program->vocab_size()) {
      return invalid_argument("tokens={}: id {} is outside the model's vocabulary (vocab_size={})", tokens_path, id,
                              program->vocab_size());
    }
  }
  KILN_ASSIGN_OR_RETURN(ForwardOutputs out, program->run(rows.ids, targets, positions, segments));
  std::vector<float> logits(out.logits.values().begin(), out.logits.values().end());
  std::vector<float> loss(static_cast<size_t>(B * T), 0.0f);
  double sum = 0;
  int64_t counted = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t + 1 < rows.lengths[b]; ++t) {
      loss[b * T + t] = static_cast<float>(out.loss.at(b * T + t));
      sum += loss[b * T + t];
      ++counted;
    }
  }
  KILN_RETURN_IF_ERROR(write_npy_f32(out_path, {B, T, program->vocab_size()}, logits));
  KILN_RETURN_IF_ERROR(write_npy_f32(loss_path, {B, T}, loss));
  fmt::print("wrote logits f32[{},{},{}] to {} and per-token loss f32[{},{}] to {}\n", B, T, program->vocab_size(),
             out_path, B, T, loss_path);
  fmt::print("mean loss over {} predicted tokens: {:.6f} (perplexity {:.3f})\n", counted,
             counted ? sum / counted : 0.0, counted ? std::exp(sum / counted) : 1.0);
  if (!grads_path.empty()) KILN_RETURN_IF_ERROR(write_gradients(*program, rows, targets, positions, grads_path));
  return ok_status();
}

}  // namespace

std::function<int()> add_forward_command(CLI::App& cmd) {
  struct Args {
    std::string dir;
    std::vector<std::string> settings;
  };
  auto args = std::make_shared<Args>();
  cmd.add_option("checkpoint", args->dir, "a checkpoint step directory, or a checkpoints directory (its latest)")
      ->required();
  cmd.add_option("settings", args->settings,
                 "tokens=FILE out=LOGITS.npy [loss_out=LOSS.npy] [grads_out=GRADS.safetensors] [key=value ...]")
      ->type_name("key=value ...");
  return [args]() -> int {
    Status st = run_forward(args->dir, args->settings);
    return st.ok() ? kExitOk : report_error(st);
  };
}

}  // namespace kiln::app
