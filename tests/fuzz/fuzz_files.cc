#include "tests/fuzz/fuzz_files.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::fuzz {

namespace fs = std::filesystem;

namespace {

std::string safe_name(std::string_view raw) {
  std::string out;
  for (char c : raw) {
    if (out.size() >= 64) break;
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  while (!out.empty() && out[0] == '.') out[0] = '_';
  return out.empty() ? "_" : out;
}

// $TMPDIR/kiln-fuzz-<pid>, removed when the process exits.
const fs::path& process_dir() {
  static const fs::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    fs::path d = fs::path(tmp && *tmp ? tmp : "/tmp") / ("kiln-fuzz-" + std::to_string(::getpid()));
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(process_dir(), ec);
    });
    return d;
  }();
  return dir;
}

}  // namespace

std::string fresh_dir(const std::string& sub) {
  const fs::path dir = process_dir() / sub;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  return dir.string();
}

std::string write_file(const std::string& dir, const std::string& name, std::string_view bytes) {
  const std::string path = (fs::path(dir) / safe_name(name)).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<std::pair<std::string, std::string>> split_files(std::string_view input, const std::string& first_name) {
  std::vector<std::pair<std::string, std::string>> files;
  std::string name = first_name;
  while (true) {
    const size_t cut = input.find(kFileSeparator);
    files.emplace_back(name, std::string(input.substr(0, cut)));
    if (cut == std::string_view::npos) break;
    input.remove_prefix(cut + kFileSeparator.size());
    const size_t eol = input.find('\n');
    name = safe_name(input.substr(0, eol));
    if (eol == std::string_view::npos) {
      input = {};
    } else {
      input.remove_prefix(eol + 1);
    }
  }
  return files;
}

std::string join_files(const std::vector<std::pair<std::string, std::string>>& files) {
  std::string out;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0) out += std::string(kFileSeparator) + files[i].first + "\n";
    out += files[i].second;
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kiln::fuzz
