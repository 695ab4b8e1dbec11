// Host buffers: an array shape and its elements in their real dtype (4 bytes per f32, 2 per
// bf16...), 64-byte aligned for vector loads. What backends and the runtime pass around;
// ir::Literal (doubles) stays the interpreter's type, and the two convert both ways.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/ir/literal.h"

namespace kiln::backend {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(ir::Shape shape);  // uninitialised contents
  static Buffer zeros(ir::Shape shape);
  static Buffer from_literal(const ir::Literal& literal);

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

// A value of the program: one buffer for an array, one per element for a tuple.
using Value = std::vector<Buffer>;

}  // namespace kiln::backend
