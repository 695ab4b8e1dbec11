#include "kiln/checkpoint/hf_import.h"

#include "kiln/checkpoint/hf_family.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/checkpoint/mxfp4.h"

namespace kiln::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexFile = "model.safetensors.index.json";

// The files of the directory, and per file the tensors the index says it holds (checked
// against the file's header once it is read).
struct FileList {
  std::vector<std::string> files;
  std::map<std::string, std::vector<std::string>> named;  // file -> tensors the index puts there
};

Result<FileList> list_files(const fs::path& dir) {
  FileList out;
  const fs::path index_path = dir / kIndexFile;
  std::error_code ec;
  if (!fs::exists(index_path, ec)) {
    out.files.push_back("model.safetensors");
    return out;
  }
  std::ifstream in(index_path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json index = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return invalid_argument("{} is not JSON", index_path.string());
  // A named copy: items() of the temporary value() returns would dangle.
  const nlohmann::json weight_map = index.value("weight_map", nlohmann::json::object());
  if (!weight_map.is_object()) return invalid_argument("{}: weight_map is not an object", index_path.string());
  std::set<std::string> unique;
  for (const auto& [name, file] : weight_map.items()) {
    if (!file.is_string()) return invalid_argument("{}: weight_map[{}] is not a file name", index_path.string(), name);
    unique.insert(file.get<std::string>());
    out.named[file.get<std::string>()].push_back(name);
  }
  out.files.assign(unique.begin(), unique.end());
  return out;
}

// Row-major [rows, cols] -> [cols, rows] for source rows [r0, r1) (src holds just them).
template <typename T>
void transpose_rows(const char* src, int64_t r0, int64_t r1, int64_t rows, int64_t cols, char* out) {
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = src + (r - r0) * cols * static_cast<int64_t>(sizeof(T));
    for (int64_t c = 0; c < cols; ++c) std::memcpy(out + (c * rows + r) * sizeof(T), row + c * sizeof(T), sizeof(T));
  }
}

// Row-major [rows, cols] -> [rows, cols / step], columns first, first + step, ...
template <typename T>
void columns_rows(const char* src, int64_t r0, int64_t r1, int64_t cols, int64_t first, int64_t step, char* out) {
  const int64_t kept = cols / step;
  for (int64_t r = r0; r < r1; ++r) {
    const char* row = src + (r - r0) * cols * static_cast<int64_t>(sizeof(T));
    for (int64_t j = 0; j < kept; ++j) {
      std::memcpy(out + (r * kept + j) * sizeof(T), row + (first + j * step) * sizeof(T), sizeof(T));
    }
  }
}

template <typename T>
void apply_rows(const KilnFromHf& t, const char* src, int64_t r0, int64_t r1, char* out) {
  if (t.transform == HfTransform::kTranspose) {
    transpose_rows<T>(src, r0, r1, t.rows, t.cols, out);
  } else {
    columns_rows<T>(src, r0, r1, t.cols, t.first, t.step, out);
  }
}

// An open file descriptor, closed on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Result<int> open_read(const std::string& path, Fd& holder) {
  holder.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (holder.fd < 0) return io_error("opening {}: {}", path, std::strerror(errno));
  return holder.fd;
}

}  // namespace

Result<HfCheckpoint> HfCheckpoint::open(const std::string& dir) {
  HfCheckpoint hf;
  hf.dir_ = dir;
  KILN_ASSIGN_OR_RETURN(FileList list, list_files(dir));
  std::map<std::string, const SafetensorsIndex*> owner;  // every tensor name in the files -> its file
  for (const std::string& f : list.files) {
    const fs::path path = fs::path(dir) / f;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      const auto& named = list.named[f];
      if (named.empty()) return not_found("{}: {} is missing", dir, f);
      return not_found("{}: {} names {} (for {}{}), which is missing", dir, kIndexFile, f, named.front(),
                       named.size() > 1 ? fmt::format(" and {} more tensors", named.size() - 1) : "");
    }
    KILN_ASSIGN_OR_RETURN(SafetensorsIndex index, index_safetensors(path.string()));
    hf.file_bytes_ += static_cast<int64_t>(fs::file_size(path, ec));
    hf.files_.push_back(std::make_unique<SafetensorsIndex>(std::move(index)));
    const SafetensorsIndex* file = hf.files_.back().get();
    for (const std::string& name : file->names) {
      auto [it, fresh] = owner.emplace(name, file);
      if (!fresh) return invalid_argument("{}: tensor {} appears in two files ({} and {})", dir, name, it->second->path, file->path);
    }
    for (const std::string& name : list.named[f]) {
      if (!file->entries.count(name)) {
        return data_loss("{}: {} puts tensor {} in {}, which does not hold it", dir, kIndexFile, name, f);
      }
    }
  }
  // Every tensor as gpt_oss_from_hf sees it: an MXFP4 pair X_blocks + X_scales is X.
  for (const auto& [name, file] : owner) {
    const SafetensorsEntry& e = file->entries.at(name);
    if (name.ends_with("_scales")) {
      const std::string base = name.substr(0, name.size() - 7);
      if (!owner.count(base + "_blocks")) return invalid_argument("{}: MXFP4 tensor {} has no {}_blocks beside it", file->path, name, base);
      continue;  // folded in with its blocks
    }
    if (!name.ends_with("_blocks")) {
      hf.where_[name] = {file, name};
      hf.shapes_[name] = {e.dtype, e.dims, false};
      continue;
    }
    const std::string base = name.substr(0, name.size() - 7);
    auto scales = owner.find(base + "_scales");
    if (scales == owner.end()) return invalid_argument("{}: MXFP4 tensor {} has no {}_scales beside it", file->path, name, base);
    const SafetensorsEntry& s = scales->second->entries.at(base + "_scales");
    if (e.dtype != "U8" || s.dtype != "U8") {
      return invalid_argument("{}: MXFP4 tensors {} and {}_scales must be U8, got {} and {}", file->path, name, base,
                              e.dtype, s.dtype);
    }
    // blocks [P..., R, G, 16] and scales [P..., R, G] -> [P..., G·32, R] (mxfp4.h).
    const std::vector<int64_t>& bd = e.dims;
    if (bd.size() < 3 || bd.back() != 16 || s.dims.size() + 1 != bd.size() ||
        !std::equal(s.dims.begin(), s.dims.end(), bd.begin())) {
      return invalid_argument("MXFP4 tensor {}: blocks {} and scales {} do not fit [..., R, G, 16] and [..., R, G]",
                              name, ir::dims_to_string(bd), ir::dims_to_string(s.dims));
    }
    if (owner.count(base)) return invalid_argument("{}: tensor {} is there both plain and as MXFP4 {}", dir, base, name);
    std::vector<int64_t> dims(bd.begin(), bd.end() - 3);
    dims.push_back(bd[bd.size() - 2] * 32);
    dims.push_back(bd[bd.size() - 3]);
    hf.where_[base] = {file, name, scales->second, base + "_scales"};
    hf.shapes_[base] = {"BF16", dims, true};
  }
  return hf;
}

namespace {

// Part i of a stacked plan entry (KilnFromHf::stack): stack[i] made into Kiln slice i, a
// tensor of the Kiln shape without its first dimension.
KilnFromHf stacked_part(const KilnFromHf& t, int64_t i) {
  KilnFromHf part = t;
  part.stack.clear();
  part.source = t.stack[static_cast<size_t>(i)];
  part.shape = ir::Shape(t.shape.dtype(), std::vector<int64_t>(t.shape.dims().begin() + 1, t.shape.dims().end()));
  return part;
}

// A stacked entry's first dimension is its number of sources (the plan made it so).
Status check_stack(const std::string& dir, const KilnFromHf& t) {
  if (t.shape.rank() < 1 || t.shape.dims()[0] != static_cast<int64_t>(t.stack.size())) {
    return internal_error("{}: {} stacks {} tensors into {}", dir, t.name, t.stack.size(), t.shape.to_string());
  }
  return ok_status();
}

}  // namespace

Result<std::string> HfCheckpoint::produce(const KilnFromHf& t) const {
  if (!t.stack.empty()) {  // each source in turn: the Kiln tensor's slices are contiguous
    KILN_RETURN_IF_ERROR(check_stack(dir_, t));
    std::string out;
    out.reserve(static_cast<size_t>(t.shape.byte_size()));
    for (int64_t i = 0; i < t.shape.dims()[0]; ++i) {
      KILN_ASSIGN_OR_RETURN(std::string part, produce(stacked_part(t, i)));
      out += part;
    }
    return out;
  }
  auto it = where_.find(t.source);
  if (it == where_.end()) return not_found("{}: Hugging Face tensor {} is missing", dir_, t.source);
  return it->second.scales_file ? produce_mxfp4(t, it->second) : produce_plain(t, it->second);
}

Result<std::string> HfCheckpoint::produce_plain(const KilnFromHf& t, const Location& at) const {
  const SafetensorsEntry& e = at.file->entries.at(at.key);
  const int elem = ir::dtype_size(t.shape.dtype());
  const uint64_t base = at.file->data_start + e.begin;
  // The plan came from this entry's dtype and dims; a mismatch is a bug, not bad input.
  const int64_t src_bytes = static_cast<int64_t>(e.end - e.begin), out_bytes = t.shape.byte_size();
  bool fits = safetensors_dtype_size(e.dtype) == elem;
  if (t.transform == HfTransform::kCopy) {
    fits = fits && src_bytes == out_bytes;
  } else {
    const int64_t kept = t.transform == HfTransform::kColumns ? t.cols / t.step : t.cols;
    fits = fits && t.rows * t.cols * elem == src_bytes && t.rows * kept * elem == out_bytes;
  }
  if (!fits) {
    return internal_error("{}: {} is {} {}, planned as {} for {}", dir_, t.source, e.dtype, ir::dims_to_string(e.dims),
                          t.shape.to_string(), t.name);
  }
  Fd fd;
  KILN_ASSIGN_OR_RETURN(int f, open_read(at.file->path, fd));
  std::string out(static_cast<size_t>(t.shape.byte_size()), '\0');
  const std::string what = "tensor " + at.key;
  if (t.transform == HfTransform::kCopy) {  // straight into the output: no second copy
    KILN_RETURN_IF_ERROR(pread_fd_all(f, out.data(), out.size(), base, at.file->path, what));
    return out;
  }
  const int64_t row_bytes = t.cols * elem;
  const int64_t chunk_rows = std::max<int64_t>(1, kHfImportChunkBytes / std::max<int64_t>(1, row_bytes));
  std::string chunk;
  for (int64_t r0 = 0; r0 < t.rows; r0 += chunk_rows) {
    const int64_t r1 = std::min(t.rows, r0 + chunk_rows);
    chunk.resize(static_cast<size_t>((r1 - r0) * row_bytes));
    KILN_RETURN_IF_ERROR(pread_fd_all(f, chunk.data(), chunk.size(), base + r0 * row_bytes, at.file->path, what));
    switch (elem) {
      case 1: apply_rows<uint8_t>(t, chunk.data(), r0, r1, out.data()); break;
      case 2: apply_rows<uint16_t>(t, chunk.data(), r0, r1, out.data()); break;
      case 4: apply_rows<uint32_t>(t, chunk.data(), r0, r1, out.data()); break;
      case 8: apply_rows<uint64_t>(t, chunk.data(), r0, r1, out.data()); break;
      default: return internal_error("{}: element size {} of {}", dir_, elem, t.source);
    }
  }
  return out;
}

namespace {

// Rows [q0, q1) of an MXFP4 pair (q: the flattened (leading dims, R) index of blocks
// [..., R, G, 16] and scales [..., R, G]) read from their open files into `blocks` and `scales`.
Status read_mxfp4_rows(int blocks_fd, const SafetensorsIndex& blocks_file, const std::string& blocks_key,
                       int scales_fd, const SafetensorsIndex& scales_file, const std::string& scales_key, int64_t G,
                       int64_t q0, int64_t q1, std::string& blocks, std::string& scales) {
  const SafetensorsEntry& b = blocks_file.entries.at(blocks_key);
  const SafetensorsEntry& s = scales_file.entries.at(scales_key);
  blocks.resize(static_cast<size_t>((q1 - q0) * G * 16));
  scales.resize(static_cast<size_t>((q1 - q0) * G));
  KILN_RETURN_IF_ERROR(pread_fd_all(blocks_fd, blocks.data(), blocks.size(), blocks_file.data_start + b.begin + q0 * G * 16,
                                    blocks_file.path, "tensor " + blocks_key));
  return pread_fd_all(scales_fd, scales.data(), scales.size(), scales_file.data_start + s.begin + q0 * G,
                      scales_file.path, "tensor " + scales_key);
}

// Where Kiln element k of a planned tensor comes from in its source, viewed as the matrix
// [rows, cols] (kCopy: the identity on [elements / last dim, last dim]).
struct SourceMap {
  HfTransform transform;
  int64_t rows, cols, kept, first, step;
  int64_t source_of(int64_t k) const {
    switch (transform) {
      case HfTransform::kCopy: return k;
      case HfTransform::kTranspose: return (k % rows) * cols + k / rows;  // Kiln [cols, rows]
      case HfTransform::kColumns: return (k / kept) * cols + first + (k % kept) * step;
    }
    return k;
  }
  // The Kiln element that source element (r, c) becomes, or -1 (a column kColumns drops).
  int64_t kiln_of(int64_t r, int64_t c) const {
    switch (transform) {
      case HfTransform::kCopy: return r * cols + c;
      case HfTransform::kTranspose: return c * rows + r;
      case HfTransform::kColumns:
        if (c < first || (c - first) % step != 0) return -1;
        return r * kept + (c - first) / step;
    }
    return -1;
  }
};

// Calls fn(local_begin, global_begin, count) for each run of `block` contiguous in `dims`
// (row-major, one per row of the block's last dimension).
template <typename Fn>
void for_each_block_run(const std::vector<int64_t>& dims, const Region& block, Fn&& fn) {
  const int rank = static_cast<int>(dims.size());
  if (rank == 0) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  if (block.num_elements() == 0) return;
  std::vector<int64_t> idx(rank, 0);
  const int64_t row = block.dims[rank - 1];
  for (int64_t local = 0; local < block.num_elements(); local += row) {
    int64_t rest = local / row, global = 0;
    for (int d = rank - 2; d >= 0; --d) {
      idx[d] = rest % block.dims[d];
      rest /= block.dims[d];
    }
    for (int d = 0; d < rank - 1; ++d) global = global * dims[d] + block.offset[d] + idx[d];
    global = global * dims[rank - 1] + block.offset[rank - 1];
    fn(local, global, row);
  }
}

// The position of Kiln element k inside `block` (row-major), or -1 outside it.
int64_t block_position(int64_t k, const std::vector<int64_t>& dims, const Region& block) {
  int64_t pos = 0, stride = 1;
  for (int d = static_cast<int>(dims.size()) - 1; d >= 0; --d) {
    const int64_t i = k % dims[d] - block.offset[d];
    k /= dims[d];
    if (i < 0 || i >= block.dims[d]) return -1;
    pos += i * stride;
    stride *= block.dims[d];
  }
  return pos;
}

}  // namespace

Result<std::string> HfCheckpoint::produce_block(const KilnFromHf& t, const Region& block) const {
  const std::vector<int64_t>& dims = t.shape.dims();
  if (block.dims.size() != dims.size() || block.offset.size() != dims.size()) {
    return internal_error("{}: a rank-{} block of {} {}", dir_, block.dims.size(), t.name, t.shape.to_string());
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    if (block.offset[d] < 0 || block.dims[d] < 0 || block.offset[d] + block.dims[d] > dims[d]) {
      return internal_error("{}: block [{}] + [{}] outside {} {}", dir_, ir::dims_to_string(block.offset),
                            ir::dims_to_string(block.dims), t.name, t.shape.to_string());
    }
  }
  if (!t.stack.empty()) {
    // The block's slices along dimension 0, each the same block of its own source.
    KILN_RETURN_IF_ERROR(check_stack(dir_, t));
    const Region inner{std::vector<int64_t>(block.offset.begin() + 1, block.offset.end()),
                       std::vector<int64_t>(block.dims.begin() + 1, block.dims.end())};
    std::string out;
    for (int64_t i = block.offset[0]; i < block.offset[0] + block.dims[0]; ++i) {
      KILN_ASSIGN_OR_RETURN(std::string part, produce_block(stacked_part(t, i), inner));
      out += part;
    }
    return out;
  }
  auto it = where_.find(t.source);
  if (it == where_.end()) return not_found("{}: Hugging Face tensor {} is missing", dir_, t.source);
  const int elem = ir::dtype_size(t.shape.dtype());
  std::string out(static_cast<size_t>(block.num_elements() * elem), '\0');
  if (it->second.scales_file) return produce_mxfp4_block(t, it->second, block);
  const Location& at = it->second;
  const SafetensorsEntry& e = at.file->entries.at(at.key);
  const int64_t n = t.shape.num_elements();
  const int64_t last = dims.empty() ? 1 : std::max<int64_t>(1, dims.back());
  SourceMap map{t.transform, t.rows, t.cols, t.step > 0 ? t.cols / t.step : t.cols, t.first, t.step};
  if (t.transform == HfTransform::kCopy) map = SourceMap{t.transform, n / last, last, last, 0, 1};
  const int64_t src_elems = map.rows * map.cols;
  if (safetensors_dtype_size(e.dtype) != elem || static_cast<int64_t>(e.end - e.begin) != src_elems * elem) {
    return internal_error("{}: {} is {} {}, planned as {} for {}", dir_, t.source, e.dtype, ir::dims_to_string(e.dims),
                          t.shape.to_string(), t.name);
  }
  if (block.num_elements() == 0) return out;
  // The source rows and columns the block reads from.
  int64_t r_lo = map.rows, r_hi = -1, c_lo = map.cols, c_hi = -1;
  for_each_block_run(dims, block, [&](int64_t, int64_t global, int64_t count) {
    for (int64_t k = global; k < global + count; ++k) {
      const int64_t s = map.source_of(k);
      r_lo = std::min(r_lo, s / map.cols);
      r_hi = std::max(r_hi, s / map.cols);
      c_lo = std::min(c_lo, s % map.cols);
      c_hi = std::max(c_hi, s % map.cols);
    }
  });
  Fd fd;
  KILN_ASSIGN_OR_RETURN(int f, open_read(at.file->path, fd));
  const uint64_t base = at.file->data_start + e.begin;
  // A block that needs a narrow band of every source row (a transposed tensor split along
  // the source's columns) reads just that band of each row, one read per row; otherwise
  // whole rows, many at a time.
  const bool band = (c_hi - c_lo + 1) * 2 <= map.cols;
  const int64_t col0 = band ? c_lo : 0, read_cols = band ? c_hi - c_lo + 1 : map.cols;
  const int64_t read_bytes = read_cols * elem;
  const int64_t chunk_rows = std::max<int64_t>(1, kHfImportChunkBytes / std::max<int64_t>(1, read_bytes));
  std::string chunk;
  for (int64_t r0 = r_lo; r0 <= r_hi; r0 += chunk_rows) {
    const int64_t r1 = std::min(r_hi + 1, r0 + chunk_rows);
    chunk.resize(static_cast<size_t>((r1 - r0) * read_bytes));
    if (band) {
      for (int64_t r = r0; r < r1; ++r) {
        KILN_RETURN_IF_ERROR(pread_fd_all(f, chunk.data() + (r - r0) * read_bytes, static_cast<size_t>(read_bytes),
                                          base + (r * map.cols + col0) * elem, at.file->path, "tensor " + at.key));
      }
    } else {
      KILN_RETURN_IF_ERROR(pread_fd_all(f, chunk.data(), chunk.size(), base + r0 * read_bytes, at.file->path,
                                        "tensor " + at.key));
    }
    *bytes_read_ += static_cast<int64_t>(chunk.size());
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c_lo; c <= c_hi; ++c) {
        const int64_t k = map.kiln_of(r, c);
        if (k < 0) continue;
        const int64_t pos = block_position(k, dims, block);
        if (pos < 0) continue;
        std::memcpy(out.data() + pos * elem, chunk.data() + ((r - r0) * read_cols + (c - col0)) * elem, elem);
      }
    }
  }
  return out;
}

Result<std::string> HfCheckpoint::produce_mxfp4_block(const KilnFromHf& t, const Location& at,
                                                     const Region& block) const {
  const SafetensorsEntry& b = at.file->entries.at(at.key);
  const std::vector<int64_t>& dims = t.shape.dims();
  const int elem = ir::dtype_size(t.shape.dtype());
  std::string out(static_cast<size_t>(block.num_elements() * elem), '\0');
  if (b.dims.size() != 4) {  // more than one leading dimension: dequantized whole, then cut
    KILN_ASSIGN_OR_RETURN(std::string whole, produce_mxfp4(t, at));
    copy_overlap(whole, Region{std::vector<int64_t>(dims.size(), 0), dims}, out, block, elem);
    return out;
  }
  // blocks [E, R, G, 16], scales [E, R, G] -> [E, G·32, R / step] keeping rows first, first + step, ...
  const int64_t E = b.dims[0], R = b.dims[1], G = b.dims[2];
  const int64_t first = t.transform == HfTransform::kColumns ? t.first : 0;
  const int64_t step = t.transform == HfTransform::kColumns ? t.step : 1;
  if (t.transform == HfTransform::kTranspose || dims.size() != 3 || dims[0] != E || dims[1] != G * 32 ||
      dims[2] != R / step || (t.shape.dtype() != ir::DType::kBF16 && t.shape.dtype() != ir::DType::kF32)) {
    return internal_error("{}: MXFP4 {} [{} x {} x {}] planned as {} for {}", dir_, t.source, E, G * 32, R,
                          t.shape.to_string(), t.name);
  }
  if (block.num_elements() == 0) return out;
  // Only the rows of the block's last dimension, one expert at a time, dequantized into that
  // expert's [G·32, R / step] slab, of which the block's columns are kept.
  const int64_t j0 = block.offset[2], j1 = j0 + block.dims[2];
  const int64_t r_lo = first + j0 * step, r_hi = first + (j1 - 1) * step + 1;  // [r_lo, r_hi)
  const int64_t kept = R / step;
  Fd bfd, sfd;
  KILN_ASSIGN_OR_RETURN(int bf, open_read(at.file->path, bfd));
  KILN_ASSIGN_OR_RETURN(int sf, open_read(at.scales_file->path, sfd));
  std::string slab(static_cast<size_t>(G * 32 * kept * elem), '\0');
  std::string blocks, scales;
  for (int64_t e = block.offset[0]; e < block.offset[0] + block.dims[0]; ++e) {
    KILN_RETURN_IF_ERROR(read_mxfp4_rows(bf, *at.file, at.key, sf, *at.scales_file, at.scales_key, G, e * R + r_lo,
                                         e * R + r_hi, blocks, scales));
    // Rows counted from this expert's start: the slab is its [G·32, R / step].
    dequantize_mxfp4_rows(reinterpret_cast<const unsigned char*>(blocks.data()),
                          reinterpret_cast<const unsigned char*>(scales.data()), r_lo, r_hi, R, G, first, step,
                          t.shape.dtype(), slab.data());
    for (int64_t c = 0; c < block.dims[1]; ++c) {
      const int64_t at_out = ((e - block.offset[0]) * block.dims[1] + c) * block.dims[2];
      const int64_t at_slab = (block.offset[1] + c) * kept + j0;
      std::memcpy(out.data() + at_out * elem, slab.data() + at_slab * elem, static_cast<size_t>(block.dims[2] * elem));
    }
  }
  return out;
}

Result<std::string> HfCheckpoint::produce_mxfp4(const KilnFromHf& t, const Location& at) const {
  const SafetensorsEntry& b = at.file->entries.at(at.key);
  const size_t rank = b.dims.size();
  const int64_t R = b.dims[rank - 3], G = b.dims[rank - 2];
  int64_t P = 1;
  for (size_t i = 0; i + 3 < rank; ++i) P *= b.dims[i];
  // The dequantized tensor is [P..., G·32, R]: copied whole, or its last dimension's columns.
  const int64_t first = t.transform == HfTransform::kColumns ? t.first : 0;
  const int64_t step = t.transform == HfTransform::kColumns ? t.step : 1;
  if (t.transform == HfTransform::kTranspose || (t.transform == HfTransform::kColumns && t.cols != R) ||
      P * G * 32 * (R / step) != t.shape.num_elements() ||
      (t.shape.dtype() != ir::DType::kBF16 && t.shape.dtype() != ir::DType::kF32)) {
    return internal_error("{}: MXFP4 {} [{} x {} x {}] planned as {} for {}", dir_, t.source, P, G * 32, R,
                          t.shape.to_string(), t.name);
  }
  Fd bfd, sfd;
  KILN_ASSIGN_OR_RETURN(int bf, open_read(at.file->path, bfd));
  KILN_ASSIGN_OR_RETURN(int sf, open_read(at.scales_file->path, sfd));
  std::string out(static_cast<size_t>(t.shape.byte_size()), '\0');
  const int64_t rows = P * R, row_bytes = G * 16;
  const int64_t chunk_rows = std::max<int64_t>(1, kHfImportChunkBytes / row_bytes);
  std::string blocks, scales;
  for (int64_t q0 = 0; q0 < rows; q0 += chunk_rows) {
    const int64_t q1 = std::min(rows, q0 + chunk_rows);
    KILN_RETURN_IF_ERROR(read_mxfp4_rows(bf, *at.file, at.key, sf, *at.scales_file, at.scales_key, G, q0, q1, blocks,
                                         scales));
    dequantize_mxfp4_rows(reinterpret_cast<const unsigned char*>(blocks.data()),
                          reinterpret_cast<const unsigned char*>(scales.data()), q0, q1, R, G, first, step,
                          t.shape.dtype(), out.data());
  }
  return out;
}

Result<HfImportPlan> plan_hf_import(const std::string& dir) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::ifstream in(config_path);
  if (!in.good()) return not_found("cannot open {}", config_path);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json config = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return invalid_argument("{} is not a JSON object", config_path);
  KILN_ASSIGN_OR_RETURN(const HfFamily* family, hf_family_for_config(config, config_path));
  KILN_ASSIGN_OR_RETURN(HfCheckpoint hf, HfCheckpoint::open(dir));
  Result<std::vector<KilnFromHf>> planned = family->plan_from_hf(hf.shapes(), config);
  if (!planned.ok()) return planned.status().with_context(dir);
  std::map<std::string, ir::Shape> shapes;
  for (const KilnFromHf& t : *planned) shapes.emplace(t.name, t.shape);
  Result<std::string> yaml = family->kiln_config(shapes, config);
  if (!yaml.ok()) return yaml.status().with_context(config_path);
  return HfImportPlan{std::move(config), std::move(hf), std::move(*planned), std::move(*yaml)};
}

bool is_hf_dir(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::is_regular_file(d / "config.json", ec) &&
         (fs::is_regular_file(d / "model.safetensors.index.json", ec) || fs::is_regular_file(d / "model.safetensors", ec));
}

}  // namespace kiln::checkpoint
