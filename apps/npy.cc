#include "npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include <fmt/format.h>

namespace kiln::app {

Result<NpyIds> read_npy_ids(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return not_found("cannot open {}", path);
  std::string blob((std::istreambuf_iterator<char>(in)), {});
  if (blob.size() < 10 || blob.compare(0, 6, "\x93NUMPY") != 0) return invalid_argument("{} is not a .npy file", path);
  const int major = static_cast<unsigned char>(blob[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(blob[8]) | (static_cast<size_t>(static_cast<unsigned char>(blob[9])) << 8);
    start = 10;
  } else {
    uint32_t n = 0;
    std::memcpy(&n, blob.data() + 8, 4);
    header_len = n;
    start = 12;
  }
  if (start + header_len > blob.size()) return invalid_argument("{}: truncated .npy header", path);
  const std::string header = blob.substr(start, header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']*)'"))) return invalid_argument("{}: no descr", path);
  const std::string descr = m[1];
  if (header.find("'fortran_order': True") != std::string::npos) {
    return invalid_argument("{}: Fortran-ordered arrays are not read; save with C order", path);
  }
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) return invalid_argument("{}: no shape", path);
  NpyIds out;
  std::stringstream dims(m[1].str());
  std::string item;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(" ") == std::string::npos) continue;
    out.dims.push_back(std::stoll(item));
  }
  if (out.dims.empty() || out.dims.size() > 2) {
    return invalid_argument("{}: token ids must be [N] or [B, N], got rank {}", path, out.dims.size());
  }
  int64_t n = 1;
  for (int64_t d : out.dims) n *= d;
  int width = 0;
  if (descr == "<i4" || descr == "<u4") width = 4;
  else if (descr == "<i8") width = 8;
  else if (descr == "<u2") width = 2;
  else return invalid_argument("{}: dtype {} is not read (token ids: <i4, <i8, <u2, <u4)", path, descr);
  const char* data = blob.data() + start + header_len;
  if (blob.size() - start - header_len != static_cast<size_t>(n * width)) {
    return invalid_argument("{}: {} data bytes for shape {} of {}", path, blob.size() - start - header_len,
                            m[1].str(), descr);
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
