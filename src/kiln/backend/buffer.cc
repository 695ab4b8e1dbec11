#include "kiln/backend/buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "kiln/base/check.h"

namespace kiln::backend {

std::byte* allocate_aligned(int64_t bytes) {
  size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 1) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, size);
  KILN_CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  return static_cast<std::byte*>(p);
}

namespace {
// Zeros from this size up are fresh pages mapped from the kernel (page aligned, resident only
// once written), so making the optimizer moments at start-up costs no pass over them.
constexpr int64_t kMappedZerosBytes = int64_t{1} << 20;

std::shared_ptr<std::byte[]> allocate(int64_t bytes) {
  return std::shared_ptr<std::byte[]>(allocate_aligned(bytes), [](std::byte* q) { std::free(q); });
}
}  // namespace

BufferPool::~BufferPool() {
  for (auto& [bytes, p] : free_) std::free(p);
}

std::shared_ptr<std::byte[]> BufferPool::take(int64_t bytes) {
  std::byte* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
    }
  }
  if (!p) p = allocate_aligned(bytes);
  std::weak_ptr<BufferPool> pool = weak_from_this();
  return std::shared_ptr<std::byte[]>(p, [pool, bytes](std::byte* q) {
    if (auto alive = pool.lock()) {
      alive->give_back(q, bytes);
    } else {
      std::free(q);
    }
  });
}

void BufferPool::give_back(std::byte* p, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(bytes, p);
}

int64_t BufferPool::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const auto& [bytes, p] : free_) total += bytes;
  return total;
}

Buffer::Buffer(ir::Shape shape, BufferPool& pool) : shape_(std::move(shape)) {
  KILN_CHECK(!shape_.is_tuple()) << "Buffer of tuple shape " << shape_.to_string();
  data_ = pool.take(shape_.byte_size());
}

Buffer::Buffer(ir::Shape shape) : shape_(std::move(shape)) {
  KILN_CHECK(!shape_.is_tuple()) << "Buffer of tuple shape " << shape_.to_string();
  data_ = allocate(shape_.byte_size());
}

Buffer Buffer::zeros(ir::Shape shape) {
  KILN_CHECK(!shape.is_tuple()) << "Buffer of tuple shape " << shape.to_string();
  const int64_t bytes = shape.byte_size();
  if (bytes < kMappedZerosBytes) {
    Buffer b(std::move(shape));
    std::memset(b.data(), 0, static_cast<size_t>(bytes));
    return b;
  }
  // The kernel's zero pages: nothing is written now, and each page becomes resident when
  // the step first writes it (the optimizer moments: half the state, made at start-up).
  const size_t size = static_cast<size_t>(bytes);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  KILN_CHECK(p != MAP_FAILED) << "out of memory mapping " << bytes << " bytes of zeros";
  Buffer b;
  b.shape_ = std::move(shape);
  b.data_ = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [size](std::byte* q) { munmap(q, size); });
  return b;
}

Buffer Buffer::in_storage(ir::Shape shape, const std::shared_ptr<std::byte[]>& storage, int64_t offset) {
  KILN_CHECK(!shape.is_tuple()) << "Buffer of tuple shape " << shape.to_string();
  Buffer b;
  b.shape_ = std::move(shape);
  b.data_ = std::shared_ptr<std::byte[]>(storage, storage.get() + offset);  // aliasing: shares ownership
  return b;
}

Buffer Buffer::from_literal(const ir::Literal& literal) {
  Buffer b(literal.shape());
  for (int64_t i = 0; i < b.num_elements(); ++i) b.set(i, literal.at(i));
  return b;
}

double Buffer::get(int64_t i) const {
  switch (shape_.dtype()) {
    case ir::DType::kPred: return as<uint8_t>()[i] ? 1.0 : 0.0;
    case ir::DType::kS32: return as<int32_t>()[i];
    case ir::DType::kU32: return as<uint32_t>()[i];
    case ir::DType::kBF16: return ir::bf16_bits_to_float(as<uint16_t>()[i]);
    case ir::DType::kF32: return as<float>()[i];
    case ir::DType::kF64: return as<double>()[i];
  }
  return 0;
}

void Buffer::set(int64_t i, double value) {
  double v = ir::round_to_dtype(shape_.dtype(), value);
  switch (shape_.dtype()) {
    case ir::DType::kPred: as<uint8_t>()[i] = v != 0.0; break;
    case ir::DType::kS32: as<int32_t>()[i] = static_cast<int32_t>(v); break;
    case ir::DType::kU32: as<uint32_t>()[i] = static_cast<uint32_t>(v); break;
    case ir::DType::kBF16: as<uint16_t>()[i] = ir::float_to_bf16_bits(static_cast<float>(v)); break;
    case ir::DType::kF32: as<float>()[i] = static_cast<float>(v); break;
    case ir::DType::kF64: as<double>()[i] = v; break;
  }
}

ir::Literal Buffer::to_literal() const {
  std::vector<double> values(num_elements());
  for (int64_t i = 0; i < num_elements(); ++i) values[i] = get(i);
  return ir::Literal(shape_, std::move(values));
}

Buffer Buffer::view(ir::Shape shape) const {
  KILN_CHECK_EQ(shape.byte_size(), shape_.byte_size()) << "view " << shape_.to_string() << " as " << shape.to_string();
  Buffer b;
  b.shape_ = std::move(shape);
  b.data_ = data_;
  return b;
}

}  // namespace kiln::backend
