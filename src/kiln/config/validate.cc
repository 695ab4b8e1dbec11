#include "kiln/config/validate.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/strings.h"
#include "kiln/config/compile_topology.h"
#include "kiln/config/remat_policies.h"

namespace kiln::config {
namespace {

// "key=value" as the user would write it, for the start of a message.
std::string setting(const Config& c, std::string_view key) {
  return fmt::format("{}={}", key, c.get(key).to_yaml());
}

std::string show_choices(const std::vector<std::string>& choices) {
  std::vector<std::string> shown;
  for (const auto& c : choices) shown.push_back(c.empty() ? "\"\"" : c);
  return fmt::format("{}", fmt::join(shown, ", "));
}

Status check_enum(const Config& c, const std::string& key, const std::vector<std::string>& choices) {
  auto check_one = [&](const Value& v) -> Status {
    const std::string& s = v.as_string();
    if (std::find(choices.begin(), choices.end(), s) != choices.end()) return ok_status();
    std::string match = closest_match(s, choices);
    return invalid_argument("{}: {} is not accepted; expected one of {}{}", setting(c, key),
                            s.empty() ? "\"\"" : s, show_choices(choices),
                            match.empty() ? "" : fmt::format(" (did you mean {}?)", match));
  };
  const Value& v = c.get(key);
  if (!v.is_list()) return check_one(v);
  for (const auto& item : v.as_list()) {
    if (item.kind() != ValueKind::kString) {
      return invalid_argument("{}: expected a list of names from {}", setting(c, key),
                              show_choices(choices));
    }
    KILN_RETURN_IF_ERROR(check_one(item));
  }
  return ok_status();
}

// Integer keys that must be at least `min`.
Status check_int_ranges(const Config& c) {
  static const std::vector<std::pair<const char*, int64_t>> kMinimums = {
      {"global_parameter_scale", 1}, {"base_emb_dim", 1}, {"base_num_query_heads", 1},
      {"base_num_kv_heads", 1}, {"head_dim", 1}, {"base_mlp_dim", 1},
      {"base_moe_mlp_dim", 1}, {"base_num_decoder_layers", 1}, {"vocab_size", 1},
      {"num_experts", 1}, {"num_experts_per_tok", 1}, {"max_target_length", 1},
      {"gradient_accumulation_steps", 1}, {"inhomogeneous_layer_cycle_interval", 1},
      {"sliding_window_size", 0}, {"num_slices", 1}, {"log_period", 1},
      {"checkpoint_period", 1}, {"reuse_example_batch", 0}, {"profiler_steps", 1},
      {"skip_first_n_steps_for_profiler", 0}, {"sa_block_q", 1}, {"sa_block_kv", 1}};
  for (const auto& [key, min] : kMinimums) {
    if (c.get_int(key) < min) {
      return invalid_argument("{}: expected an integer >= {}", setting(c, key), min);
    }
  }
  return ok_status();
}

// Float keys and the interval they must lie in; `open_low`/`open_high` exclude the bound.
Status check_float_ranges(const Config& c) {
  struct Range {
    const char* key;
    double low, high;
    bool open_low, open_high;
  };
  static const std::vector<Range> kRanges = {
      {"per_device_batch_size", 0, INFINITY, true, true},
      {"learning_rate", 0, INFINITY, false, true},
      {"warmup_steps_fraction", 0, 1, false, false},
      {"learning_rate_final_fraction", 0, 1, false, false},
      {"wsd_decay_steps_fraction", 0, 1, false, false},
      {"adam_b1", 0, 1, false, true},
      {"adam_b2", 0, 1, false, true},
      {"adam_eps", 0, INFINITY, false, true},
      {"adam_eps_root", 0, INFINITY, false, true},
      {"adam_weight_decay", 0, INFINITY, false, true},
      {"gradient_clipping_threshold", 0, INFINITY, false, true},
      {"normalization_layer_epsilon", 0, INFINITY, true, true},
      {"dropout_rate", 0, 1, false, true},
      {"load_balance_loss_weight", 0, INFINITY, false, true},
      {"z_loss_multiplier", 0, INFINITY, false, true},
      {"hardware_peak_tflops", 0, INFINITY, false, true},  // 0: measured
      {"rope_max_timescale", 0, INFINITY, true, true},
      {"rope_factor", 0, INFINITY, true, true},
  };
  for (const auto& r : kRanges) {
    double v = c.get_float(r.key);
    bool ok = !std::isnan(v) && (r.open_low ? v > r.low : v >= r.low) &&
              (r.open_high ? v < r.high : v <= r.high);
    if (!ok) {
      std::string high = std::isinf(r.high) ? "inf" : fmt::format("{}", r.high);
      return invalid_argument("{}: expected a number in {}{}, {}{}", setting(c, r.key),
                              r.open_low ? "(" : "[", r.low, high, r.open_high ? ")" : "]");
    }
  }
  return ok_status();
}

// MaxText's get_individual_scales: each doubling of global_parameter_scale doubles, in
// turn, the heads and MLP width, the embedding width, then the layer count.
Status derive_model_shape(const Config& c, Derived& d) {
  int64_t scale = c.get_int("global_parameter_scale");
  if ((scale & (scale - 1)) != 0) {
    return invalid_argument(
        "{}: expected a power of 2; set base_emb_dim, base_num_query_heads, ... directly for "
        "finer control",
        setting(c, "global_parameter_scale"));
  }
  int log2_scale = 0;
  while ((int64_t{1} << log2_scale) < scale) ++log2_scale;
  int base = log2_scale / 3, rem = log2_scale % 3;
  int head_scale = base + (rem > 0 ? 1 : 0);
  int emb_scale = base + (rem > 1 ? 1 : 0);
  int layer_scale = base;
  d.emb_dim = c.get_int("base_emb_dim") << emb_scale;
  d.num_query_heads = c.get_int("base_num_query_heads") << head_scale;
  d.num_kv_heads = c.get_int("base_num_kv_heads") << head_scale;
  d.mlp_dim = c.get_int("base_mlp_dim") << head_scale;
  d.moe_mlp_dim = c.get_int("base_moe_mlp_dim") << head_scale;
  d.num_decoder_layers = c.get_int("base_num_decoder_layers") << layer_scale;
  d.head_dim = c.get_int("head_dim");

  if (d.num_query_heads % d.num_kv_heads != 0) {
    return invalid_argument(
        "{}: {} query heads cannot be grouped over {} kv heads; the query head count must be a "
        "multiple of the kv head count",
        setting(c, "base_num_kv_heads"), d.num_query_heads, d.num_kv_heads);
  }
  int64_t experts = c.get_int("num_experts");
  if (c.get_int("num_experts_per_tok") > experts) {
    return invalid_argument("{}: cannot pick more experts per token than num_experts={}",
                            setting(c, "num_experts_per_tok"), experts);
  }
  int64_t cycle = c.get_int("inhomogeneous_layer_cycle_interval");
  if (c.get_bool("scan_layers") && d.num_decoder_layers % cycle != 0) {
    return invalid_argument(
        "{}: scan_layers=true scans blocks of {} layers, which must divide the {} decoder "
        "layers",
        setting(c, "inhomogeneous_layer_cycle_interval"), cycle, d.num_decoder_layers);
  }
  return ok_status();
}

Status derive_devices_and_mesh(const Config& c, int64_t num_ranks, Derived& d) {
  std::vector<std::string> axes = c.get_string_list("mesh_axes");
  std::vector<std::string> known = known_mesh_axes();
  std::set<std::string> seen;
  for (const auto& a : axes) {
    if (std::find(known.begin(), known.end(), a) == known.end()) {
      return invalid_argument("{}: unknown mesh axis {}; the axes are {}", setting(c, "mesh_axes"),
                              a, show_choices(known));
    }
    if (!seen.insert(a).second) {
      return invalid_argument("{}: axis {} appears twice", setting(c, "mesh_axes"), a);
    }
  }
  if (axes.size() != known.size()) {
    return invalid_argument("{}: expected an ordering of all of {}", setting(c, "mesh_axes"),
                            show_choices(known));
  }
  std::vector<int64_t> ici, dcn;
  int64_t explicit_ici = 1;
  for (const auto& a : axes) {
    ici.push_back(c.get_int(parallelism_key(a, "ici")));
    dcn.push_back(c.get_int(parallelism_key(a, "dcn")));
    if (ici.back() > 0) explicit_ici *= ici.back();
  }

  int64_t local = c.get_int("local_devices");
  int64_t slices = c.get_int("num_slices");
  if (const std::string& topology_name = c.get_string("compile_topology"); !topology_name.empty()) {
    // An ahead-of-time compile: the devices are the named slices', none of them here.
    const int64_t num_topology_slices = std::max<int64_t>(1, c.get_int("compile_topology_num_slices"));
    KILN_ASSIGN_OR_RETURN(CompileTopology topology, parse_compile_topology(topology_name, num_topology_slices));
    if (num_ranks > 1) {
      return invalid_argument("compile_topology={}: an ahead-of-time compile runs in one process, not {} MPI ranks",
                              topology_name, num_ranks);
    }
    if (local != -1 && local != topology.total_devices()) {
      return invalid_argument("{}: compile_topology={} has {} devices; leave local_devices at -1",
                              setting(c, "local_devices"), topology_name, topology.total_devices());
    }
    if (slices != 1 && slices != topology.num_slices) {
      return invalid_argument("{}: compile_topology_num_slices={} sets the slices; leave num_slices at 1",
                              setting(c, "num_slices"), topology.num_slices);
    }
    local = topology.total_devices();
    slices = topology.num_slices;
    d.compile_topology = std::move(topology);
  }
  if (local == 0 || local < -1) {
    return invalid_argument(
        "{}: expected a positive device count, or -1 for as many as the mesh sizes need",
        setting(c, "local_devices"));
  }
  std::string note;
  if (d.compile_topology) {
    note = fmt::format("compile_topology={}", d.compile_topology->name);
  } else if (local == -1) {
    // The fewest devices per process that cover the explicit sizes; a -1 axis then fills
    // whatever that leaves (so default settings on 2 ranks give fsdp=2).
    int64_t needed = explicit_ici * slices;
    local = std::max<int64_t>(1, (needed + num_ranks - 1) / num_ranks);
    note = fmt::format("local_devices=-1 gives {} per process", local);
  } else {
    note = setting(c, "local_devices");
  }
  if (num_ranks > 1) note = fmt::format("{} ranks × {}", num_ranks, note);
  d.num_ranks = num_ranks;
  d.local_devices = local;
  d.num_devices = num_ranks * local;
  d.num_slices = slices;
  if (d.num_devices % slices != 0) {
    return invalid_argument("{}: {} devices ({}) do not split into {} equal slices",
                            setting(c, "num_slices"), d.num_devices, note, slices);
  }
  KILN_ASSIGN_OR_RETURN(d.mesh, fill_mesh(axes, ici, dcn, d.num_devices / slices, slices, note));

  // Heads are sharded over tensor × tensor_sequence (q_heads, kv_heads and heads rules).
  int64_t tp = d.mesh.size("tensor") * d.mesh.size("tensor_sequence");
  std::string tp_text = d.mesh.size("tensor_sequence") > 1
                            ? fmt::format("tensor={} × tensor_sequence={}", d.mesh.size("tensor"),
                                          d.mesh.size("tensor_sequence"))
                            : fmt::format("tensor={}", d.mesh.size("tensor"));
  if (d.num_query_heads % tp != 0) {
    return invalid_argument("{}: {} query heads do not divide over the tensor axis ({}); use a "
                            "head count divisible by {} or less tensor parallelism",
                            setting(c, "base_num_query_heads"), d.num_query_heads, tp_text, tp);
  }
  if (d.num_kv_heads % tp != 0) {
    return invalid_argument("{}: {} kv heads do not divide over the tensor axis ({}); use a "
                            "kv head count divisible by {} or less tensor parallelism",
                            setting(c, "base_num_kv_heads"), d.num_kv_heads, tp_text, tp);
  }
  int64_t experts = c.get_int("num_experts");
  int64_t ep = d.mesh.size("expert");
  if (experts > 1 && experts % ep != 0) {
    return invalid_argument("{}: {} experts do not divide over the expert axis (expert={}); use "
                            "an expert count divisible by {} or less expert parallelism",
                            setting(c, "num_experts"), experts, ep, ep);
  }
  return ok_status();
}

Status derive_batch_and_steps(const Config& c, Derived& d) {
  double per_device = c.get_float("per_device_batch_size");
  double micro = per_device * static_cast<double>(d.num_devices);
  double rounded = std::round(micro);
  if (std::abs(micro - rounded) > 1e-6 || rounded < 1) {
    return invalid_argument(
        "{}: × {} devices = {} sequences; the global batch must be a whole number of at least 1",
        setting(c, "per_device_batch_size"), d.num_devices, micro);
  }
  d.micro_batch_size = static_cast<int64_t>(rounded);
  d.global_batch_size = d.micro_batch_size * c.get_int("gradient_accumulation_steps");
  d.tokens_per_step = d.global_batch_size * c.get_int("max_target_length");

  // MaxText: a schedule length of -1 follows steps, and steps of -1 follow the schedule.
  int64_t steps = c.get_int("steps");
  int64_t schedule = c.get_int("learning_rate_schedule_steps");
  if (steps < -1) return invalid_argument("{}: expected -1 or a step count >= 0", setting(c, "steps"));
  if (schedule < -1 || schedule == 0) {
    return invalid_argument("{}: expected -1 (= steps) or a positive step count",
                            setting(c, "learning_rate_schedule_steps"));
  }
  if (steps == -1 && schedule == -1) {
    return invalid_argument("steps=-1: steps follows learning_rate_schedule_steps, which is also "
                            "-1; set one of them");
  }
  d.steps = steps == -1 ? schedule : steps;
  d.learning_rate_schedule_steps = schedule == -1 ? d.steps : schedule;
  if (d.learning_rate_schedule_steps == 0) {
    // steps=0 (build and exit) still needs a schedule that divides by its length.
    d.learning_rate_schedule_steps = 1;
  }
  d.mu_dtype = c.get_string("mu_dtype").empty() ? c.get_string("weight_dtype")
                                                  : c.get_string("mu_dtype");
  return ok_status();
}

// logical_axis_rules: a list of [logical_name, mesh_axes], where mesh_axes is one axis name
// or a list of them (MaxText writes both ['layers', 'stage'] and ['kv', []]).
Status derive_logical_axis_rules(const Config& c, Derived& d) {
  const auto& known = d.mesh.axes();
  const auto& rules = c.get_list("logical_axis_rules");
  for (size_t i = 0; i < rules.size(); ++i) {
    const Value& rule = rules[i];
    std::string shown = rule.to_yaml();
    auto bad = [&](const std::string& why) {
      return invalid_argument("logical_axis_rules: rule {} ({}): {}", i, shown, why);
    };
    if (!rule.is_list() || rule.as_list().size() != 2 ||
        rule.as_list()[0].kind() != ValueKind::kString) {
      return bad("expected [logical_name, [mesh_axis, ...]]");
    }
    LogicalAxisRule out{rule.as_list()[0].as_string(), {}};
    const Value& target = rule.as_list()[1];
    std::vector<Value> axes =
        target.is_list() ? target.as_list() : std::vector<Value>{target};
    for (const auto& a : axes) {
      if (a.kind() != ValueKind::kString) return bad("mesh axes must be names");
      if (std::find(known.begin(), known.end(), a.as_string()) == known.end()) {
        std::string match = closest_match(a.as_string(), known);
        return bad(fmt::format("unknown mesh axis {}{}; the axes are {}", a.as_string(),
                               match.empty() ? "" : fmt::format(" (did you mean {}?)", match),
                               show_choices(known)));
      }
      out.mesh_axes.push_back(a.as_string());
    }
    d.logical_axis_rules.push_back(std::move(out));
  }
  return ok_status();
}

Status check_exclusive_keys(const Config& c) {
  if (!c.get_string("load_parameters_path").empty() &&
      !c.get_string("load_full_state_path").empty()) {
    return invalid_argument(
        "{}: set at most one of load_parameters_path and load_full_state_path",
        setting(c, "load_full_state_path"));
  }
  if (c.get_list("mlp_activations").empty()) {
    return invalid_argument("mlp_activations=[]: expected one or two activations, e.g. [silu, linear]");
  }
  // The auxiliary-loss-free bias update is DeepSeek-V3's routing (as MaxText checks it).
  if (c.get_float("routed_bias_update_rate") != 0.0 && c.get_string("decoder_block") != "deepseek") {
    return unimplemented("{}: the auxiliary-loss-free bias update is DeepSeek-V3's routing (accepted: 0 unless "
                         "decoder_block=deepseek)",
                         setting(c, "routed_bias_update_rate"));
  }
  return ok_status();
}

// pjrt_plugin names one of the pinned wheels or a plugin file (backend/pjrt/plugin_path.h
// finds it; whether it exists is checked when backend=pjrt loads it).
Status check_pjrt_plugin(const Config& c) {
  const std::string& plugin = c.get_string("pjrt_plugin");
  const bool named = plugin == "cpu" || plugin == "cuda" || plugin == "tpu";
  const bool path = plugin.find('/') != std::string::npos || plugin.ends_with(".so");
  if (!named && !path) {
    return invalid_argument("{}: expected cpu, cuda, tpu or a path to a PJRT plugin (.so)", setting(c, "pjrt_plugin"));
  }
  return ok_status();
}

// What backend=pjrt cannot do, said before any work: XLA runs the whole step as one program
// (no per-kernel spans for a trace or the attribution table), every device of the mesh from
// one process on XLA's CPU plugin, and Kiln measures only this CPU's peak for MFU.
Status check_pjrt_keys(const Config& c, int64_t num_ranks) {
  if (c.get_string("backend") != "pjrt") {
    if (!c.get_string("compile_topology").empty()) {
      return invalid_argument("compile_topology={}: compiling for hardware that is not here goes through XLA; add "
                              "backend=pjrt",
                              c.get_string("compile_topology"));
    }
    return ok_status();
  }
  if (!c.get_string("profiler").empty()) {
    return invalid_argument("{}: backend=pjrt runs the step as one XLA program, without Kiln's per-kernel spans; "
                            "profile with backend=cpu, or leave profiler unset",
                            setting(c, "profiler"));
  }
  if (c.get_bool("report")) {
    return invalid_argument("{}: backend=pjrt runs the step as one XLA program, without Kiln's per-kernel spans for "
                            "the attribution table; use backend=cpu for it",
                            setting(c, "report"));
  }
  // Across processes each rank's client joins the others' through the plugin (node_id,
  // num_nodes and a key-value store over MPI): XLA's GPU plugin does, the CPU plugin does not
  // (xla-cpu-pjrt 0.0.1 ignores node_id and num_nodes; no collective crosses its processes).
  if (num_ranks > 1 && c.get_string("pjrt_plugin") == "cpu") {
    return invalid_argument("{}: XLA's CPU plugin runs every device from one process, not {} MPI ranks: run it "
                            "without mpirun (local_devices=N), or across processes with pjrt_plugin=cuda, tpu or a "
                            "plugin path",
                            setting(c, "pjrt_plugin"), num_ranks);
  }
  if (!c.get_string("compile_topology").empty()) return ok_status();  // the target file has the peaks
  if (c.get_string("pjrt_plugin") != "cpu" && c.get_float("hardware_peak_tflops") <= 0) {
    return invalid_argument("{}: set hardware_peak_tflops to the device's peak with backend=pjrt on an accelerator "
                            "(MFU divides by it; Kiln measures only this machine's CPU)",
                            setting(c, "pjrt_plugin"));
  }
  return ok_status();
}

}  // namespace

const std::vector<std::pair<std::string, std::vector<std::string>>>& enum_keys() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kEnums = {
      {"decoder_block", {"gpt_oss", "llama2", "qwen3_moe", "deepseek"}},
      {"backend", {"cpu", "pjrt", "interpreter"}},
      {"hardware", {"cpu"}},
      {"dtype", {"float32", "bfloat16"}},
      {"weight_dtype", {"float32", "bfloat16"}},
      {"grad_reduce_dtype", {"", "float32", "bfloat16"}},
      {"mu_dtype", {"", "float32", "bfloat16"}},
      {"matmul_precision", {"default", "high", "highest"}},
      {"remat_policy", remat_policy_names()},
      {"attention", {"autoselected", "dot_product", "flash"}},
      {"attention_type", {"global", "local_sliding", "mla"}},
      {"routed_score_func", {"", "softmax", "sigmoid"}},
      {"rope_type", {"default", "llama3.1", "yarn"}},
      {"mlp_activations", {"silu", "gelu", "relu", "sigmoid", "linear"}},
      {"opt_type", {"adamw", "sgd"}},
      {"lr_schedule_type", {"cosine", "wsd"}},
      {"wsd_decay_style", {"linear", "cosine"}},
      {"dataset_type", {"synthetic", "tokens", "text", "hf"}},
      {"tokenizer_type", {"sentencepiece", "tiktoken", "bytes", "huggingface"}},
      {"profiler", {"", "trace"}},
  };
  return kEnums;
}

const std::vector<SingleValueKey>& single_value_keys() {
  static const std::vector<SingleValueKey> kKeys = {
      {"param_scan_axis", "1", "Kiln lays out stacked parameters itself and does not move their layer axis"},
      {"float32_qk_product", "true", "Kiln's attention always forms q·k in float32 (bf16 inputs, f32 sums)"},
      {"float32_logits", "true", "Kiln's attention softmax is always float32"},
      {"ragged_buffer_factor", "-1.0",
       "expert-parallel exchange buffers hold the worst case, dropless (num_moe_chunks bounds them); a smaller "
       "factor that could drop tokens is not implemented"},
      {"grad_dtype", "float32",
       "gradients are float32; grad_reduce_dtype=bfloat16 makes their reductions bf16"},
      {"max_segments_per_seq", "-1", "packing places as many documents in a row as fit"},
      {"eval_per_device_batch_size", "0.0", "eval runs batches of per_device_batch_size"},
      {"shard_optimizer_over_data", "false",
       "optimizer state is sharded exactly as its parameter (fsdp, tensor, expert); ZeRO-1 over the data axis is "
       "not implemented"},
  };
  return kKeys;
}

const std::vector<std::pair<std::string, std::string>>& same_program_keys() {
  static const std::vector<std::pair<std::string, std::string>> kKeys = {
      {"megablox",
       "MaxText's choice between its grouped-matmul kernel and ragged_dot: Kiln's one grouped-matmul kernel computes "
       "the same products either way"},
  };
  return kKeys;
}

namespace {

Status check_single_value_keys(const Config& c) {
  for (const SingleValueKey& k : single_value_keys()) {
    const std::string value = c.get(k.key).to_yaml();
    bool same = value == k.value;
    if (!same) {
      // Numbers compare by value (1 and 1.0, -1 and -1.0).
      char* end = nullptr;
      const double a = std::strtod(value.c_str(), &end);
      const bool a_number = end != value.c_str() && *end == '\0';
      const double b = std::strtod(k.value.c_str(), &end);
      const bool b_number = end != k.value.c_str() && *end == '\0';
      same = a_number && b_number && a == b;
    }
    if (!same) {
      return unimplemented("{}: Kiln implements only {}={} ({})", setting(c, k.key), k.key, k.value, k.why);
    }
  }
  return ok_status();
}

}  // namespace

Result<Derived> validate_and_derive(const Config& c, int64_t num_ranks) {
  for (const auto& [key, choices] : enum_keys()) {
    KILN_RETURN_IF_ERROR(check_enum(c, key, choices));
  }
  KILN_RETURN_IF_ERROR(check_single_value_keys(c));
  KILN_RETURN_IF_ERROR(check_int_ranges(c));
  KILN_RETURN_IF_ERROR(check_float_ranges(c));
  KILN_RETURN_IF_ERROR(check_exclusive_keys(c));
  KILN_RETURN_IF_ERROR(check_pjrt_plugin(c));
  KILN_RETURN_IF_ERROR(check_pjrt_keys(c, num_ranks));
  Derived d;
  KILN_RETURN_IF_ERROR(derive_model_shape(c, d));
  KILN_RETURN_IF_ERROR(derive_devices_and_mesh(c, num_ranks, d));
  KILN_RETURN_IF_ERROR(derive_batch_and_steps(c, d));
  KILN_RETURN_IF_ERROR(derive_logical_axis_rules(c, d));
  return d;
}

}  // namespace kiln::config
