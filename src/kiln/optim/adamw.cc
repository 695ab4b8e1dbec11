#include "kiln/optim/adamw.h"

#include <algorithm>
#include <regex>

#include "kiln/base/check.h"
#include "kiln/frontend/graph.h"

namespace kiln::optim {

using frontend::DType;
using frontend::Tensor;

Result<AdamWOptions> AdamWOptions::from_config(const config::Config& config) {
  if (config.get_string("opt_type") != "adamw") {
    return unimplemented("opt_type={}: only adamw is implemented", config.get_string("opt_type"));
  }
  AdamWOptions o;
  o.b1 = config.get_float("adam_b1");
  o.b2 = config.get_float("adam_b2");
  o.eps = config.get_float("adam_eps");
  o.eps_root = config.get_float("adam_eps_root");
  o.weight_decay = config.get_float("adam_weight_decay");
  o.mask = config.get_string_list("adamw_mask");
  const std::string& mu = config.derived().mu_dtype;
  if (mu == "float32") {
    o.mu_dtype = DType::kF32;
  } else if (mu == "bfloat16") {
    o.mu_dtype = DType::kBF16;
  } else {
    return invalid_argument("mu_dtype={}: expected float32 or bfloat16", mu);
  }
  return o;
}

Result<std::vector<bool>> weight_decay_mask(std::span<const std::string> names,
                                            std::span<const std::string> patterns) {
  std::vector<std::regex> compiled;
  for (const std::string& p : patterns) {
    try {
      compiled.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return invalid_argument("adamw_mask: '{}' is not a valid regular expression ({})", p, e.what());
    }
  }
  std::vector<bool> decay;
  for (const std::string& name : names) {
    std::string slashed = name;
    std::replace(slashed.begin(), slashed.end(), '.', '/');
    bool excluded = std::any_of(compiled.begin(), compiled.end(), [&](const std::regex& re) {
      return std::regex_search(name, re) || std::regex_search(slashed, re);
    });
    decay.push_back(!excluded);
  }
  return decay;
}

namespace {
Tensor scalar_pow(frontend::Graph& g, double base, const Tensor& exponent) {
  Tensor b = g.scalar(base, exponent.dtype());
  return Tensor(&g, g.builder().binary(ir::Opcode::kPow, b.instr(), exponent.instr()));
}
}  // namespace

AdamWResult adamw_update(const AdamWOptions& o, std::span<const Tensor> params, std::span<const Tensor> grads,
                         std::span<const Tensor> mu, std::span<const Tensor> nu, const Tensor& step,
                         const Tensor& learning_rate, const std::vector<bool>& decay) {
  size_t n = params.size();
  KILN_CHECK(grads.size() == n && mu.size() == n && nu.size() == n && decay.size() == n)
      << "adamw_update: " << n << " params, " << grads.size() << " grads, " << mu.size() << " mu, "
      << nu.size() << " nu, " << decay.size() << " decay flags";
  KILN_CHECK(step.dtype() == DType::kS32 && step.rank() == 0) << "adamw_update: step must be an s32 scalar";
  frontend::Graph& g = *step.graph();
  auto scope = g.scope("adamw");
  // Bias corrections at count c + 1 (optax's safe_increment of the count).
  Tensor count = (step + 1.0).astype(DType::kF32);
  Tensor bc1 = (1.0 - scalar_pow(g, o.b1, count)).named("bias_correction_1");
  Tensor bc2 = (1.0 - scalar_pow(g, o.b2, count)).named("bias_correction_2");
  Tensor step_size = (-learning_rate.astype(DType::kF32)).named("step_size");
  AdamWResult out;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& p = params[i];
    Tensor gi = grads[i].astype(DType::kF32);
    Tensor m = gi * (1.0 - o.b1) + mu[i].astype(DType::kF32) * o.b1;
    Tensor v = square(gi) * (1.0 - o.b2) + nu[i].astype(DType::kF32) * o.b2;
    Tensor m_hat = m / bc1;
    Tensor v_hat = v / bc2;
    // eps_root = 0 (the default) adds nothing to nu_hat >= 0, so the add is left out.
    Tensor u = m_hat / (sqrt(o.eps_root != 0.0 ? v_hat + o.eps_root : v_hat) + o.eps);
    Tensor pf = p.astype(DType::kF32);
    if (decay[i] && o.weight_decay != 0.0) u = u + pf * o.weight_decay;
    out.params.push_back((pf + u * step_size).astype(p.dtype()));
    out.mu.push_back(m.astype(o.mu_dtype));
    out.nu.push_back(v.astype(nu[i].dtype()));
  }
  return out;
}

}  // namespace kiln::optim
