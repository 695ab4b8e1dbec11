// Learning-rate schedules with MaxText's formulas (maxtext_utils.create_learning_rate_schedule
// at HEAD, the version with WSD), in two forms that must agree: `learning_rate(g, ...)`
// builds the schedule as IR inside the training step (the step counter is an input of the
// step program, so the schedule fuses with the update), and `learning_rate_at` evaluates
// the same formula on the host in double precision (the reference for tests and logs).
//
// S = learning_rate_schedule_steps, Wu = floor(S * warmup_steps_fraction), peak = learning_rate,
// final = peak * learning_rate_final_fraction; pieces are joined as optax.join_schedules
// joins them (each piece sees the step counted from its own start):
//   warmup  [0, Wu):       optax.linear_schedule(0 -> peak over Wu - 1 steps): peak * s / (Wu - 1)
//                          (Wu == 1: 0; Wu == 0: no warmup piece)
//   cosine  [Wu, S):       a = (1 + cos(pi * s' / (C - 1))) / 2 with C = S - Wu (pct = 1 when C == 1),
//                          lr = peak * a + final * (1 - a)
//   wsd     [Wu, Wu + St): peak (stable, St = S - Wu - Dc, Dc = floor(S * wsd_decay_steps_fraction)),
//           [S - Dc, S):   linear peak -> final over Dc - 1 steps, or the cosine piece above over Dc
//   zero    [S, ...):      0, present only when steps > S (as in MaxText)
// The step is optax's count: the number of updates applied before this one (0 on the first step).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/base/status.h"
#include "kiln/config/config.h"
#include "kiln/frontend/tensor.h"

namespace kiln::optim {

struct ScheduleOptions {
  enum class Type { kCosine, kWsd };
  enum class DecayStyle { kLinear, kCosine };

  double learning_rate = 3e-5;  // peak
  Type type = Type::kCosine;
  double warmup_steps_fraction = 0.1;
  double final_fraction = 0.1;  // learning_rate_final_fraction
  double wsd_decay_steps_fraction = 0.1;
  DecayStyle wsd_decay_style = DecayStyle::kLinear;
  int64_t schedule_steps = 0;  // S, after MaxText's -1 rule (config derived())
  int64_t steps = 0;           // run length; the zero piece exists when steps > S

  // Reads learning_rate, lr_schedule_type, warmup_steps_fraction, learning_rate_final_fraction,
  // wsd_decay_steps_fraction, wsd_decay_style and derived steps / learning_rate_schedule_steps.
  static Result<ScheduleOptions> from_config(const config::Config& config);

  int64_t warmup_steps() const;       // Wu
  int64_t wsd_decay_steps() const;    // Dc
};

// Host reference, in double precision.
double learning_rate_at(const ScheduleOptions& options, int64_t step);

// The schedule as IR: `step` is an s32 scalar (optax's count), the result an f32 scalar.
frontend::Tensor learning_rate(const ScheduleOptions& options, const frontend::Tensor& step);

}  // namespace kiln::optim
