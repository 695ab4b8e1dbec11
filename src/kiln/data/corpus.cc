#include "kiln/data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/base/hash.h"

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

Result<std::string> slurp(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found("{}: file not found", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("{}: cannot read", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::vector<std::string>> read_documents(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, slurp(path));
  std::vector<std::string> docs;
  std::istringstream lines(text);
  std::string line;
  if (ends_with(path, ".jsonl")) {
    int64_t n = 0;
    while (std::getline(lines, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return invalid_argument("{}:{}: not a JSON object", path, n);
      auto it = j.find("text");
      if (it == j.end() || !it->is_string()) return invalid_argument("{}:{}: no \"text\" string field", path, n);
      std::string doc = it->get<std::string>();
      if (!doc.empty()) docs.push_back(std::move(doc));
    }
    return docs;
  }
  std::string doc;
  auto flush = [&] {
    while (!doc.empty() && doc.back() == '\n') doc.pop_back();
    if (!doc.empty()) docs.push_back(doc);
    doc.clear();
  };
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos || line == "%") {
      flush();
    } else {
      doc += line;
      doc += '\n';
    }
  }
  flush();
  return docs;
}

Result<TokenizeReport> tokenize_files(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                      const TokenizeOptions& options) {
  if (inputs.empty()) return invalid_argument("no input files to tokenize");
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec) return io_error("{}: cannot create the output directory: {}", options.output_dir, ec.message());
  ShardInfo info;
  info.vocab_size = static_cast<uint64_t>(tokenizer.vocab_size());
  info.bos_id = tokenizer.bos_id() < 0 ? kNoToken : static_cast<uint32_t>(tokenizer.bos_id());
  info.eos_id = tokenizer.eos_id() < 0 ? kNoToken : static_cast<uint32_t>(tokenizer.eos_id());
  ShardWriter writer(info);
  TokenizeReport report;
  nlohmann::json manifest = {{"format", "kiln-token-shards"},
                             {"version", kShardVersion},
                             {"tokenizer", {{"type", tokenizer.name()},
                                            {"vocab_size", tokenizer.vocab_size()},
                                            {"bos_id", tokenizer.bos_id()},
                                            {"eos_id", tokenizer.eos_id()}}},
                             {"inputs", nlohmann::json::array()},
                             {"shards", nlohmann::json::array()}};
  auto write_shard = [&]() -> Status {
    if (writer.num_documents() == 0) return ok_status();
    std::string name = fmt::format("shard_{:05d}.bin", report.shards);
    std::string path = (fs::path(options.output_dir) / name).string();
    KILN_RETURN_IF_ERROR(writer.write(path));
    KILN_ASSIGN_OR_RETURN(std::string bytes, slurp(path));
    manifest["shards"].push_back({{"file", name},
                                  {"documents", writer.num_documents()},
                                  {"tokens", writer.num_tokens()},
                                  {"fnv1a64", hex64(fnv1a64(bytes))}});
    ++report.shards;
    writer.clear();
    return ok_status();
  };
  for (const std::string& input : inputs) {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> docs, read_documents(input));
    int64_t bytes = 0, tokens = 0;
    for (const std::string& doc : docs) {
      std::vector<int32_t> ids = tokenizer.encode(doc);
      bytes += static_cast<int64_t>(doc.size());
      tokens += static_cast<int64_t>(ids.size());
      KILN_RETURN_IF_ERROR(writer.add_document(ids).with_context(input));
      if (writer.num_tokens() >= options.shard_tokens) KILN_RETURN_IF_ERROR(write_shard());
    }
    manifest["inputs"].push_back(
        {{"file", fs::path(input).filename().string()}, {"documents", docs.size()}, {"bytes", bytes}, {"tokens", tokens}});
    report.documents += static_cast<int64_t>(docs.size());
    report.tokens += tokens;
  }
  KILN_RETURN_IF_ERROR(write_shard());
  if (report.documents == 0) return invalid_argument("empty corpus: the inputs hold no documents");
  manifest["documents"] = report.documents;
  manifest["tokens"] = report.tokens;
  report.manifest_path = (fs::path(options.output_dir) / "manifest.json").string();
  std::ofstream out(report.manifest_path);
  out << manifest.dump(2) << "\n";
  if (!out) return io_error("{}: cannot write the manifest", report.manifest_path);
  return report;
}

Result<std::vector<std::unique_ptr<Shard>>> open_shards(const std::string& dataset_path) {
  if (dataset_path.empty()) return invalid_argument("dataset_path is empty: dataset_type=tokens needs a shard directory, manifest.json or .bin file");
  std::error_code ec;
  if (!fs::exists(dataset_path, ec)) return not_found("dataset_path={}: not found", dataset_path);
  std::vector<std::string> files;
  std::vector<std::string> checksums;
  std::string manifest_path;
  if (fs::is_directory(dataset_path, ec)) {
    if (fs::exists(fs::path(dataset_path) / "manifest.json", ec)) {
      manifest_path = (fs::path(dataset_path) / "manifest.json").string();
    } else {
      for (const auto& entry : fs::directory_iterator(dataset_path, ec)) {
        if (entry.path().extension() == ".bin") files.push_back(entry.path().string());
      }
      std::sort(files.begin(), files.end());
    }
  } else if (ends_with(dataset_path, ".json")) {
    manifest_path = dataset_path;
  } else {
    files.push_back(dataset_path);
  }
  if (!manifest_path.empty()) {
    KILN_ASSIGN_OR_RETURN(std::string text, slurp(manifest_path));
    nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
    if (m.is_discarded() || !m.contains("shards") || !m["shards"].is_array()) {
      return data_loss("{}: not a Kiln token-shard manifest (no \"shards\" list)", manifest_path);
    }
    for (const auto& s : m["shards"]) {
      if (!s.contains("file") || !s["file"].is_string()) return data_loss("{}: a shard entry has no \"file\"", manifest_path);
      files.push_back((fs::path(manifest_path).parent_path() / s["file"].get<std::string>()).string());
      if (s.contains("fnv1a64") && !s["fnv1a64"].is_string()) {
        return data_loss("{}: shard {}: \"fnv1a64\" is not a string", manifest_path, s["file"].get<std::string>());
      }
      checksums.push_back(s.value("fnv1a64", ""));
    }
  }
  if (files.empty()) return invalid_argument("dataset_path={}: empty corpus (no token shards)", dataset_path);
  std::vector<std::unique_ptr<Shard>> shards;
  int64_t tokens = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i < checksums.size() && !checksums[i].empty()) {
      KILN_ASSIGN_OR_RETURN(std::string bytes, slurp(files[i]));
      if (hex64(fnv1a64(bytes)) != checksums[i]) {
        return data_loss("{}: checksum mismatch with {} (the shard changed after tokenizing)", files[i], manifest_path);
      }
    }
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Shard> shard, Shard::open(files[i]));
    tokens += shard->num_tokens();
    shards.push_back(std::move(shard));
  }
  if (tokens == 0) return invalid_argument("dataset_path={}: empty corpus (the shards hold no tokens)", dataset_path);
  return shards;
}

}  // namespace kiln::data
