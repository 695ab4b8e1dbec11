#include "kiln/train/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

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

}  // namespace

std::string console_line(const StepRecord& r) {
  // MaxText prints total_weights as the integer token count.
  return fmt::format(
      "completed step: {}, seconds: {:.3f}, TFLOP/s/device: {:.3f}, Tokens/s/device: {:.3f}, "
      "total_weights: {}, loss: {:.3f}, lm_loss: {:.3f}, learning_rate: {:.3e}, grad_norm: {:.3f}, "
      "raw_grad_norm: {:.3f}, moe_lb_loss: {:.6f}, MFU: {:.2f}%, data_wait: {:.3f}",
      r.step, r.step_time_s, r.tflops_per_s_per_device, r.tokens_per_s_per_device,
      static_cast<int64_t>(std::llround(r.total_weights)), shown(r.loss), shown(r.lm_loss), r.learning_rate,
      shown(r.grad_norm), shown(r.raw_grad_norm), shown(r.moe_lb_loss), 100.0 * r.mfu, r.data_wait_s) +
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
  if (!r.expert_load.empty()) line.insert(line.size() - 1, expert_load_json(r));  // before the closing brace
  return line;
}

JsonlWriter::~JsonlWriter() { close(); }

Status JsonlWriter::open(const std::string& path, int64_t flush_period) {
  close();
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  if (ec) return io_error("cannot create directory {}: {}", p.parent_path().string(), ec.message());
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) return io_error("cannot open {} for writing: {}", path, std::strerror(errno));
  path_ = path;
  flush_period_ = flush_period < 1 ? 1 : flush_period;
  pending_ = 0;
  return ok_status();
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
