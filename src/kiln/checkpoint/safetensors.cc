#include "kiln/checkpoint/safetensors.h"

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kiln/base/sizes.h"

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

namespace {

// Converts every value with one cast, the dtype chosen once per tensor (not per element):
// this runs while a training step waits for its checkpoint snapshot.
template <typename T, typename F>
void store_all(const std::vector<double>& v, char* out, F convert) {
  for (size_t i = 0; i < v.size(); ++i) {
    T x = convert(v[i]);
    std::memcpy(out + sizeof(T) * i, &x, sizeof(T));
  }
}

}  // namespace

std::string literal_bytes(const ir::Literal& literal) {
  const ir::DType dtype = literal.shape().dtype();
  const std::vector<double>& v = literal.values();
  std::string out(v.size() * static_cast<size_t>(ir::dtype_size(dtype)), '\0');
  char* p = out.data();  // x86-64 and aarch64 are little-endian, as the format wants
  switch (dtype) {
    case ir::DType::kF32: store_all<float>(v, p, [](double x) { return static_cast<float>(x); }); break;
    case ir::DType::kBF16:
      store_all<uint16_t>(v, p, [](double x) { return ir::float_to_bf16_bits(static_cast<float>(x)); });
      break;
    case ir::DType::kF64: store_all<double>(v, p, [](double x) { return x; }); break;
    case ir::DType::kS32: store_all<int32_t>(v, p, [](double x) { return static_cast<int32_t>(x); }); break;
    case ir::DType::kU32: store_all<uint32_t>(v, p, [](double x) { return static_cast<uint32_t>(x); }); break;
    case ir::DType::kPred: store_all<char>(v, p, [](double x) { return static_cast<char>(x != 0 ? 1 : 0); }); break;
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

Status write_fd_all(int fd, std::string_view data, const std::string& path) {
  return write_all(fd, data.data(), data.size(), path);
}

Status pread_fd_all(int fd, char* out, size_t size, uint64_t offset, const std::string& path, const std::string& what) {
  size_t done = 0;
  while (done < size) {
    ssize_t r = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error("reading {} from {}: {}", what, path, std::strerror(errno));
    if (r == 0) return data_loss("{}: truncated while reading {}", path, what);
    done += static_cast<size_t>(r);
  }
  return ok_status();
}

int safetensors_dtype_size(const std::string& name) {
  if (name == "F64" || name == "I64") return 8;
  if (name == "F32" || name == "I32" || name == "U32") return 4;
  if (name == "BF16" || name == "F16" || name == "I16" || name == "U16") return 2;
  if (name == "U8" || name == "I8" || name == "BOOL") return 1;
  return 0;
}

Result<std::string> safetensors_header(const std::string& path, const std::vector<RawTensor>& tensors,
                                       const std::map<std::string, std::string>& metadata) {
  // nlohmann::ordered_json keeps the file order of the header (= data order).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const RawTensor& t : tensors) {
    const int size = safetensors_dtype_size(t.dtype);
    if (size == 0) return invalid_argument("{}: tensor {} has dtype {}, which safetensors files do not hold", path, t.name, t.dtype);
    if (header.contains(t.name)) return invalid_argument("{}: tensor {} is written twice", path, t.name);
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    const size_t bytes = static_cast<size_t>(n * size);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.dims}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);  // little-endian, as the format wants
  return out + text;
}

Status write_safetensors_raw(const std::string& path, const std::vector<RawTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  KILN_ASSIGN_OR_RETURN(std::string header, safetensors_header(path, tensors, metadata));
  for (const RawTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    const size_t want = static_cast<size_t>(n * safetensors_dtype_size(t.dtype));
    if (t.bytes == nullptr || t.bytes->size() != want) {
      return invalid_argument("{}: tensor {} has {} bytes, its shape needs {}", path, t.name,
                              t.bytes ? t.bytes->size() : 0, want);
    }
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("creating {}: {}", path, std::strerror(errno));
  Status st = write_all(fd, header.data(), header.size(), path);
  for (size_t i = 0; st.ok() && i < tensors.size(); ++i) {
    st = write_all(fd, tensors[i].bytes->data(), tensors[i].bytes->size(), path);
  }
  if (st.ok() && ::fsync(fd) != 0) st = io_error("syncing {}: {}", path, std::strerror(errno));
  if (::close(fd) != 0 && st.ok()) st = io_error("closing {}: {}", path, std::strerror(errno));
  if (!st.ok()) ::unlink(path.c_str());
  return st;
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> payloads;
  payloads.reserve(tensors.size());
  std::vector<RawTensor> raw;
  for (const auto& [name, literal] : tensors) {
    std::string type = safetensors_dtype(literal->shape().dtype());
    if (type.empty()) return invalid_argument("{}: tensor {} has dtype pred, which safetensors files do not hold", path, name);
    payloads.push_back(literal_bytes(*literal));
    raw.push_back({name, type, literal->shape().dims(), &payloads.back()});
  }
  return write_safetensors_raw(path, raw, metadata);
}

Result<SafetensorsIndex> index_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return not_found("cannot open safetensors file {}", path);
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec) return io_error("{}: {}", path, ec.message());
  if (file_size < 8) return data_loss("{}: truncated: {} bytes, shorter than the 8-byte header length", path, file_size);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > file_size - 8) return data_loss("{}: truncated: header of {} bytes, file of {} bytes", path, n, file_size);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  if (!in.good()) return io_error("{}: reading the header failed", path);
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return data_loss("{}: corrupt header (not a JSON object)", path);
  const uint64_t data_size = file_size - 8 - n;

  SafetensorsIndex out;
  out.path = path;
  out.data_start = 8 + n;
  std::vector<std::pair<uint64_t, std::string>> order;
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
    SafetensorsEntry e;
    e.dtype = info["dtype"].get<std::string>();
    const int size = safetensors_dtype_size(e.dtype);
    if (size == 0) return data_loss("{}: tensor {}: unknown safetensors dtype {}", path, name, e.dtype);
    for (const auto& d : info["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return data_loss("{}: tensor {}: bad shape {}", path, name, info["shape"].dump());
      e.dims.push_back(d.get<int64_t>());
    }
    const std::optional<uint64_t> count = checked_element_count(e.dims);
    if (!count) {
      return data_loss("{}: tensor {}: shape {} has more than {} elements", path, name, info["shape"].dump(),
                       kMaxFileTensorElements);
    }
    const uint64_t elements = *count;
    const auto& offs = info["data_offsets"];
    if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned()) {
      return data_loss("{}: tensor {}: bad data_offsets {}", path, name, offs.dump());
    }
    e.begin = offs[0].get<uint64_t>();
    e.end = offs[1].get<uint64_t>();
    const uint64_t want = elements * static_cast<uint64_t>(size);
    if (e.end < e.begin || e.end - e.begin != want) {
      return data_loss("{}: tensor {}: data_offsets [{}, {}] hold {} bytes, its shape {} {} needs {}", path, name,
                       e.begin, e.end, e.end < e.begin ? 0 : e.end - e.begin, e.dtype, ir::dims_to_string(e.dims), want);
    }
    if (e.end > data_size) {
      return data_loss("{}: truncated: tensor {} ends at byte {} of the data, which has {} bytes", path, name, e.end,
                       data_size);
    }
    order.emplace_back(e.begin, name);
    out.entries.emplace(name, std::move(e));
  }
  std::sort(order.begin(), order.end());
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    if (out.entries.at(order[i].second).end > order[i + 1].first) {
      return data_loss("{}: tensors {} and {} overlap", path, order[i].second, order[i + 1].second);
    }
  }
  for (auto& [begin, name] : order) out.names.push_back(name);
  return out;
}

Result<std::string> read_tensor_bytes(const SafetensorsIndex& index, const std::string& name) {
  auto it = index.entries.find(name);
  if (it == index.entries.end()) return not_found("{}: no tensor {}", index.path, name);
  int fd = ::open(index.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("opening {}: {}", index.path, std::strerror(errno));
  std::string bytes(it->second.end - it->second.begin, '\0');
  Status st = pread_fd_all(fd, bytes.data(), bytes.size(), index.data_start + it->second.begin, index.path,
                           "tensor " + name);
  ::close(fd);
  if (!st.ok()) return st;
  return bytes;
}

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(SafetensorsIndex index, index_safetensors(path));
  SafetensorsFile out;
  out.metadata = index.metadata;
  for (const std::string& name : index.names) {
    const SafetensorsEntry& e = index.entries.at(name);
    Result<ir::DType> dtype = parse_safetensors_dtype(e.dtype);
    if (!dtype.ok()) return data_loss("{}: tensor {}: {}", path, name, dtype.status().message());
    KILN_ASSIGN_OR_RETURN(std::string bytes, read_tensor_bytes(index, name));
    KILN_ASSIGN_OR_RETURN(ir::Literal lit, literal_from_bytes(ir::Shape(*dtype, e.dims), bytes));
    out.tensors.emplace(name, std::move(lit));
    out.names.push_back(name);
  }
  return out;
}

}  // namespace kiln::checkpoint
