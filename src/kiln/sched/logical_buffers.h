// Logical buffers: the storage a computation's values need, seen through aliasing. A value
// is one buffer per array leaf; views (reshape, copy, stop_gradient: the CPU backend runs
// them without moving data), tuples and get_tuple_element name buffers that other
// instructions defined instead of defining new ones. Both the memory-aware scheduler and
// buffer assignment (memory/) count bytes over these, so they agree on what is live.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kiln/ir/instr.h"

namespace kiln::sched {

enum class BufferSource {
  kArgument,  // a parameter of the computation: the caller's storage
  kConstant,  // materialized once at compile time
  kComputed,  // written by a kernel at run time
};

struct LogicalBuffer {
  int id = 0;
  const ir::Instr* def = nullptr;  // the instruction that writes it
  int element = 0;                 // leaf index within def's (flattened) result
  ir::Shape shape;                 // an array shape
  int64_t bytes = 0;
  BufferSource source = BufferSource::kComputed;
  bool output = false;  // reachable from the root: lives past the end of the computation
};

// True for instructions whose result shares its operand's storage.
bool is_view(const ir::Instr& instr);

class BufferModel {
 public:
  explicit BufferModel(const ir::Computation& computation);

  const std::vector<LogicalBuffer>& buffers() const { return buffers_; }
  const LogicalBuffer& buffer(int id) const { return buffers_.at(id); }
  // The leaf buffers of an instruction's value, flattened (a tuple of tuples is one list,
  // as the executable stores it).
  const std::vector<int>& leaves(const ir::Instr* instr) const { return leaves_.at(instr); }
  // Buffers an instruction defines (allocates): empty for views and plumbing.
  const std::vector<int>& defined(const ir::Instr* instr) const { return defined_.at(instr); }
  // Distinct buffers an instruction reads through its operands (computed once: the
  // schedulers and buffer assignment ask for them many times).
  const std::vector<int>& used(const ir::Instr* instr) const { return used_.at(instr); }
  // The root's leaves, in output order.
  const std::vector<int>& outputs() const { return outputs_; }

 private:
  std::vector<LogicalBuffer> buffers_;
  std::unordered_map<const ir::Instr*, std::vector<int>> leaves_;
  std::unordered_map<const ir::Instr*, std::vector<int>> defined_;
  std::unordered_map<const ir::Instr*, std::vector<int>> used_;
  std::vector<int> outputs_;
};

}  // namespace kiln::sched
