// A minimal safetensors reader and writer for tests that exchange weights with the PyTorch
// references (the checkpoint module will bring the real one). Format: an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
// raw little-endian data. Only F32, F64 and I32 are handled.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"

namespace kiln::testing {

// A host tensor, row-major, values as doubles.
struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  std::string dtype = "F32";  // written as F32 or I32
};

inline void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::string payload;
  for (const auto& [name, t] : tensors) {
    size_t begin = payload.size();
    for (double v : t.data) {
      char bytes[4];
      if (t.dtype == "I32") {
        int32_t i = static_cast<int32_t>(v);
        std::memcpy(bytes, &i, 4);
      } else {
        float f = static_cast<float>(v);
        std::memcpy(bytes, &f, 4);
      }
      payload.append(bytes, 4);  // x86-64 is little-endian, as the format wants
    }
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, payload.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << payload;
  KILN_CHECK(out.good()) << "writing " << path;
}

inline std::map<std::string, HostTensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KILN_CHECK(in.good()) << "reading " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string blob = ss.str();
  KILN_CHECK(blob.size() >= 8) << path << " is not a safetensors file";
  uint64_t n = 0;
  std::memcpy(&n, blob.data(), 8);
  nlohmann::json header = nlohmann::json::parse(blob.substr(8, n));
  const char* data = blob.data() + 8 + n;
  std::map<std::string, HostTensor> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    HostTensor t;
    t.dtype = info["dtype"].get<std::string>();
    t.shape = info["shape"].get<std::vector<int64_t>>();
    auto offsets = info["data_offsets"].get<std::vector<size_t>>();
    const char* p = data + offsets[0];
    size_t bytes = offsets[1] - offsets[0];
    if (t.dtype == "F32") {
      for (size_t i = 0; i < bytes / 4; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        t.data.push_back(f);
      }
    } else if (t.dtype == "F64") {
      for (size_t i = 0; i < bytes / 8; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        t.data.push_back(d);
      }
    } else if (t.dtype == "I32") {
      for (size_t i = 0; i < bytes / 4; ++i) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        t.data.push_back(v);
      }
    } else {
      KILN_CHECK(false) << path << ": tensor " << name << " has dtype " << t.dtype << " (F32, F64, I32 handled)";
    }
    out[name] = std::move(t);
  }
  return out;
}

}  // namespace kiln::testing
