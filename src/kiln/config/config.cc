#include "kiln/config/config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/base/check.h"
#include "kiln/base/strings.h"
#include "kiln/config/validate.h"
#include "kiln/config/yaml_value.h"

namespace fs = std::filesystem;

namespace kiln::config {
namespace {

// Keys with a meaning in files other than base.yml: `base_config` chains CONFIG.yml files
// (as in MaxText); `derived` is what `kiln config` prints after the keys, skipped on load so
// that its output can be read back.
constexpr std::string_view kBaseConfigKey = "base_config";
constexpr std::string_view kDerivedKey = "derived";
// Model files may not pick another model or unlock overrides.
const std::set<std::string, std::less<>> kNotInModelFiles = {
    "model_name", "override_model_config", std::string(kBaseConfigKey)};

// A value set by one layer, with where it was written for messages.
struct Setting {
  Value value;
  std::string where;  // "path:line" or "key=text"
};
using Layer = std::map<std::string, Setting, std::less<>>;

struct Schema {
  std::string path;
  std::vector<std::string> order;
  std::map<std::string, Value, std::less<>> defaults;
};

std::string display_path(const std::string& path) {
  std::error_code ec;
  fs::path rel = fs::proximate(path, ec);
  if (ec || rel.empty() || *rel.begin() == "..") return path;
  return rel.string();
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

bool same_contents(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  if (!fa || !fb) return false;
  std::stringstream ta, tb;
  ta << fa.rdbuf();
  tb << fb.rdbuf();
  return ta.str() == tb.str();
}

std::string suggestion(std::string_view key, const std::vector<std::string>& keys) {
  // Keys Kiln once had, and what replaced them.
  static const std::map<std::string_view, std::string_view> kRenamed = {
      {"executor", "backend (executor=compiled is backend=cpu, executor=interpreter is backend=interpreter)"},
  };
  if (auto r = kRenamed.find(key); r != kRenamed.end()) return fmt::format(" ({} was renamed {})", key, r->second);
  std::string match = closest_match(key, keys);
  return match.empty() ? std::string() : fmt::format(" (did you mean {}?)", match);
}

Result<Schema> read_schema(const std::string& configs_dir) {
  Schema schema;
  schema.path = (fs::path(configs_dir) / "base.yml").string();
  KILN_ASSIGN_OR_RETURN(auto entries, read_yaml_mapping(schema.path));
  for (const auto& e : entries) {
    if (e.key == kBaseConfigKey || e.key == kDerivedKey) {
      return invalid_argument("{}:{}: {} is reserved and cannot be a key of base.yml",
                              display_path(schema.path), e.line, e.key);
    }
    Result<Value> v = value_from_yaml(e.node);
    if (!v.ok()) {
      return invalid_argument("{}:{}: {}: {}", display_path(schema.path), e.line, e.key,
                              v.status().message());
    }
    schema.order.push_back(e.key);
    schema.defaults.emplace(e.key, std::move(v).value());
  }
  return schema;
}

// Reads one YAML file as a layer over the schema: every key must exist and have the
// key's type. `reserved` keys are reported as errors; base_config/derived are returned
// through `base_config` or skipped.
Result<Layer> read_layer(const std::string& path, const Schema& schema, bool is_model_file,
                         std::string* base_config) {
  KILN_ASSIGN_OR_RETURN(auto entries, read_yaml_mapping(path));
  Layer layer;
  std::string shown = display_path(path);
  for (const auto& e : entries) {
    std::string where = fmt::format("{}:{}", shown, e.line);
    if (!is_model_file && e.key == kDerivedKey) continue;
    if (!is_model_file && e.key == kBaseConfigKey) {
      if (!e.node.IsScalar()) {
        return invalid_argument("{}: base_config: expected a file name", where);
      }
      *base_config = e.node.Scalar();
      continue;
    }
    if (is_model_file && kNotInModelFiles.count(e.key)) {
      return invalid_argument("{}: a model file cannot set {}", where, e.key);
    }
    auto def = schema.defaults.find(e.key);
    if (def == schema.defaults.end()) {
      return invalid_argument("{}: unknown key {}{}", where, e.key,
                              suggestion(e.key, schema.order));
    }
    Result<Value> raw = value_from_yaml(e.node);
    if (!raw.ok()) return invalid_argument("{}: {}: {}", where, e.key, raw.status().message());
    Result<Value> typed = convert_like(*raw, def->second);
    if (!typed.ok()) return invalid_argument("{}: {}: {}", where, e.key, typed.status().message());
    layer[e.key] = Setting{std::move(typed).value(), where};
  }
  return layer;
}

// A CONFIG.yml and the files it names with base_config, parents first. A chain ends at
// base.yml (the schema, already loaded).
Status read_config_chain(const std::string& path, const Schema& schema, int depth,
                         Layer& merged, std::vector<std::string>& files) {
  if (depth > 16) return invalid_argument("{}: base_config chain is too deep (a cycle?)", path);
  if (same_file(path, schema.path)) return ok_status();
  // A chain ends at base.yml. One that reaches another checkout's or release's base.yml (a
  // config directory copied with it) must not be layered as a CONFIG.yml: it sets every key,
  // so its defaults would silently replace the model file's values under
  // override_model_config. The same text is this build's schema; other text is refused.
  if (depth > 0 && fs::path(path).filename() == "base.yml") {
    if (same_contents(path, schema.path)) return ok_status();
    return invalid_argument(
        "{}: base_config reaches a base.yml that is not this build's ({}) and differs from it; point "
        "base_config at {} or give the copy another name to use it as a config file",
        display_path(path), display_path(schema.path), display_path(schema.path));
  }
  std::string parent;
  KILN_ASSIGN_OR_RETURN(Layer layer, read_layer(path, schema, false, &parent));
  if (!parent.empty()) {
    fs::path p(parent);
    if (p.is_relative()) {
      fs::path next_to_file = fs::path(path).parent_path() / p;
      std::error_code ec;
      p = fs::exists(next_to_file, ec) ? next_to_file : fs::path(schema.path).parent_path() / p;
    }
    KILN_RETURN_IF_ERROR(read_config_chain(p.string(), schema, depth + 1, merged, files));
  }
  files.push_back(path);
  for (auto& [key, setting] : layer) merged[key] = std::move(setting);
  return ok_status();
}

Result<Layer> parse_overrides(const std::vector<std::string>& overrides, const Schema& schema) {
  Layer layer;
  for (const auto& arg : overrides) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) {
      return invalid_argument("{}: expected key=value (a CONFIG.yml may only come first)", arg);
    }
    std::string key = arg.substr(0, eq);
    std::string text = arg.substr(eq + 1);
    auto def = schema.defaults.find(key);
    if (def == schema.defaults.end()) {
      return invalid_argument("{}: unknown key {}{}", arg, key, suggestion(key, schema.order));
    }
    Result<Value> v = parse_override_text(text, def->second);
    if (!v.ok()) return invalid_argument("{}: {}", arg, v.status().message());
    layer[key] = Setting{std::move(v).value(), arg};
  }
  return layer;
}

// The final value of a key that a model file cannot set, before the model is read.
const Value& user_value(std::string_view key, const Layer& cli, const Layer& file,
                        const Schema& schema) {
  if (auto it = cli.find(key); it != cli.end()) return it->second.value;
  if (auto it = file.find(key); it != file.end()) return it->second.value;
  return schema.defaults.find(key)->second;
}

Result<std::string> find_model_file(const std::string& model_name, const std::string& config_path,
                                    const std::string& configs_dir) {
  std::string file = model_name + ".yml";
  // The error_code forms: a name the file system refuses (too long, ...) is no such model.
  std::error_code ec;
  if (!config_path.empty()) {
    fs::path beside = fs::path(config_path).parent_path() / "models" / file;
    if (fs::is_regular_file(beside, ec)) return beside.string();
  }
  fs::path in_configs = fs::path(configs_dir) / "models" / file;
  if (fs::is_regular_file(in_configs, ec)) return in_configs.string();
  std::vector<std::string> models = available_models(configs_dir);
  return invalid_argument("model_name={}: no such model{}; available: {}", model_name,
                          suggestion(model_name, models), fmt::join(models, ", "));
}

// A layer's key conflicts with the model file when it sets a different value.
Status check_model_conflicts(const Layer& user, const Layer& model, const std::string& model_name,
                             bool is_command_line) {
  for (const auto& [key, setting] : user) {
    auto m = model.find(key);
    if (m == model.end() || m->second.value == setting.value) continue;
    return invalid_argument(
        "{}: model {} sets {}: {} ({}); {} to override a key the model file sets",
        setting.where, model_name, key, m->second.value.to_yaml(), m->second.where,
        is_command_line ? "add override_model_config=true"
                        : "set override_model_config: true");
  }
  return ok_status();
}

void print_value(std::string& out, const std::string& key, const Value& value,
                 const std::string& comment, int indent) {
  std::string pad(indent, ' ');
  bool nested = false;
  if (value.is_list()) {
    for (const auto& item : value.as_list()) nested = nested || item.is_list();
  }
  if (!nested) {
    out += fmt::format("{}{}: {}{}\n", pad, key, value.to_yaml(), comment);
    return;
  }
  // Lists of lists (logical_axis_rules): one item per line.
  out += fmt::format("{}{}:{}\n", pad, key, comment);
  for (const auto& item : value.as_list()) out += fmt::format("{}  - {}\n", pad, item.to_yaml());
}

}  // namespace

const char* source_name(Source source) {
  switch (source) {
    case Source::kBase: return "base";
    case Source::kConfigFile: return "config";
    case Source::kModel: return "model";
    case Source::kOverride: return "override";
  }
  return "?";
}

const Config::Entry& Config::entry(std::string_view key) const {
  auto it = entries_.find(key);
  KILN_CHECK(it != entries_.end()) << "config key '" << key << "' is not in base.yml"
                                   << suggestion(key, order_);
  return it->second;
}

bool Config::has(std::string_view key) const { return entries_.count(key) > 0; }
const Value& Config::get(std::string_view key) const { return entry(key).value; }
Source Config::source(std::string_view key) const { return entry(key).source; }

int64_t Config::get_int(std::string_view key) const {
  const Value& v = get(key);
  KILN_CHECK(v.kind() == ValueKind::kInt) << "config key " << key << " is not an integer";
  return v.as_int();
}

double Config::get_float(std::string_view key) const {
  const Value& v = get(key);
  KILN_CHECK(v.kind() == ValueKind::kFloat) << "config key " << key << " is not a float";
  return v.as_float();
}

bool Config::get_bool(std::string_view key) const {
  const Value& v = get(key);
  KILN_CHECK(v.kind() == ValueKind::kBool) << "config key " << key << " is not a boolean";
  return v.as_bool();
}

const std::string& Config::get_string(std::string_view key) const {
  const Value& v = get(key);
  KILN_CHECK(v.kind() == ValueKind::kString) << "config key " << key << " is not a string";
  return v.as_string();
}

const std::vector<Value>& Config::get_list(std::string_view key) const {
  const Value& v = get(key);
  KILN_CHECK(v.is_list()) << "config key " << key << " is not a list";
  return v.as_list();
}

std::vector<std::string> Config::get_string_list(std::string_view key) const {
  std::vector<std::string> out;
  for (const auto& item : get_list(key)) {
    KILN_CHECK(item.kind() == ValueKind::kString)
        << "config key " << key << " holds " << item.to_yaml() << ", not a string";
    out.push_back(item.as_string());
  }
  return out;
}

std::string Config::to_yaml(bool with_derived) const {
  std::vector<std::string> shown;
  for (const auto& f : files_) shown.push_back(display_path(f));
  if (has_overrides_) shown.push_back("command line");
  std::string out = fmt::format("# Kiln config resolved from {}\n", fmt::join(shown, " <- "));
  for (const auto& key : order_) {
    const Entry& e = entry(key);
    std::string comment =
        e.source == Source::kBase ? std::string() : fmt::format("  # {}", source_name(e.source));
    print_value(out, key, e.value, comment, 0);
  }
  if (!with_derived) return out;
  const Derived& d = derived_;
  out += "# Computed from the keys above; ignored when this output is read back.\n";
  out += "derived:\n";
  auto line = [&out](const char* name, const std::string& value) {
    out += fmt::format("  {}: {}\n", name, value);
  };
  line("emb_dim", std::to_string(d.emb_dim));
  line("num_query_heads", std::to_string(d.num_query_heads));
  line("num_kv_heads", std::to_string(d.num_kv_heads));
  line("head_dim", std::to_string(d.head_dim));
  line("mlp_dim", std::to_string(d.mlp_dim));
  line("moe_mlp_dim", std::to_string(d.moe_mlp_dim));
  line("num_decoder_layers", std::to_string(d.num_decoder_layers));
  line("num_ranks", std::to_string(d.num_ranks));
  line("local_devices", std::to_string(d.local_devices));
  line("num_devices", std::to_string(d.num_devices));
  line("num_slices", std::to_string(d.num_slices));
  std::vector<std::string> mesh;
  for (size_t i = 0; i < d.mesh.axes().size(); ++i) {
    mesh.push_back(fmt::format("{}: {}", d.mesh.axes()[i], d.mesh.sizes()[i]));
  }
  line("mesh", fmt::format("{{{}}}", fmt::join(mesh, ", ")));
  line("micro_batch_size", std::to_string(d.micro_batch_size));
  line("global_batch_size", std::to_string(d.global_batch_size));
  line("tokens_per_step", std::to_string(d.tokens_per_step));
  line("steps", std::to_string(d.steps));
  line("learning_rate_schedule_steps", std::to_string(d.learning_rate_schedule_steps));
  line("mu_dtype", Value::string(d.mu_dtype).to_yaml());
  return out;
}

std::string find_configs_dir() {
  auto holds_base = [](const std::string& dir) {
    std::error_code ec;
    return !dir.empty() && fs::is_regular_file(fs::path(dir) / "base.yml", ec);
  };
  if (const char* env = std::getenv("KILN_CONFIGS_DIR"); env && holds_base(env)) return env;
#ifdef KILN_DEFAULT_CONFIGS_DIR
  if (holds_base(KILN_DEFAULT_CONFIGS_DIR)) return KILN_DEFAULT_CONFIGS_DIR;
#endif
  if (holds_base("configs")) return "configs";
  return "";
}

std::vector<std::string> available_models(const std::string& configs_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(configs_dir) / "models", ec)) {
    if (entry.path().extension() == ".yml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  names.insert(names.begin(), "default");
  return names;
}

Result<Config> load(const LoadOptions& options) {
  std::string configs_dir = options.configs_dir.empty() ? find_configs_dir() : options.configs_dir;
  if (configs_dir.empty()) {
    return not_found(
        "cannot find configs/base.yml; run from the repository root or set KILN_CONFIGS_DIR");
  }
  if (options.num_ranks < 1) {
    return invalid_argument("{} ranks: the number of processes must be at least 1",
                            options.num_ranks);
  }
  KILN_ASSIGN_OR_RETURN(Schema schema, read_schema(configs_dir));

  Config config;
  config.files_.push_back(schema.path);
  Layer file;
  if (!options.config_path.empty()) {
    std::vector<std::string> chain;
    KILN_RETURN_IF_ERROR(read_config_chain(options.config_path, schema, 0, file, chain));
    config.files_.insert(config.files_.end(), chain.begin(), chain.end());
  }
  KILN_ASSIGN_OR_RETURN(Layer cli, parse_overrides(options.overrides, schema));

  Layer model;
  std::string model_name = user_value("model_name", cli, file, schema).as_string();
  if (model_name != "default") {
    KILN_ASSIGN_OR_RETURN(std::string model_path,
                          find_model_file(model_name, options.config_path, configs_dir));
    KILN_ASSIGN_OR_RETURN(model, read_layer(model_path, schema, true, nullptr));
    config.files_.push_back(model_path);
  }
  // MaxText: a command-line key that the model file sets is an error unless
  // override_model_config=true. Kiln applies the same rule to CONFIG.yml keys instead of
  // letting the model file silently replace them.
  if (!user_value("override_model_config", cli, file, schema).as_bool()) {
    KILN_RETURN_IF_ERROR(check_model_conflicts(file, model, model_name, false));
    KILN_RETURN_IF_ERROR(check_model_conflicts(cli, model, model_name, true));
  }

  config.order_ = schema.order;
  for (const auto& key : schema.order) {
    config.entries_[key] = Config::Entry{schema.defaults.at(key), Source::kBase};
  }
  auto apply = [&config](const Layer& layer, Source source) {
    for (const auto& [key, setting] : layer) {
      config.entries_[key] = Config::Entry{setting.value, source};
    }
  };
  apply(model, Source::kModel);
  apply(file, Source::kConfigFile);
  apply(cli, Source::kOverride);
  config.has_overrides_ = !cli.empty();

  KILN_ASSIGN_OR_RETURN(config.derived_, validate_and_derive(config, options.num_ranks));
  return config;
}

Result<Config> load(const std::vector<std::string>& args, int64_t num_ranks) {
  LoadOptions options;
  options.num_ranks = num_ranks;
  size_t first = 0;
  if (!args.empty() && args[0].find('=') == std::string::npos) {
    options.config_path = args[0];
    first = 1;
  }
  options.overrides.assign(args.begin() + first, args.end());
  return load(options);
}

}  // namespace kiln::config
