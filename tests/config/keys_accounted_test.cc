// Nothing accepted that is not done: every key of configs/base.yml is read by the code that
// implements it (named in src/ or apps/ outside the tables below, or a mesh key built from
// the axis names), or accepted at one value only (validate.h single_value_keys, every other
// value refused in one line), or listed as giving the same program at every value
// (same_program_keys). A key that is none of these fails here, by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "kiln/config/config.h"
#include "kiln/config/mesh.h"
#include "kiln/config/validate.h"

namespace kiln::config {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> base_keys() {
  std::vector<std::string> keys;
  std::ifstream in(fs::path(KILN_SOURCE_DIR) / "configs" / "base.yml");
  const std::regex key(R"(^([a-z_0-9]+):)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, key)) keys.push_back(m[1]);
  }
  return keys;
}

// Every C++ source under src/ and apps/, the validation tables' file left out (it names every
// single-value key to refuse it, which is not reading it).
std::string sources() {
  std::string all;
  for (const char* dir : {"src", "apps"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(KILN_SOURCE_DIR) / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      if (e.path().filename() == "validate.cc") {
        // validate.cc reads keys too (range checks, derived values): keep it without the tables.
        std::string text = read(e.path());
        const size_t a = text.find("const std::vector<SingleValueKey>& single_value_keys()");
        const size_t b = text.find("Status check_single_value_keys");
        if (a != std::string::npos && b != std::string::npos && a < b) text.erase(a, b - a);
        all += text;
        continue;
      }
      all += read(e.path());
    }
  }
  return all;
}

TEST(ConfigKeys, EveryBaseKeyIsReadOrRefused) {
  const std::vector<std::string> keys = base_keys();
  ASSERT_GT(keys.size(), 100u);
  std::set<std::string> mesh;
  for (const std::string& axis : known_mesh_axes()) {
    for (const char* level : {"ici", "dcn"}) mesh.insert(parallelism_key(axis, level));
  }
  std::set<std::string> single, same;
  for (const SingleValueKey& k : single_value_keys()) single.insert(k.key);
  for (const auto& [k, why] : same_program_keys()) same.insert(k);
  const std::string code = sources();
  std::vector<std::string> unaccounted;
  for (const std::string& key : keys) {
    const bool read = code.find("\"" + key + "\"") != std::string::npos || mesh.count(key);
    if (!read && !single.count(key) && !same.count(key)) unaccounted.push_back(key);
    // A key may not be both: one the code reads is not refused at all other values.
    EXPECT_FALSE(read && single.count(key)) << key << " is read by the code and also accepted at one value only";
  }
  EXPECT_TRUE(unaccounted.empty()) << "keys of configs/base.yml neither read nor refused: "
                                   << ::testing::PrintToString(unaccounted);
  for (const std::string& k : single) EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  for (const std::string& k : same) EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

// Each single-value key at its default loads; any other value is one line naming the key,
// the value given and the one Kiln implements.
TEST(ConfigKeys, AnotherValueOfASingleValueKeyIsRefusedInOneLine) {
  LoadOptions defaults;
  ASSERT_TRUE(load(defaults).ok()) << load(defaults).status().to_string();
  for (const SingleValueKey& k : single_value_keys()) {
    std::string other = k.value == "true"      ? "false"
                        : k.value == "false"   ? "true"
                        : k.value == "float32" ? "bfloat16"
                                               : "2";
    LoadOptions o;
    o.overrides = {k.key + "=" + other};
    Result<Config> c = load(o);
    ASSERT_FALSE(c.ok()) << k.key << "=" << other << " was accepted";
    const std::string m = c.status().message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(k.key + "=" + other), std::string::npos) << m;
    EXPECT_NE(m.find("Kiln implements only " + k.key + "=" + k.value), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace kiln::config
