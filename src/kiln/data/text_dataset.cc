#include "kiln/data/text_dataset.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/base/hash.h"
#include "kiln/data/corpus.h"

namespace kiln::data {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// A NUL byte in the first 4 KiB: a binary file, not text.
bool looks_binary(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  char buf[4096];
  in.read(buf, sizeof(buf));
  return std::find(buf, buf + in.gcount(), '\0') != buf + in.gcount();
}

Result<std::string> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("{}: cannot read the text file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return io_error("{}: cannot read the text file", path);
  return ss.str();
}

}  // namespace

Result<TextFiles> list_text_files(const std::string& dataset_path) {
  if (dataset_path.empty()) {
    return invalid_argument("dataset_path is empty: dataset_type=text needs text files or directories "
                            "(comma-separated)");
  }
  TextFiles out;
  for (const std::string& item : split_commas(dataset_path)) {
    std::error_code ec;
    fs::file_status st = fs::status(item, ec);
    if (!fs::exists(st)) return not_found("dataset_path={}: {}: text file or directory not found", dataset_path, item);
    if (!fs::is_directory(st)) {
      out.files.push_back(item);
      continue;
    }
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(item, ec)) entries.push_back(e.path());
    if (ec) return io_error("dataset_path={}: {}: cannot list the directory: {}", dataset_path, item, ec.message());
    std::sort(entries.begin(), entries.end());
    int64_t taken = 0;
    for (const fs::path& p : entries) {
      if (fs::is_symlink(fs::symlink_status(p, ec)) || !fs::is_regular_file(p, ec) || looks_binary(p)) {
        ++out.skipped;
        continue;
      }
      out.files.push_back(p.string());
      ++taken;
    }
    if (taken == 0) return invalid_argument("dataset_path={}: {}: empty corpus (no text files in the directory)",
                                            dataset_path, item);
  }
  if (out.files.empty()) return invalid_argument("dataset_path={}: empty corpus (no text files)", dataset_path);
  return out;
}

Result<CachedCorpus> tokenize_cached(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                                     const std::string& tokenizer_key, const std::string& cache_root) {
  uint64_t key = fnv1a64(fmt::format("kiln-text-cache-v1|{}|{}|{}|{}|{}", tokenizer.name(), tokenizer.vocab_size(),
                                     tokenizer.bos_id(), tokenizer.eos_id(), tokenizer_key));
  for (const std::string& f : files) {
    KILN_ASSIGN_OR_RETURN(std::string bytes, read_all(f));
    key = hash_combine(key, fnv1a64(f));
    key = hash_combine(key, fnv1a64(bytes));
  }
  CachedCorpus out;
  out.dir = (fs::path(cache_root) / ("text_" + hex64(key))).string();
  const fs::path manifest = fs::path(out.dir) / "manifest.json";
  std::error_code ec;
  if (!fs::exists(manifest, ec)) {
    // Tokenize into a private temporary directory, then publish it with one rename.
    const std::string tmp = out.dir + ".tmp." + std::to_string(getpid());
    fs::remove_all(tmp, ec);
    TokenizeOptions options;
    options.output_dir = tmp;
    Result<TokenizeReport> report = tokenize_files(files, tokenizer, options);
    if (!report.ok()) {
      fs::remove_all(tmp, ec);
      return report.status();
    }
    fs::rename(tmp, out.dir, ec);
    if (ec) {
      fs::remove_all(tmp, ec);  // another process published the same corpus first
      if (!fs::exists(manifest, ec)) return io_error("{}: cannot write the token cache", out.dir);
    }
  } else {
    out.reused = true;
  }
  std::ifstream in(manifest);
  nlohmann::json m = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.is_object()) return data_loss("{}: unreadable token-cache manifest", manifest.string());
  out.documents = m.value("documents", int64_t{0});
  out.tokens = m.value("tokens", int64_t{0});
  return out;
}

}  // namespace kiln::data
