#include "npy.h"

#include <cstring>
#include <fstream>
#include <optional>
#include <string_view>
#include <sstream>

#include <fmt/format.h>

#include "kiln/base/sizes.h"

namespace kiln::app {

namespace {

// The text between `open` and `close` after `key` and spaces in a .npy header dict
// ("'descr': '<i4'" -> <i4). Plain scanning: a header may be megabytes of hostile bytes.
bool dict_value(const std::string& header, std::string_view key, char open, char close, std::string& out) {
  size_t at = header.find(key);
  if (at == std::string::npos) return false;
  at += key.size();
  while (at < header.size() && header[at] == ' ') ++at;
  if (at >= header.size() || header[at] != open) return false;
  const size_t end = header.find(close, at + 1);
  if (end == std::string::npos) return false;
  out = header.substr(at + 1, end - at - 1);
  return true;
}

}  // namespace

Result<NpyIds> read_npy_ids(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return not_found("cannot open {}", path);
  std::string blob((std::istreambuf_iterator<char>(in)), {});
  if (blob.size() < 10 || blob.compare(0, 6, "\x93NUMPY") != 0) return invalid_argument("{} is not a .npy file", path);
  const int major = static_cast<unsigned char>(blob[6]);
  if (major < 1 || major > 3) return invalid_argument("{}: .npy format version {} is not read (1, 2 or 3)", path, major);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(blob[8]) | (static_cast<size_t>(static_cast<unsigned char>(blob[9])) << 8);
    start = 10;
  } else {
    if (blob.size() < 12) return invalid_argument("{}: truncated .npy header", path);
    uint32_t n = 0;
    std::memcpy(&n, blob.data() + 8, 4);
    header_len = n;
    start = 12;
  }
  if (header_len > blob.size() - start) return invalid_argument("{}: truncated .npy header", path);
  const std::string header = blob.substr(start, header_len);
  std::string descr, shape;
  if (!dict_value(header, "'descr':", '\'', '\'', descr)) return invalid_argument("{}: no descr", path);
  if (header.find("'fortran_order': True") != std::string::npos) {
    return invalid_argument("{}: Fortran-ordered arrays are not read; save with C order", path);
  }
  if (!dict_value(header, "'shape':", '(', ')', shape)) return invalid_argument("{}: no shape", path);
  NpyIds out;
  std::stringstream dims(shape);
  std::string item;
  while (std::getline(dims, item, ',')) {
    const size_t first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    const size_t last = item.find_last_not_of(' ');
    const std::string digits = item.substr(first, last - first + 1);
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_argument("{}: shape ({}) is not a tuple of non-negative integers", path, shape);
    }
    out.dims.push_back(std::stoll(digits));
  }
  if (out.dims.empty() || out.dims.size() > 2) {
    return invalid_argument("{}: token ids must be [N] or [B, N], got rank {}", path, out.dims.size());
  }
  // The shape is checked against the data's size below; bounding it first keeps the
  // product from overflowing.
  const std::optional<uint64_t> count = checked_element_count(out.dims);
  if (!count) return invalid_argument("{}: shape ({}) has more than {} elements", path, shape, kMaxFileTensorElements);
  const int64_t n = static_cast<int64_t>(*count);
  int width = 0;
  if (descr == "<i4" || descr == "<u4") width = 4;
  else if (descr == "<i8") width = 8;
  else if (descr == "<u2") width = 2;
  else return invalid_argument("{}: dtype {} is not read (token ids: <i4, <i8, <u2, <u4)", path, descr);
  const char* data = blob.data() + start + header_len;
  if (blob.size() - start - header_len != static_cast<size_t>(n * width)) {
    return invalid_argument("{}: {} data bytes for shape {} of {}", path, blob.size() - start - header_len,
                            shape, descr);
  }
  out.values.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (descr == "<i4") { int32_t v; std::memcpy(&v, data + 4 * i, 4); out.values[i] = v; }
    else if (descr == "<u4") { uint32_t v; std::memcpy(&v, data + 4 * i, 4); out.values[i] = v; }
    else if (descr == "<i8") { int64_t v; std::memcpy(&v, data + 8 * i, 8); out.values[i] = v; }
    else { uint16_t v; std::memcpy(&v, data + 2 * i, 2); out.values[i] = v; }
  }
  return out;
}

Status write_npy_f32(const std::string& path, const std::vector<int64_t>& dims, const std::vector<float>& values) {
  std::string shape;  // "2, 3", but "5," for one dimension (a Python tuple)
  for (size_t i = 0; i < dims.size(); ++i) shape += fmt::format("{}{}", i ? ", " : "", dims[i]);
  if (dims.size() == 1) shape += ",";
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", shape);
  // Pad so that the data starts at a multiple of 64 bytes, ending the header with '\n'.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out.good()) return io_error("cannot create {}", path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  out.close();
  if (!out) return io_error("writing {} failed (disk full?)", path);
  return ok_status();
}

}  // namespace kiln::app
