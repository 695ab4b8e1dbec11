// Host buffers: an array shape and its elements in their real dtype (4 bytes per f32, 2 per
// bf16...), 64-byte aligned for vector loads. What backends and the runtime pass around;
// ir::Literal (doubles) stays the interpreter's type, and the two convert both ways.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/ir/literal.h"

namespace kiln::backend {

// `bytes` (at least 1) rounded up to 64, 64-byte aligned, uninitialised; std::free releases
// it. Fails the process (KILN_CHECK) when out of memory.
std::byte* allocate_aligned(int64_t bytes);

class BufferPool;

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(ir::Shape shape);  // uninitialised contents
  // Storage from `pool`, returned to it (not to the system) when the last view dies.
  Buffer(ir::Shape shape, BufferPool& pool);
  static Buffer zeros(ir::Shape shape);
  static Buffer from_literal(const ir::Literal& literal);
  // A buffer inside `storage` (an arena) at `offset` bytes; it keeps the storage alive.
  static Buffer in_storage(ir::Shape shape, const std::shared_ptr<std::byte[]>& storage, int64_t offset);

  const ir::Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  int64_t byte_size() const { return shape_.byte_size(); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  template <typename T>
  T* as() { return static_cast<T*>(data()); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data()); }

  // Element i as a double, whatever the dtype (slow: for tests and conversions).
  double get(int64_t i) const;
  void set(int64_t i, double value);  // rounds to the dtype
  ir::Literal to_literal() const;

  // Two buffers may share storage (a reshape is a view); `view` reinterprets this storage
  // with another shape of the same byte size.
  Buffer view(ir::Shape shape) const;

 private:
  ir::Shape shape_;
  std::shared_ptr<std::byte[]> data_;
};

// Reuses freed storage by exact size. A step allocates the same sizes in the same order
// every time, so after the first step nothing goes back to the system: no page faults, no
// malloc trimming (the cost that makes eager frameworks slow on small CPUs).
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static std::shared_ptr<BufferPool> create() { return std::shared_ptr<BufferPool>(new BufferPool()); }
  ~BufferPool();
  std::shared_ptr<std::byte[]> take(int64_t bytes);
  int64_t held_bytes() const;  // free storage kept for reuse

 private:
  BufferPool() = default;
  void give_back(std::byte* p, int64_t bytes);
  mutable std::mutex mu_;
  std::unordered_multimap<int64_t, std::byte*> free_;
};

// A value of the program: one buffer for an array, one per element for a tuple.
using Value = std::vector<Buffer>;

}  // namespace kiln::backend
