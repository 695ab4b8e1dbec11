#include "kiln/train/observability/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::train {

namespace {
// NaN prints as "nan" whatever its sign bit.
double shown(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

// ", expert_load (max/mean/dropped): [a/b/c, ...]" (or nothing).
std::string expert_load_text(const StepRecord& r) {
  if (r.expert_load.empty()) return "";
  std::vector<std::string> layers;
  for (size_t i = 0; i + 2 < r.expert_load.size(); i += 3) {
    layers.push_back(fmt::format("{:g}/{:g}/{:g}", r.expert_load[i], r.expert_load[i + 1], r.expert_load[i + 2]));
  }
  return fmt::format(", expert_load (max/mean/dropped): [{}]", fmt::join(layers, ", "));
}

// "12.34%", or "n/a" for a rate above the peak (peaks.h mfu_or_nan).
std::string mfu_text(double mfu) { return std::isnan(mfu) ? "n/a" : fmt::format("{:.2f}%", 100.0 * mfu); }

}  // namespace

std::string console_line(const StepRecord& r) {
  // MaxText prints total_weights as the integer token count.
  return fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}, lm_loss: {:.3f}, learning_rate: {:.3e}, grad_norm: {:.3f}, "
      "raw_grad_norm: {:.3f}, moe_lb_loss: {:.6f}, MFU: {}, data_wait: {:.3f}",
      r.step, r.step_time_s, r.tflops_per_s_per_device, r.tokens_per_s_per_device,
      static_cast<int64_t>(std::llround(r.total_weights)), shown(r.loss), shown(r.lm_loss), r.learning_rate,
      shown(r.grad_norm), shown(r.raw_grad_norm), shown(r.moe_lb_loss), mfu_text(r.mfu), r.data_wait_s) +
         (r.collective_wait_s >= 0 ? fmt::format(", collective_wait: {:.3f}", r.collective_wait_s) : "") +
         expert_load_text(r);
}

namespace {
// Shortest text that reads back to the same double; null for NaN and infinities.
std::string number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }
}  // namespace

// ", \"expert_load\": [[max, mean, dropped], ...]" (or nothing).
std::string expert_load_json(const StepRecord& r) {
  if (r.expert_load.empty()) return "";
  std::vector<std::string> layers;
  for (size_t i = 0; i + 2 < r.expert_load.size(); i += 3) {
    layers.push_back(fmt::format("[{}, {}, {}]", number(r.expert_load[i]), number(r.expert_load[i + 1]),
                                 number(r.expert_load[i + 2])));
  }
  return fmt::format(", \"expert_load\": [{}]", fmt::join(layers, ", "));
}

std::string json_line(const StepRecord& r) {
  std::string line = fmt::format(
      "{{\"step\": {}, \"loss\": {}, \"lm_loss\": {}, \"total_weights\": {}, \"moe_lb_loss\": {}, "
      "\"z_loss\": {}, \"grad_norm\": {}, \"raw_grad_norm\": {}, \"param_norm\": {}, \"learning_rate\": {}, "
      "\"step_time_s\": {}, \"data_wait_s\": {}, \"tokens_per_s_per_device\": {}, \"tflops_per_s_per_device\": {}, "
      "\"mfu\": {}}}",
      r.step, number(r.loss), number(r.lm_loss), number(r.total_weights), number(r.moe_lb_loss), number(r.z_loss),
      number(r.grad_norm), number(r.raw_grad_norm), number(r.param_norm), number(r.learning_rate),
      number(r.step_time_s), number(r.data_wait_s), number(r.tokens_per_s_per_device),
      number(r.tflops_per_s_per_device), number(r.mfu));
  if (r.collective_wait_s >= 0) {
    line.insert(line.size() - 1, fmt::format(", \"collective_wait_s\": {}", number(r.collective_wait_s)));
  }
  if (r.goodput >= 0) line.insert(line.size() - 1, fmt::format(", \"goodput\": {}", number(r.goodput)));
  if (r.skipped) line.insert(line.size() - 1, ", \"skipped\": true");
  if (!r.expert_load.empty()) line.insert(line.size() - 1, expert_load_json(r));  // before the closing brace
  if (!r.batch_hash.empty()) line.insert(line.size() - 1, fmt::format(", \"batch_hash\": \"{}\"", r.batch_hash));
  if (!r.data_tokens.empty()) {
    nlohmann::json tokens = nlohmann::json::object();
    for (const auto& [name, count] : r.data_tokens) tokens[name] = count;
    line.insert(line.size() - 1, ", \"data_tokens\": " + tokens.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return line;
}

JsonlWriter::~JsonlWriter() { close(); }

Result<JsonlWriter::History> JsonlWriter::open_continuing(const std::string& path, int64_t flush_period,
                                                           int64_t first_step) {
  namespace fs = std::filesystem;
  close();
  History h;
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) return io_error("cannot create directory {}: {}", p.parent_path().string(), ec.message());
  std::string text;
  if (fs::exists(p, ec)) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    if (!in && !in.eof()) return io_error("cannot read {} to continue it", path);
    text = all.str();
  }
  // Walk the lines: a kept record is a whole line holding a JSON object whose integer "step"
  // is below first_step and above the last kept one.
  std::string kept, discarded;
  size_t cut = 0;             // the file up to here is exactly the kept records
  bool kept_is_prefix = true;  // no dropped line before a kept one
  int64_t last_step = -1;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const bool whole = nl != std::string::npos;
    const std::string_view line = std::string_view(text).substr(pos, (whole ? nl : text.size()) - pos);
    pos = whole ? nl + 1 : text.size();
    nlohmann::json j = whole ? nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false) : nlohmann::json();
    const bool record = whole && j.is_object() && j.contains("step") && j["step"].is_number_integer();
    if (record && j["step"].get<int64_t>() < first_step && j["step"].get<int64_t>() > last_step) {
      last_step = j["step"].get<int64_t>();
      kept.append(line).push_back('\n');
      ++h.kept;
      if (kept_is_prefix) cut = pos;
      continue;
    }
    if (record) {
      ++h.dropped;
      if (j["step"].get<int64_t>() >= first_step && j.contains("step_time_s") && j["step_time_s"].is_number()) {
        h.dropped_step_s += j["step_time_s"].get<double>();
      }
    }
    else if (!line.empty()) ++h.torn;
    if (!line.empty()) discarded.append(line).push_back('\n');
    kept_is_prefix = false;
  }
  if (!discarded.empty()) {
    // Appended first: a crash between the two writes keeps a line twice, never loses one.
    h.discarded_path = path + ".discarded";
    std::FILE* d = std::fopen(h.discarded_path.c_str(), "a");
    if (d == nullptr || std::fwrite(discarded.data(), 1, discarded.size(), d) != discarded.size() ||
        std::fclose(d) != 0) {
      return io_error("cannot write the dropped records of {} to {}: {}", path, h.discarded_path,
                      std::strerror(errno));
    }
  }
  if (cut != text.size()) {
    if (kept_is_prefix) {
      fs::resize_file(p, cut, ec);
      if (ec) return io_error("cannot cut {} after its last kept record: {}", path, ec.message());
    } else {
      const std::string tmp = path + ".tmp";
      std::FILE* f = std::fopen(tmp.c_str(), "w");
      if (f == nullptr || std::fwrite(kept.data(), 1, kept.size(), f) != kept.size() || std::fflush(f) != 0 ||
          fsync(fileno(f)) != 0 || std::fclose(f) != 0) {
        return io_error("cannot write {}: {}", tmp, std::strerror(errno));
      }
      fs::rename(tmp, p, ec);
      if (ec) return io_error("cannot replace {}: {}", path, ec.message());
    }
  }
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) return io_error("cannot open {} for appending: {}", path, std::strerror(errno));
  path_ = path;
  flush_period_ = flush_period < 1 ? 1 : flush_period;
  pending_ = 0;
  return h;
}

Status JsonlWriter::write(const StepRecord& r) {
  if (file_ == nullptr) return failed_precondition("metrics file is not open");
  std::string line = json_line(r);
  line += '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size()) {
    return io_error("cannot write to {}: {}", path_, std::strerror(errno));
  }
  if (++pending_ >= flush_period_) return flush();
  return ok_status();
}

Status JsonlWriter::flush() {
  if (file_ == nullptr) return ok_status();
  pending_ = 0;
  if (std::fflush(file_) != 0) return io_error("cannot write to {}: {}", path_, std::strerror(errno));
  return ok_status();
}

void JsonlWriter::close() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

}  // namespace kiln::train
