#include "kiln/checkpoint/safetensors.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace kiln::checkpoint {

std::string safetensors_dtype(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kF32: return "F32";
    case ir::DType::kBF16: return "BF16";
    case ir::DType::kF64: return "F64";
    case ir::DType::kS32: return "I32";
    case ir::DType::kU32: return "U32";
    case ir::DType::kPred: return "";
  }
  return "";
}

Result<ir::DType> parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return ir::DType::kF32;
  if (name == "BF16") return ir::DType::kBF16;
  if (name == "F64") return ir::DType::kF64;
  if (name == "I32") return ir::DType::kS32;
  if (name == "U32") return ir::DType::kU32;
  return invalid_argument("safetensors dtype {} is not handled (F32, BF16, F64, I32, U32)", name);
}

std::string literal_bytes(const ir::Literal& literal) {
  const ir::DType dtype = literal.shape().dtype();
  const std::vector<double>& v = literal.values();
  std::string out(v.size() * static_cast<size_t>(ir::dtype_size(dtype)), '\0');
  char* p = out.data();
  for (size_t i = 0; i < v.size(); ++i) {  // x86-64 and aarch64 are little-endian, as the format wants
    switch (dtype) {
      case ir::DType::kF32: { float f = static_cast<float>(v[i]); std::memcpy(p + 4 * i, &f, 4); break; }
      case ir::DType::kBF16: {
        uint16_t b = ir::float_to_bf16_bits(static_cast<float>(v[i]));
        std::memcpy(p + 2 * i, &b, 2);
        break;
      }
      case ir::DType::kF64: std::memcpy(p + 8 * i, &v[i], 8); break;
      case ir::DType::kS32: { int32_t x = static_cast<int32_t>(v[i]); std::memcpy(p + 4 * i, &x, 4); break; }
      case ir::DType::kU32: { uint32_t x = static_cast<uint32_t>(v[i]); std::memcpy(p + 4 * i, &x, 4); break; }
      case ir::DType::kPred: p[i] = v[i] != 0 ? 1 : 0; break;
    }
  }
  return out;
}

Result<ir::Literal> literal_from_bytes(const ir::Shape& shape, const std::string& bytes) {
  const ir::DType dtype = shape.dtype();
  const size_t n = static_cast<size_t>(shape.num_elements());
  const size_t size = static_cast<size_t>(ir::dtype_size(dtype));
  if (bytes.size() != n * size) {
    return data_loss("{} needs {} bytes, got {}", shape.to_string(), n * size, bytes.size());
  }
  std::vector<double> v(n);
  const char* p = bytes.data();
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case ir::DType::kF32: { float f; std::memcpy(&f, p + 4 * i, 4); v[i] = f; break; }
      case ir::DType::kBF16: { uint16_t b; std::memcpy(&b, p + 2 * i, 2); v[i] = ir::bf16_bits_to_float(b); break; }
      case ir::DType::kF64: std::memcpy(&v[i], p + 8 * i, 8); break;
      case ir::DType::kS32: { int32_t x; std::memcpy(&x, p + 4 * i, 4); v[i] = x; break; }
      case ir::DType::kU32: { uint32_t x; std::memcpy(&x, p + 4 * i, 4); v[i] = x; break; }
      case ir::DType::kPred: v[i] = p[i] != 0; break;
    }
  }
  ir::Literal out(shape);
  out.mutable_values() = std::move(v);  // already exact in the dtype
  return out;
}

namespace {

Status write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t w = ::write(fd, data, size);
    if (w < 0) {
      if (errno == EINTR) continue;
      return io_error("writing {}: {}", path, std::strerror(errno));
    }
    data += w;
    size -= static_cast<size_t>(w);
  }
  return ok_status();
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps the file order of the header (= data order).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::string> payloads;
  size_t offset = 0;
  for (const auto& [name, literal] : tensors) {
    std::string type = safetensors_dtype(literal->shape().dtype());
    if (type.empty()) return invalid_argument("{}: tensor {} has dtype pred, which safetensors files do not hold", path, name);
    if (header.contains(name)) return invalid_argument("{}: tensor {} is written twice", path, name);
    payloads.push_back(literal_bytes(*literal));
    header[name] = {{"dtype", type}, {"shape", literal->shape().dims()},
                    {"data_offsets", {offset, offset + payloads.back().size()}}};
    offset += payloads.back().size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("creating {}: {}", path, std::strerror(errno));
  Status st = write_all(fd, reinterpret_cast<const char*>(&n), 8, path);
  if (st.ok()) st = write_all(fd, text.data(), text.size(), path);
  for (size_t i = 0; st.ok() && i < payloads.size(); ++i) st = write_all(fd, payloads[i].data(), payloads[i].size(), path);
  if (st.ok() && ::fsync(fd) != 0) st = io_error("syncing {}: {}", path, std::strerror(errno));
  if (::close(fd) != 0 && st.ok()) st = io_error("closing {}: {}", path, std::strerror(errno));
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return not_found("cannot open safetensors file {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string blob = ss.str();
  if (blob.size() < 8) return data_loss("{}: truncated: {} bytes, shorter than the 8-byte header length", path, blob.size());
  uint64_t n = 0;
  std::memcpy(&n, blob.data(), 8);
  if (n > blob.size() - 8) return data_loss("{}: truncated: header of {} bytes, file of {} bytes", path, n, blob.size());
  nlohmann::json header = nlohmann::json::parse(blob.begin() + 8, blob.begin() + 8 + static_cast<int64_t>(n), nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return data_loss("{}: corrupt header (not a JSON object)", path);
  const size_t data_size = blob.size() - 8 - n;
  const char* data = blob.data() + 8 + n;

  SafetensorsFile out;
  // Data order: sort by begin offset so names follow the file.
  std::vector<std::pair<size_t, std::string>> order;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return data_loss("{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : info.items()) {
        if (v.is_string()) out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets") ||
        !info["dtype"].is_string() || !info["shape"].is_array() || !info["data_offsets"].is_array() ||
        info["data_offsets"].size() != 2) {
      return data_loss("{}: tensor {}: corrupt header entry (needs dtype, shape, data_offsets [begin, end])", path, name);
    }
    Result<ir::DType> dtype = parse_safetensors_dtype(info["dtype"].get<std::string>());
    if (!dtype.ok()) return data_loss("{}: tensor {}: {}", path, name, dtype.status().message());
    std::vector<int64_t> dims;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return data_loss("{}: tensor {}: bad shape {}", path, name, info["shape"].dump());
      dims.push_back(d.get<int64_t>());
    }
    const auto& offs = info["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return data_loss("{}: tensor {}: bad data_offsets {}", path, name, offs.dump());
    }
    size_t begin = offs[0].get<size_t>(), end = offs[1].get<size_t>();
    ir::Shape shape(*dtype, dims);
    size_t want = static_cast<size_t>(shape.num_elements()) * static_cast<size_t>(ir::dtype_size(*dtype));
    if (end < begin || end - begin != want) {
      return data_loss("{}: tensor {}: data_offsets [{}, {}] hold {} bytes, its shape {} needs {}", path, name, begin,
                       end, end < begin ? 0 : end - begin, shape.to_string(), want);
    }
    if (end > data_size) {
      return data_loss("{}: truncated: tensor {} ends at byte {} of the data, which has {} bytes", path, name, end,
                       data_size);
    }
    KILN_ASSIGN_OR_RETURN(ir::Literal lit, literal_from_bytes(shape, std::string(data + begin, end - begin)));
    out.tensors.emplace(name, std::move(lit));
    order.emplace_back(begin, name);
  }
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    const auto& a = header[order[i].second]["data_offsets"];
    if (a[1].get<size_t>() > order[i + 1].first) {
      return data_loss("{}: tensors {} and {} overlap", path, order[i].second, order[i + 1].second);
    }
  }
  for (auto& [begin, name] : order) out.names.push_back(name);
  return out;
}

}  // namespace kiln::checkpoint
