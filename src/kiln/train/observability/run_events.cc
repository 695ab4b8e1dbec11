#include "kiln/train/observability/run_events.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::train {

namespace {

double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

RunEvents::~RunEvents() { close(); }

Result<int64_t> RunEvents::open(const std::string& path) {
  namespace fs = std::filesystem;
  close();
  std::error_code ec;
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec) return io_error("cannot create directory {}: {}", p.parent_path().string(), ec.message());
  int64_t starts = 0;
  if (fs::exists(p, ec)) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    const size_t whole = text.empty() ? 0 : text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    for (size_t pos = 0; pos < whole;) {
      const size_t nl = text.find('\n', pos);
      nlohmann::json j = nlohmann::json::parse(std::string_view(text).substr(pos, nl - pos), nullptr, false);
      if (j.is_object() && j.value("event", "") == "start") ++starts;
      pos = nl + 1;
    }
    if (whole < text.size()) {
      // A line cut by a kill: kept aside, and the file ends at its last whole line again.
      std::ofstream(path + ".discarded", std::ios::app | std::ios::binary) << text.substr(whole) << "\n";
      fs::resize_file(p, whole, ec);
      if (ec) return io_error("cannot cut the torn last line of {}: {}", path, ec.message());
    }
  }
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) return io_error("cannot open {} for appending: {}", path, std::strerror(errno));
  path_ = path;
  return starts;
}

Status RunEvents::write(const std::string& event, int64_t step, nlohmann::json fields) {
  if (file_ == nullptr) return ok_status();
  nlohmann::json line = {{"time", now_unix_s()}, {"event", event}, {"step", step}};
  for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  // Non-finite numbers become null (JSON has no NaN), as in metrics.jsonl.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size() || std::fflush(file_) != 0) {
    return io_error("cannot write to {}: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

void RunEvents::close() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
}

nlohmann::json config_diff(const config::Config& config) {
  nlohmann::json diff = nlohmann::json::object();
  for (const std::string& key : config.keys()) {
    if (config.source(key) != config::Source::kBase) diff[key] = config.get(key).to_yaml();
  }
  return diff;
}

nlohmann::json config_sources(const config::Config& config) {
  nlohmann::json sources = nlohmann::json::object();
  for (const std::string& key : config.keys()) {
    if (config.source(key) != config::Source::kBase) sources[key] = config::source_name(config.source(key));
  }
  return sources;
}

nlohmann::json compile_census(const backend::CompileReport& r) {
  nlohmann::json collectives = nlohmann::json::object();
  for (const auto& [kind, count] : r.async_by_kind) {
    auto bytes = r.async_bytes_by_kind.find(kind);
    collectives[kind] = {{"count", count}, {"bytes", bytes == r.async_bytes_by_kind.end() ? 0 : bytes->second}};
  }
  return {{"instructions_before", r.instructions_before},
          {"instructions", r.instructions_after},
          {"fused_kernels", r.fused_kernels},
          {"unique_kernels", r.unique_kernels},
          {"gemms", r.gemms},
          {"attention_kernels", r.attention_kernels},
          {"grouped_matmul_kernels", r.grouped_matmuls},
          {"library_kernels", r.library_kernels},
          {"fallback_kernels", r.fallback_kernels},
          {"collectives", collectives},
          {"overlapped_collectives", r.overlapped_collectives},
          {"memory_per_device_bytes", r.planned_peak_bytes}};
}

}  // namespace kiln::train
