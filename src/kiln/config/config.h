// Kiln's configuration, resolved the way MaxText resolves its config:
//
//   configs/base.yml            every key with its default; the type of each key
//   -> CONFIG.yml (optional)    a user file over base.yml (may chain with base_config:)
//   -> models/<model_name>.yml  when model_name is not "default"
//   -> key=value overrides      from the command line, typed by the key's default
//
// A key set by the model file may only be changed by CONFIG.yml or the command line with
// override_model_config=true. Everything that depends on several keys (model dims after
// global_parameter_scale, device count, mesh, global batch) is computed once, here, into
// Derived, after validation: a bad config fails in load() with a one-line message naming
// the key, the value and what is accepted, before any work starts.
//
//   KILN_ASSIGN_OR_RETURN(config::Config cfg, config::load(args));
//   int64_t d = cfg.derived().emb_dim;
//   int64_t fsdp = cfg.derived().mesh.size("fsdp");
//   double lr = cfg.get_float("learning_rate");
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <optional>

#include "kiln/base/status.h"
#include "kiln/config/compile_topology.h"
#include "kiln/config/mesh.h"
#include "kiln/config/value.h"

namespace kiln::config {

// Which layer set a key's final value.
enum class Source { kBase, kConfigFile, kModel, kOverride };
const char* source_name(Source source);  // "base", "config", "model", "override"

// One logical_axis_rules entry: a logical axis name and the mesh axes it may be sharded
// over (empty: replicated). Rules apply in order; repeated names are fallbacks.
struct LogicalAxisRule {
  std::string logical_axis;
  std::vector<std::string> mesh_axes;
};

// Values computed from several keys. Read them here, never recompute them elsewhere.
struct Derived {
  // Model shape after global_parameter_scale (MaxText's get_individual_scales).
  int64_t emb_dim = 0;
  int64_t num_query_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t mlp_dim = 0;
  int64_t moe_mlp_dim = 0;
  int64_t num_decoder_layers = 0;

  // Devices: num_devices = num_ranks × local_devices, split into num_slices slices.
  int64_t num_ranks = 1;      // MPI processes (LoadOptions::num_ranks)
  int64_t local_devices = 1;  // virtual devices per process, after resolving -1
  int64_t num_devices = 1;
  int64_t num_slices = 1;
  // compile_topology parsed: the slices an ahead-of-time compile targets (their devices are
  // the ones above); empty when the devices are this machine's.
  std::optional<CompileTopology> compile_topology;
  Mesh mesh;

  // Batch, in sequences of max_target_length tokens.
  int64_t micro_batch_size = 0;   // per_device_batch_size × num_devices: one forward/backward
  int64_t global_batch_size = 0;  // × gradient_accumulation_steps: one optimizer step
  int64_t tokens_per_step = 0;    // global_batch_size × max_target_length

  // Run length after MaxText's -1 rules (steps <-> learning_rate_schedule_steps).
  int64_t steps = 0;
  int64_t learning_rate_schedule_steps = 0;

  std::string mu_dtype;  // mu_dtype, or weight_dtype when mu_dtype is ""
  std::vector<LogicalAxisRule> logical_axis_rules;
};

struct LoadOptions {
  // A CONFIG.yml to read over base.yml ("" for none). Naming base.yml itself is the same
  // as naming nothing.
  std::string config_path;
  // "key=value" strings, applied in order (the last one for a key wins).
  std::vector<std::string> overrides;
  // Directory with base.yml and models/ ("" = find_configs_dir()).
  std::string configs_dir;
  // MPI processes in this run; the device count is num_ranks × local_devices.
  int64_t num_ranks = 1;
};

class Config;
Result<Config> load(const LoadOptions& options);

class Config {
 public:
  // Every key is present once loaded: has() says whether `key` is a config key at all.
  bool has(std::string_view key) const;
  // Typed getters. Asking for a key that does not exist or with the wrong type is a bug in
  // the caller and aborts (KILN_CHECK) naming the key.
  const Value& get(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<Value>& get_list(std::string_view key) const;
  std::vector<std::string> get_string_list(std::string_view key) const;
  Source source(std::string_view key) const;

  // Keys in base.yml order.
  const std::vector<std::string>& keys() const { return order_; }
  const Derived& derived() const { return derived_; }

  // The files that were read, in order (base.yml, CONFIG.yml chain, model file).
  const std::vector<std::string>& files() const { return files_; }

  // The resolved config as YAML: every key in base.yml order (with a trailing comment on
  // keys that the model file, CONFIG.yml or the command line set), then, when
  // `with_derived`, a `derived:` mapping. Loading the output again gives the same config
  // (the loader skips `derived:`).
  std::string to_yaml(bool with_derived = true) const;

 private:
  friend Result<Config> load(const LoadOptions& options);
  struct Entry {
    Value value;
    Source source = Source::kBase;
  };
  const Entry& entry(std::string_view key) const;

  std::vector<std::string> order_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> files_;
  bool has_overrides_ = false;  // some key came from the command line
  Derived derived_;
};


// Command-line form: an optional CONFIG.yml first, then key=value arguments, as in
// `kiln config [CONFIG.yml] [key=value ...]`.
Result<Config> load(const std::vector<std::string>& args, int64_t num_ranks = 1);

// The configs directory: $KILN_CONFIGS_DIR if set, else the source tree's configs/ (fixed
// at build time), else ./configs. Empty if none of them holds base.yml.
std::string find_configs_dir();

// Model names that configs/models/ offers ("default" first), for messages and `--help`.
std::vector<std::string> available_models(const std::string& configs_dir);

}  // namespace kiln::config
