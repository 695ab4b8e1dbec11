// MaxText's skip_step_on_spikes on the trainer's side: a rolling window of the last
// `interval` steps' losses and raw gradient norms gives each step its limits,
// mean + scaling_factor × std (Bessel's correction) of each; the compiled step (step_program.h,
// the spike_limits argument) drops the update of a step above either limit. Until the window
// holds max(2, interval / 2) steps there is no limit. A skipped step's values enter the window
// too (a lasting shift becomes the new baseline), as in MaxText and OLMo-core.
//
// Difference from MaxText: the gradient norm compared is the raw one (before clipping), so a
// spike is seen even when clipping caps the applied norm; and the step counter (the schedule
// and Adam's bias correction) advances on a skipped step, as the data does.
//
// The window is training state: checkpoints hold it (to_json), so a resumed run skips exactly
// the steps the uninterrupted one would.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/status.h"

namespace kiln::train {

class SpikeWindow {
 public:
  SpikeWindow(int64_t interval, double scaling_factor);

  struct Limits {
    float loss, grad_norm;  // +inf: no limit (warm-up)
  };
  Limits limits() const;
  // Whether a step with these values is above its limits (as the step program decides).
  static bool above(const Limits& limits, double loss, double grad_norm);
  void record(double loss, double grad_norm);

  nlohmann::json to_json() const;
  // The window a checkpoint saved; an error names what does not fit this run's interval.
  Status restore(const nlohmann::json& saved);

 private:
  int64_t interval_;
  double factor_;
  std::vector<float> losses_, grad_norms_;
  int64_t count_ = 0;
};

}  // namespace kiln::train
