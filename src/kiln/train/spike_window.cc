#include "kiln/train/spike_window.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::train {

namespace {

// Mean and unbiased standard deviation of the first min(count, interval) values.
std::pair<double, double> stats(const std::vector<float>& values, int64_t count) {
  const int64_t n = std::min<int64_t>(count, static_cast<int64_t>(values.size()));
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += values[i];
  mean /= static_cast<double>(std::max<int64_t>(1, n));
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (values[i] - mean) * (values[i] - mean);
  var /= static_cast<double>(std::max<int64_t>(1, n - 1));
  return {mean, std::sqrt(var)};
}

}  // namespace

SpikeWindow::SpikeWindow(int64_t interval, double scaling_factor)
    : interval_(interval), factor_(scaling_factor), losses_(interval, 0.0f), grad_norms_(interval, 0.0f) {}

SpikeWindow::Limits SpikeWindow::limits() const {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (count_ + 1 < std::max<int64_t>(2, interval_ / 2)) return {kInf, kInf};
  const auto [lm, ls] = stats(losses_, count_);
  const auto [gm, gs] = stats(grad_norms_, count_);
  return {static_cast<float>(lm + factor_ * ls), static_cast<float>(gm + factor_ * gs)};
}

bool SpikeWindow::above(const Limits& limits, double loss, double grad_norm) {
  // The step program compares float32 values: so does this.
  return !(static_cast<float>(loss) <= limits.loss && static_cast<float>(grad_norm) <= limits.grad_norm);
}

void SpikeWindow::record(double loss, double grad_norm) {
  const size_t at = static_cast<size_t>(count_ % interval_);
  losses_[at] = static_cast<float>(loss);
  grad_norms_[at] = static_cast<float>(grad_norm);
  ++count_;
}

nlohmann::json SpikeWindow::to_json() const {
  return {{"interval", interval_}, {"count", count_}, {"losses", losses_}, {"grad_norms", grad_norms_}};
}

Status SpikeWindow::restore(const nlohmann::json& saved) {
  if (!saved.is_object() || !saved.contains("losses") || !saved.contains("grad_norms") || !saved.contains("count")) {
    return data_loss("the checkpoint's spike_window is malformed");
  }
  std::vector<float> losses = saved["losses"].get<std::vector<float>>();
  std::vector<float> norms = saved["grad_norms"].get<std::vector<float>>();
  if (static_cast<int64_t>(losses.size()) != interval_ || norms.size() != losses.size()) {
    return invalid_argument("skip_step_interval={}: the checkpoint's spike window holds {} steps; resume with "
                            "skip_step_interval={}",
                            interval_, losses.size(), losses.size());
  }
  losses_ = std::move(losses);
  grad_norms_ = std::move(norms);
  count_ = saved["count"].get<int64_t>();
  return ok_status();
}

}  // namespace kiln::train
