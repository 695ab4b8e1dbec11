#include "kiln/data/tokenizer/tokenize_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/base/hash.h"
#include "kiln/data/shard.h"

namespace kiln::data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A read-only view of a whole input file (mmap; empty files map nothing).
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return not_found("{}: input file not found", path);
    if (fs::is_directory(path, ec)) return invalid_argument("{}: is a directory; pass the text files in it", path);
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return io_error("{}: cannot read: {}", path, std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    std::unique_ptr<MappedFile> f(new MappedFile());
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ > 0) {
      void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return io_error("{}: cannot map: {}", path, std::strerror(errno));
      }
      f->data_ = static_cast<const char*>(p);
    }
    ::close(fd);
    return f;
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
  }
  std::string_view text() const { return {data_, size_}; }

 private:
  MappedFile() = default;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

bool is_jsonl(const std::string& path) { return path.ends_with(".jsonl"); }

// The line starting at `pos` without its "\n" (and without a final "\r").
std::string_view line_at(std::string_view text, size_t pos, size_t* next) {
  size_t nl = text.find('\n', pos);
  size_t end = nl == std::string_view::npos ? text.size() : nl;
  *next = nl == std::string_view::npos ? text.size() : nl + 1;
  std::string_view line = text.substr(pos, end - pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// corpus.h's paragraph separators: a blank line or a line that is exactly "%".
bool is_separator(std::string_view line) {
  return line.find_first_not_of(" \t") == std::string_view::npos || line == "%";
}

// Unit boundaries [begin, end) over one file: every chunk_bytes, moved forward to just
// after the next document boundary, so no document straddles two units.
std::vector<std::pair<size_t, size_t>> split_units(std::string_view text, bool jsonl, int64_t chunk_bytes) {
  std::vector<std::pair<size_t, size_t>> units;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t target = begin + static_cast<size_t>(chunk_bytes);
    size_t end = text.size();
    if (target < text.size()) {
      // Start at the first line that begins at or after target.
      size_t pos = text.rfind('\n', target - 1);
      pos = pos == std::string_view::npos ? 0 : pos + 1;
      if (pos < target) {
        size_t nl = text.find('\n', target - 1);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
      }
      if (jsonl) {
        end = pos;  // every line end is a boundary
      } else {
        while (pos < text.size()) {
          size_t next;
          std::string_view line = line_at(text, pos, &next);
          pos = next;
          if (is_separator(line)) break;
        }
        end = pos;
      }
    }
    units.push_back({begin, end});
    begin = end;
  }
  return units;
}

// The documents of text[begin, end) (corpus.h's rules; JSONL: the text_field string).
Result<std::vector<std::string>> unit_documents(std::string_view text, size_t begin, size_t end, bool jsonl,
                                                const std::string& text_field, const std::string& path) {
  std::vector<std::string> docs;
  std::string doc;
  auto flush = [&] {
    while (!doc.empty() && doc.back() == '\n') doc.pop_back();
    if (!doc.empty()) docs.push_back(std::move(doc));
    doc.clear();
  };
  std::string_view slice = text.substr(0, end);
  for (size_t pos = begin; pos < end;) {
    size_t line_begin = pos, next;
    std::string_view line = line_at(slice, pos, &next);
    pos = next;
    if (jsonl) {
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      auto line_no = [&] { return std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(line_begin), '\n') + 1; };
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return invalid_argument("{}:{}: not a JSON object", path, line_no());
      auto it = j.find(text_field);
      if (it == j.end() || !it->is_string()) {
        return invalid_argument("{}:{}: no \"{}\" string field (--text_field names it)", path, line_no(), text_field);
      }
      std::string d = it->get<std::string>();
      if (!d.empty()) docs.push_back(std::move(d));
    } else if (is_separator(line)) {
      flush();
    } else {
      doc.append(line);
      doc += '\n';
    }
  }
  flush();
  return docs;
}

Result<std::string> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("{}: cannot read", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status write_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return io_error("{}: cannot write", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return io_error("{}: cannot rename to {}: {}", tmp, path, ec.message());
  return ok_status();
}

struct Unit {
  size_t input;
  size_t begin, end;
};

struct UnitResult {
  bool done = false;
  std::string file;  // "" when the unit holds no documents
  int64_t documents = 0, tokens = 0;
  std::string checksum;
};

}  // namespace

Result<TokenizeCorpusReport> tokenize_corpus(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                                             const TokenizeCorpusOptions& options) {
  if (inputs.empty()) return invalid_argument("no input files to tokenize");
  if (options.chunk_bytes <= 0) return invalid_argument("--chunk_bytes={}: must be positive", options.chunk_bytes);
  if (options.text_field.empty()) return invalid_argument("--text_field is empty: name the JSONL field of a document");
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec) return io_error("{}: cannot create the output directory: {}", options.output_dir, ec.message());
  const fs::path dir(options.output_dir);

  // Inputs, their units, and the settings that decide every shard's bytes.
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<Unit> units;
  json input_list = json::array();
  TokenizeCorpusReport report;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> f, MappedFile::open(inputs[i]));
    auto mtime = fs::last_write_time(inputs[i], ec).time_since_epoch().count();
    for (auto [b, e] : split_units(f->text(), is_jsonl(inputs[i]), options.chunk_bytes)) units.push_back({i, b, e});
    input_list.push_back({{"file", fs::path(inputs[i]).filename().string()},
                          {"path", inputs[i]},
                          {"bytes", f->text().size()},
                          {"mtime", static_cast<int64_t>(mtime)}});
    report.input_bytes += static_cast<int64_t>(f->text().size());
    files.push_back(std::move(f));
  }
  const ShardInfo info{static_cast<uint64_t>(tokenizer.vocab_size()),
                       tokenizer.bos_id() < 0 ? kNoToken : static_cast<uint32_t>(tokenizer.bos_id()),
                       tokenizer.eos_id() < 0 ? kNoToken : static_cast<uint32_t>(tokenizer.eos_id())};
  json settings = {{"tokenizer",
                    {{"type", tokenizer.name()},
                     {"vocab_size", tokenizer.vocab_size()},
                     {"bos_id", tokenizer.bos_id()},
                     {"eos_id", tokenizer.eos_id()},
                     {"dtype", tokenizer.vocab_size() <= 65536 ? "uint16" : "uint32"}}},
                   {"chunk_bytes", options.chunk_bytes},
                   {"text_field", options.text_field},
                   {"inputs", input_list}};

  // Resume: units recorded by an earlier run with the same settings whose shard still has
  // its checksum are kept.
  std::vector<UnitResult> results(units.size());
  const std::string manifest_path = (dir / "manifest.json").string();
  const std::string partial_path = (dir / "manifest.partial.json").string();
  for (const std::string& previous : {partial_path, manifest_path}) {
    if (!fs::exists(previous, ec)) continue;
    Result<std::string> text = slurp(previous);
    json old = text.ok() ? json::parse(*text, nullptr, false) : json();
    if (old.is_discarded() || !old.is_object() || !old.contains("units")) {
      report.restart_reason = previous + " is not a manifest of this tokenizer job";
      continue;
    }
    json old_settings = old;
    for (const char* k : {"format", "version", "units", "shards", "documents", "tokens", "complete"}) {
      old_settings.erase(k);
    }
    for (auto& in : old_settings["inputs"]) {
      for (const char* k : {"documents", "tokens"}) in.erase(k);
    }
    if (old_settings != settings) {
      report.restart_reason = previous + " was written with another tokenizer, settings or input files";
      continue;
    }
    report.restart_reason.clear();
    for (const json& u : old["units"]) {
      size_t k = u.value("unit", size_t{0});
      if (k >= results.size() || results[k].done) continue;
      UnitResult r;
      r.file = u.value("file", "");
      r.documents = u.value("documents", int64_t{0});
      r.tokens = u.value("tokens", int64_t{0});
      r.checksum = u.value("fnv1a64", "");
      if (!r.file.empty()) {
        Result<std::string> bytes = slurp((dir / r.file).string());
        if (!bytes.ok() || hex64(fnv1a64(*bytes)) != r.checksum) continue;  // redo it
        ++report.reused_shards;
      }
      r.done = true;
      results[k] = r;
    }
    break;
  }

  auto manifest = [&](bool complete) {
    json m = settings;
    m["format"] = "kiln-token-shards";
    m["version"] = kShardVersion;
    m["complete"] = complete;
    json unit_list = json::array(), shard_list = json::array();
    std::vector<int64_t> docs(inputs.size(), 0), toks(inputs.size(), 0);
    int64_t total_docs = 0, total_tokens = 0;
    for (size_t k = 0; k < units.size(); ++k) {
      const UnitResult& r = results[k];
      if (!r.done) continue;
      unit_list.push_back({{"unit", k}, {"input", units[k].input}, {"begin", units[k].begin}, {"end", units[k].end},
                           {"file", r.file}, {"documents", r.documents}, {"tokens", r.tokens}, {"fnv1a64", r.checksum}});
      if (!r.file.empty()) {
        shard_list.push_back({{"file", r.file}, {"documents", r.documents}, {"tokens", r.tokens}, {"fnv1a64", r.checksum}});
      }
      docs[units[k].input] += r.documents;
      toks[units[k].input] += r.tokens;
      total_docs += r.documents;
      total_tokens += r.tokens;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      m["inputs"][i]["documents"] = docs[i];
      m["inputs"][i]["tokens"] = toks[i];
    }
    m["units"] = unit_list;
    m["shards"] = shard_list;
    m["documents"] = total_docs;
    m["tokens"] = total_tokens;
    return m;
  };

  // The parallel part: threads take the remaining units in order.
  Progress::Options popts;
  popts.unit = Progress::Unit::kBytes;
  popts.mode = options.progress;
  Progress progress("tokenize", report.input_bytes, popts);
  for (size_t k = 0; k < units.size(); ++k) {
    if (results[k].done) progress.advance(static_cast<int64_t>(units[k].end - units[k].begin));
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;  // guards first_error, results and the partial manifest
  Status first_error = ok_status();
  auto work = [&] {
    for (;;) {
      size_t k = next.fetch_add(1);
      if (k >= units.size() || failed.load()) return;
      if (results[k].done) continue;
      const Unit& u = units[k];
      const std::string& path = inputs[u.input];
      Status st = [&]() -> Status {
        KILN_ASSIGN_OR_RETURN(std::vector<std::string> docs,
                              unit_documents(files[u.input]->text(), u.begin, u.end, is_jsonl(path), options.text_field, path));
        ShardWriter writer(info);
        size_t done_bytes = 0;
        for (const std::string& d : docs) {
          std::vector<int32_t> ids = tokenizer.encode(d);
          KILN_RETURN_IF_ERROR(writer.add_document(ids).with_context(path));
          progress.advance(static_cast<int64_t>(d.size()));
          done_bytes += d.size();
        }
        progress.advance(static_cast<int64_t>(u.end - u.begin - std::min(done_bytes, u.end - u.begin)));
        UnitResult r;
        r.documents = writer.num_documents();
        r.tokens = writer.num_tokens();
        if (r.documents > 0) {
          r.file = fmt::format("shard_{:05d}.bin", k);
          KILN_RETURN_IF_ERROR(writer.write((dir / r.file).string()));
          KILN_ASSIGN_OR_RETURN(std::string bytes, slurp((dir / r.file).string()));
          r.checksum = hex64(fnv1a64(bytes));
        }
        r.done = true;
        std::lock_guard<std::mutex> lock(mu);
        results[k] = r;
        return write_atomically(partial_path, manifest(false).dump(1) + "\n");
      }();
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = st;
        failed = true;
        return;
      }
    }
  };
  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(1, units.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (!first_error.ok()) {
    progress.finish("stopped");
    return first_error;
  }

  json m = manifest(true);
  report.documents = m["documents"].get<int64_t>();
  report.tokens = m["tokens"].get<int64_t>();
  report.shards = static_cast<int64_t>(m["shards"].size());
  progress.finish(fmt::format("{} documents, {} tokens", report.documents, report.tokens));
  if (report.documents == 0) return invalid_argument("empty corpus: the inputs hold no documents");
  KILN_RETURN_IF_ERROR(write_atomically(manifest_path, m.dump(1) + "\n"));
  fs::remove(partial_path, ec);
  // Shards of an earlier job that this manifest does not list would only confuse a reader
  // that takes every *.bin of a directory.
  std::regex shard_name("shard_[0-9]{5}\\.bin");
  std::set<std::string> listed;
  for (const json& s : m["shards"]) listed.insert(s["file"].get<std::string>());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (std::regex_match(name, shard_name) && !listed.count(name)) fs::remove(entry.path(), ec);
  }
  report.manifest_path = manifest_path;
  return report;
}

}  // namespace kiln::data
