#include "kiln/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"

namespace kiln::optim {

using frontend::Tensor;

Result<ScheduleOptions> ScheduleOptions::from_config(const config::Config& config) {
  ScheduleOptions o;
  o.learning_rate = config.get_float("learning_rate");
  const std::string& type = config.get_string("lr_schedule_type");
  if (type == "cosine") {
    o.type = Type::kCosine;
  } else if (type == "wsd") {
    o.type = Type::kWsd;
  } else {
    return invalid_argument("lr_schedule_type={}: expected cosine or wsd", type);
  }
  const std::string& style = config.get_string("wsd_decay_style");
  if (style == "linear") {
    o.wsd_decay_style = DecayStyle::kLinear;
  } else if (style == "cosine") {
    o.wsd_decay_style = DecayStyle::kCosine;
  } else {
    return invalid_argument("wsd_decay_style={}: expected linear or cosine", style);
  }
  o.warmup_steps_fraction = config.get_float("warmup_steps_fraction");
  o.final_fraction = config.get_float("learning_rate_final_fraction");
  o.wsd_decay_steps_fraction = config.get_float("wsd_decay_steps_fraction");
  o.schedule_steps = config.derived().learning_rate_schedule_steps;
  o.steps = config.derived().steps;
  if (o.schedule_steps < 1) {
    return invalid_argument("learning_rate_schedule_steps={}: expected a positive step count", o.schedule_steps);
  }
  return o;
}

// int(S * fraction), as MaxText truncates.
int64_t ScheduleOptions::warmup_steps() const {
  return static_cast<int64_t>(static_cast<double>(schedule_steps) * warmup_steps_fraction);
}
int64_t ScheduleOptions::wsd_decay_steps() const {
  return static_cast<int64_t>(static_cast<double>(schedule_steps) * wsd_decay_steps_fraction);
}

namespace {

// One piece of the joined schedule. `kind` picks the formula; the piece sees the step
// counted from `start` (optax.join_schedules).
struct Piece {
  enum class Kind { kLinear, kCosine, kConstant };
  Kind kind;
  int64_t start = 0;
  double init = 0, end = 0;  // linear / cosine endpoints; constant uses init
  int64_t length = 0;        // linear: transition steps; cosine: len_steps
};

// The pieces in MaxText's order; piece i starts at boundary i - 1 (piece 0 at 0).
std::vector<Piece> pieces(const ScheduleOptions& o) {
  const double peak = o.learning_rate, final_lr = peak * o.final_fraction;
  const int64_t S = o.schedule_steps, warmup = o.warmup_steps();
  std::vector<Piece> out;
  std::vector<int64_t> boundaries;
  if (warmup > 0) {
    // optax.linear_schedule(0, peak, transition_steps=warmup - 1)
    out.push_back({Piece::Kind::kLinear, 0, 0.0, peak, warmup - 1});
    boundaries.push_back(warmup);
  }
  if (o.type == ScheduleOptions::Type::kCosine) {
    int64_t cos_steps = S - warmup;
    if (cos_steps > 0) {
      out.push_back({Piece::Kind::kCosine, 0, peak, final_lr, cos_steps});
      boundaries.push_back(warmup + cos_steps);
    }
  } else {
    int64_t decay = o.wsd_decay_steps();
    int64_t stable = S - warmup - decay;
    if (stable > 0) {
      out.push_back({Piece::Kind::kConstant, 0, peak, peak, 0});
      boundaries.push_back(warmup + stable);
    }
    if (decay > 0) {
      if (o.wsd_decay_style == ScheduleOptions::DecayStyle::kLinear) {
        out.push_back({Piece::Kind::kLinear, 0, peak, final_lr, decay - 1});
      } else {
        out.push_back({Piece::Kind::kCosine, 0, peak, final_lr, decay});
      }
      boundaries.push_back(warmup + stable + decay);
    }
  }
  if (o.steps - S > 0) {
    out.push_back({Piece::Kind::kConstant, 0, 0.0, 0.0, 0});
    boundaries.push_back(S);
  }
  // join_schedules: schedule i + 1 takes over at boundaries[i].
  for (size_t i = 1; i < out.size(); ++i) out[i].start = boundaries[i - 1];
  if (out.empty()) out.push_back({Piece::Kind::kConstant, 0, 0.0, 0.0, 0});
  return out;
}

double piece_at(const Piece& p, int64_t s) {
  switch (p.kind) {
    case Piece::Kind::kConstant:
      return p.init;
    case Piece::Kind::kLinear: {
      // optax.polynomial_schedule with power 1; a non-positive transition is constant init.
      if (p.length <= 0) return p.init;
      double count = static_cast<double>(std::clamp<int64_t>(s, 0, p.length));
      double frac = 1.0 - count / static_cast<double>(p.length);
      return (p.init - p.end) * frac + p.end;
    }
    case Piece::Kind::kCosine: {
      double pct = p.length > 1 ? static_cast<double>(s) / static_cast<double>(p.length - 1) : 1.0;
      double a = 0.5 * (std::cos(M_PI * pct) + 1.0);
      return p.init * a + p.end * (1.0 - a);
    }
  }
  return 0.0;
}

// The same formulas as IR, in float32 (as optax evaluates them under jit).
Tensor piece_ir(const Piece& p, const Tensor& step) {
  frontend::Graph& g = *step.graph();
  switch (p.kind) {
    case Piece::Kind::kConstant:
      return g.scalar(p.init);
    case Piece::Kind::kLinear: {
      if (p.length <= 0) return g.scalar(p.init);
      Tensor count = clip(step - static_cast<double>(p.start), 0.0, static_cast<double>(p.length))
                         .astype(frontend::DType::kF32);
      Tensor frac = 1.0 - count / static_cast<double>(p.length);
      return frac * (p.init - p.end) + p.end;
    }
    case Piece::Kind::kCosine: {
      if (p.length <= 1) return g.scalar(p.end);  // pct = 1: a = 0
      Tensor local = (step - static_cast<double>(p.start)).astype(frontend::DType::kF32);
      Tensor pct = local / static_cast<double>(p.length - 1);
      Tensor a = (cos(pct * M_PI) + 1.0) * 0.5;
      return a * p.init + (1.0 - a) * p.end;
    }
  }
  return g.scalar(0.0);
}

}  // namespace

double learning_rate_at(const ScheduleOptions& options, int64_t step) {
  std::vector<Piece> ps = pieces(options);
  double out = piece_at(ps[0], step);
  for (size_t i = 1; i < ps.size(); ++i) {
    if (step >= ps[i].start) out = piece_at(ps[i], step - ps[i].start);
  }
  return out;
}

Tensor learning_rate(const ScheduleOptions& options, const Tensor& step) {
  KILN_CHECK(step.dtype() == frontend::DType::kS32 && step.rank() == 0)
      << "the schedule's step must be an s32 scalar, got " << step.shape().to_string();
  frontend::Graph& g = *step.graph();
  auto scope = g.scope("learning_rate_schedule");
  std::vector<Piece> ps = pieces(options);
  Tensor out = piece_ir(ps[0], step);
  for (size_t i = 1; i < ps.size(); ++i) {
    out = where(step >= static_cast<double>(ps[i].start), piece_ir(ps[i], step), out);
  }
  return out.named("learning_rate");
}

}  // namespace kiln::optim
