#include "kiln/checkpoint/hf_shards.h"

#include <cctype>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kiln::checkpoint {

namespace fs = std::filesystem;

Result<int64_t> parse_shard_size(const std::string& key, const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  struct Unit {
    const char* name;
    int64_t factor;
  };
  static const Unit kUnits[] = {{"", 1},         {"B", 1},          {"KB", 1000},       {"MB", 1000000},
                                {"GB", 1000000000}, {"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", int64_t{1} << 30}};
  for (const Unit& u : kUnits) {
    if (digits == 0 || digits > 12 || unit != u.name) continue;
    const int64_t n = std::stoll(text.substr(0, digits));
    if (n <= 0) break;
    return n * u.factor;
  }
  return invalid_argument("{}={}: expected a positive size such as 5GB, 500MB, 2GiB or a number of bytes", key, text);
}

ShardPlan plan_hf_shards(const std::vector<int64_t>& bytes, int64_t max_shard_size) {
  ShardPlan plan;
  int64_t current = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    // A new file when this tensor would push a non-empty one over the limit.
    if (plan.members.empty() || (!plan.members.back().empty() && current + bytes[i] > max_shard_size)) {
      plan.members.emplace_back();
      current = 0;
    }
    plan.members.back().push_back(i);
    current += bytes[i];
  }
  const size_t n = plan.members.size();
  for (size_t f = 0; f < n; ++f) {
    plan.files.push_back(n == 1 ? "model.safetensors" : fmt::format("model-{:05d}-of-{:05d}.safetensors", f + 1, n));
  }
  return plan;
}

Result<ShardPlan> write_hf_safetensors(const std::string& dir, const std::vector<NamedTensor>& tensors,
                                       int64_t max_shard_size, const std::function<void(int64_t)>& on_file) {
  std::vector<int64_t> bytes;
  int64_t total = 0;
  for (const NamedTensor& t : tensors) {
    bytes.push_back(t.second->shape().byte_size());
    total += bytes.back();
  }
  ShardPlan plan = plan_hf_shards(bytes, max_shard_size);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t f = 0; f < plan.files.size(); ++f) {
    std::vector<NamedTensor> part;
    int64_t size = 0;
    for (size_t i : plan.members[f]) {
      part.push_back(tensors[i]);
      weight_map[tensors[i].first] = plan.files[f];
      size += bytes[i];
    }
    KILN_RETURN_IF_ERROR(write_safetensors((fs::path(dir) / plan.files[f]).string(), part, {{"format", "pt"}}));
    if (on_file) on_file(size);
  }
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (plan.files.size() > 1) {
    nlohmann::ordered_json j = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    std::ofstream out(index);
    out << j.dump(2) << "\n";
    if (!out.good()) return io_error("writing {}", index.string());
  } else {
    fs::remove(index, ec);  // a stale index of an earlier export would name files that are gone
  }
  return plan;
}

}  // namespace kiln::checkpoint
