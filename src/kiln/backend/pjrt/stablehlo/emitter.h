// Kiln's per-device program as StableHLO text, the form every PJRT plugin compiles (XLA on
// CPU, NVIDIA GPUs and TPUs). No MLIR library is involved: the text is written in MLIR's
// generic operation form, which is the same shape for every op
//
//   %v3 = "stablehlo.add"(%v1, %v2) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
//
// so one writer serves all lowerings. Each Kiln opcode has a lowering (lowering_table.h) or
// a declared reason it has none; a tuple-valued Kiln instruction becomes several SSA values
// (no stablehlo.tuple), fusions are inlined (XLA fuses on its own), and the entry's tuple
// root becomes the function's results.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/config/mesh.h"
#include "kiln/ir/instr.h"

namespace kiln::backend::pjrt {

// An SSA value of the emitted function and its MLIR type ("tensor<2x3xf32>").
struct Val {
  std::string ssa;
  std::string type;
};

// "f32", "bf16", "i1", "i32", "ui32", "f64": MLIR's element type of a Kiln dtype.
std::string_view element_type(ir::DType dtype);
// "tensor<2x3xf32>" ("tensor<f32>" for a scalar); checks the shape is an array.
std::string tensor_type(const ir::Shape& shape);
std::string tensor_type(ir::DType dtype, std::span<const int64_t> dims);
// "array<i64: 1, 2>": a dense i64 array attribute (dimensions, permutations, slice bounds).
std::string i64_array(std::span<const int64_t> values);
// "dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>": replica groups and other i64 tables.
std::string i64_dense_2d(const std::vector<std::vector<int64_t>>& rows);

// Writes the body of one function or region: every op appends a line, and every value gets
// a name unique in the whole module (regions share the counter), so a region's values never
// shadow the enclosing function's.
class Writer {
 public:
  explicit Writer(int64_t* counter, int indent = 4) : counter_(counter), indent_(indent) {}

  // One generic-form op with one result:
  //   %r = "name"(operands) <{properties}> ({regions}) : (operand types) -> result_type
  // `properties` is the inside of <{...}> (empty: none); `regions` are region texts from region().
  Val op(std::string_view name, std::span<const Val> operands, const std::string& result_type,
         const std::string& properties = "", std::span<const std::string> regions = {});
  Val op(std::string_view name, std::initializer_list<Val> operands, const std::string& result_type,
         const std::string& properties = "") {
    return op(name, std::span<const Val>(operands.begin(), operands.size()), result_type, properties);
  }
  // The same with several results (sort, while, ...).
  std::vector<Val> op_multi(std::string_view name, std::span<const Val> operands,
                            const std::vector<std::string>& result_types, const std::string& properties = "",
                            std::span<const std::string> regions = {});
  // An op with no results (stablehlo.return, func.return).
  void op_void(std::string_view name, std::span<const Val> operands);

  // A region with one block whose arguments have `arg_types`; `body` writes its ops and
  // returns the values the block's terminator ("stablehlo.return") yields.
  using RegionBody = std::function<std::vector<Val>(Writer&, std::span<const Val> args)>;
  std::string region(const std::vector<std::string>& arg_types, const RegionBody& body);

  // Constants.
  Val splat(ir::DType dtype, std::span<const int64_t> dims, double value);  // every element `value`
  Val scalar(ir::DType dtype, double value) { return splat(dtype, {}, value); }
  Val literal(const ir::Literal& literal);  // any array literal (hex bytes for wide ones)
  Val i64_constant(std::span<const int64_t> values);  // tensor<Nxi64>

  // Frequent shapes of ops, for lowerings.
  Val unary(std::string_view name, const Val& x) { return op(name, {x}, x.type); }
  Val binary(std::string_view name, const Val& a, const Val& b) { return op(name, {a, b}, a.type); }
  Val convert(const Val& x, const std::string& result_type) {
    return x.type == result_type ? x : op("stablehlo.convert", {x}, result_type);
  }
  // stablehlo.broadcast_in_dim of x to `result_type`, x's dims landing on `dims`.
  Val broadcast(const Val& x, const std::string& result_type, std::span<const int64_t> dims);
  Val reshape(const Val& x, const std::string& result_type) {
    return x.type == result_type ? x : op("stablehlo.reshape", {x}, result_type);
  }
  Val compare(const Val& a, const Val& b, std::string_view direction /* EQ, LT, ... */);
  // A reduction of x over `dims` with the scalar computation `combiner` ("stablehlo.add",
  // "stablehlo.maximum", ...) starting from `init`; result_type drops the reduced dims.
  Val reduce(const Val& x, const Val& init, std::span<const int64_t> dims, std::string_view combiner,
             const std::string& result_type);

  const std::string& text() const { return text_; }
  std::string fresh();  // "%v17"

 private:
  void line(const std::string& text);
  int64_t* counter_;
  int indent_;
  std::string text_;
};

// The types of a value list, joined for an op's signature: "tensor<2xf32>, tensor<i32>".
std::string join_types(std::span<const Val> values);

// What a lowering knows besides its instruction and operands.
struct EmitOptions {
  // The mesh the per-device program was partitioned for: collectives get replica_groups from
  // it and shard_slice offsets from stablehlo.replica_id. Default: one device.
  config::Mesh mesh;
  // (output index, argument index): the argument's buffer is donated to that output
  // (`tf.aliasing_output`), so XLA updates the state in place.
  std::vector<std::pair<int64_t, int64_t>> donated;
  // Whether the plugin runs grouped matmul as `chlo.ragged_dot` (GPU, TPU) or needs the
  // decomposed form (XLA:CPU rejects ragged_dot).
  bool ragged_dot = false;
  // Whether grouped matmul is written as a loop over row tiles instead (GPU: XLA's CUDA
  // plugin rewrites chlo.ragged_dot into a masked dense product, every expert against every
  // row). Each tile of rows of one group is one dense product against its expert's weight
  // (lower_grouped_matmul.cc). Takes precedence over `ragged_dot`.
  bool tiled_grouped_matmul = false;
  // Whether bf16 x bf16 -> f32 products stay one mixed-precision dot (GPU, TPU: their bf16
  // units accumulate in f32). XLA:CPU's dot runs only one element type ("Unsupported element
  // type for DotThunk::Execute: BF16 x BF16 = F32"), so there the operands widen to f32 first:
  // the same products (exact in f32) and the same f32 accumulation.
  bool mixed_precision_dot = false;
};

// Emits the whole module: `func.func public @main` from the entry computation (a tuple root
// gives one result per element), with `mhlo.num_replicas` = the mesh's device count. An
// opcode without a lowering, or a lowering that fails, is a one-line error naming the op
// and the model line that made it; a lowering whose results disagree with the instruction's
// shape is an internal error (Kiln checks what it emits before XLA sees it).
Result<std::string> emit_stablehlo(const ir::Module& module, const EmitOptions& options);

}  // namespace kiln::backend::pjrt
