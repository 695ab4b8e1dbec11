// kiln forward CHECKPOINT_DIR tokens=FILE out=LOGITS.npy [key=value ...]: runs a checkpoint's
// model (compiled forward pass, apps/forward_program.h) on token ids and writes the logits
// f32 [B, T, V] to out and the per-token loss f32 [B, T] to loss_out (default: out with
// ".loss.npy"): loss[b, t] = -log p(ids[b, t+1] | ids[b, :t+1]), 0 where there is no next
// token (the last token of a row, padding). The tool for parity checks against other
// implementations.
//
// tokens: a .npy of ids ([N]: one sequence; [B, N]: B sequences) or a token shard (one row
// per document, shorter ones padded: segment 0, no loss). Other key=value pairs override
// the checkpoint's saved config.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "command.h"
#include "forward_program.h"
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

Status run_forward(const std::string& dir, const std::vector<std::string>& settings) {
  std::string tokens_path, out_path, loss_path;
  std::vector<std::string> overrides;
  for (const std::string& s : settings) {
    if (s.starts_with("tokens=")) tokens_path = s.substr(7);
    else if (s.starts_with("out=")) out_path = s.substr(4);
    else if (s.starts_with("loss_out=")) loss_path = s.substr(9);
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
  cmd.add_option("settings", args->settings, "tokens=FILE out=LOGITS.npy [loss_out=LOSS.npy] [key=value ...]")
      ->type_name("key=value ...");
  return [args]() -> int {
    Status st = run_forward(args->dir, args->settings);
    return st.ok() ? kExitOk : report_error(st);
  };
}

}  // namespace kiln::app
