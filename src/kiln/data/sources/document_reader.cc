// open_document_reader: the reader by file name; list_dataset_files: a dataset's files by
// directory and glob.
#include "kiln/data/sources/document_reader.h"

#include <fnmatch.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string_view>

#include "kiln/data/sources/decompress.h"
#include "kiln/data/sources/jsonl_reader.h"
#include "kiln/data/sources/parquet_reader.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

enum class Format { kParquet, kJsonl };

struct FileKind {
  Format format;
  Compression compression;
};

// The format and compression a file name says, or nothing. Case-insensitive, as names
// written on other systems come in either case.
std::optional<FileKind> kind_of(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string_view s = name;
  Compression compression = Compression::kNone;
  if (s.ends_with(".gz")) {
    compression = Compression::kGzip;
    s.remove_suffix(3);
  } else if (s.ends_with(".zst")) {
    compression = Compression::kZstd;
    s.remove_suffix(4);
  }
  // A Parquet file compresses its pages itself and is read by seeking: never compressed whole.
  if (s.ends_with(".parquet") && compression == Compression::kNone) return FileKind{Format::kParquet, compression};
  if (s.ends_with(".jsonl") || s.ends_with(".json")) return FileKind{Format::kJsonl, compression};
  return std::nullopt;
}

bool has_glob_chars(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

std::vector<std::string> split_components(std::string_view s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    size_t slash = s.find('/', start);
    if (slash == std::string_view::npos) slash = s.size();
    if (slash > start) parts.emplace_back(s.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// Whether the components `path` match the glob components `glob` (see list_dataset_files).
bool glob_match(const std::vector<std::string>& glob, size_t g, const std::vector<std::string>& path, size_t p) {
  if (g == glob.size()) return p == path.size();
  if (glob[g] == "**") {
    for (size_t q = p; q <= path.size(); ++q) {
      if (q > p && path[q - 1].starts_with('.')) break;  // ** does not enter hidden folders
      if (glob_match(glob, g + 1, path, q)) return true;
    }
    return false;
  }
  if (p == path.size()) return false;
  if (fnmatch(glob[g].c_str(), path[p].c_str(), FNM_PERIOD) != 0) return false;
  return glob_match(glob, g + 1, path, p + 1);
}

bool hidden(const fs::path& relative) {
  for (const auto& part : relative) {
    if (part.string().starts_with('.') && part != "." && part != "..") return true;
  }
  return false;
}

// The supported files under `dir` (recursively, hidden ones left out) whose path relative to
// `dir` matches `glob` (every one when it is empty), sorted.
Result<std::vector<std::string>> find_files(const fs::path& dir, const std::string& glob) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return not_found("dataset directory {} does not exist", dir.string());
  if (!fs::is_directory(dir, ec)) return invalid_argument("dataset path {} is not a directory", dir.string());
  const std::vector<std::string> glob_parts = split_components(glob);
  std::vector<std::string> found;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  if (ec) return io_error("cannot list dataset directory {}: {}", dir.string(), ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return io_error("cannot list dataset directory {}: {}", dir.string(), ec.message());
    const fs::path relative = it->path().lexically_relative(dir);
    if (hidden(relative)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec) || !kind_of(it->path().string())) continue;
    if (!glob.empty() && !glob_match(glob_parts, 0, split_components(relative.generic_string()), 0)) continue;
    found.push_back(it->path().string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

const char* supported_document_extensions() {
  return ".parquet, .jsonl, .json, .jsonl.gz, .json.gz, .jsonl.zst, .json.zst";
}

Result<std::unique_ptr<DocumentReader>> open_document_reader(const std::string& path, const std::string& column) {
  std::optional<FileKind> kind = kind_of(path);
  if (!kind) {
    return invalid_argument("{}: unknown document file type (accepted: {})", path, supported_document_extensions());
  }
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return not_found("{}: no such file", path);
  if (!fs::is_regular_file(status)) return invalid_argument("{}: not a regular file", path);
  if (column.empty()) return invalid_argument("{}: no text column named (the column / JSON field is empty)", path);
  if (kind->format == Format::kParquet) return open_parquet_reader(path, column);
  return open_jsonl_reader(path, column, kind->compression);
}

Result<std::vector<std::string>> list_dataset_files(const std::string& path, const std::string& data_dir,
                                                    const std::string& files) {
  if (path.empty()) return invalid_argument("no dataset path given");
  std::error_code ec;
  if (fs::is_regular_file(path, ec) && kind_of(path) && data_dir.empty() && files.empty()) {
    return std::vector<std::string>{path};  // one file: a glob matching only itself
  }
  fs::path dir = path;
  std::string glob = files;
  if (has_glob_chars(path) && !fs::is_directory(path, ec)) {
    // A glob path: the directory is its longest literal prefix, the rest is the glob.
    if (!data_dir.empty() || !files.empty()) {
      return invalid_argument("dataset path {} is a glob: it selects the files itself, so data_dir (\"{}\") and "
                              "files (\"{}\") must be empty", path, data_dir, files);
    }
    std::vector<std::string> parts = split_components(path);
    size_t literal = 0;
    while (literal < parts.size() && !has_glob_chars(parts[literal])) ++literal;
    std::string prefix = path.starts_with('/') ? "/" : "";
    for (size_t i = 0; i < literal; ++i) prefix += parts[i] + (i + 1 < literal ? "/" : "");
    dir = prefix.empty() ? "." : prefix;
    glob.clear();
    for (size_t i = literal; i < parts.size(); ++i) glob += (glob.empty() ? "" : "/") + parts[i];
  } else if (!data_dir.empty()) {
    dir /= data_dir;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<std::string> found, find_files(dir, glob));
  if (found.empty()) {
    if (glob.empty()) {
      return not_found("no dataset file under {} (searched recursively for {})", dir.string(),
                       supported_document_extensions());
    }
    return not_found("no dataset file under {} matches \"{}\" (accepted: {})", dir.string(), glob,
                     supported_document_extensions());
  }
  return found;
}

}  // namespace kiln::data
