// THE op registry: every primitive op is defined once, here, by an OpDef that holds all
// there is to know about it — its shape rule, reference evaluation, gradient rule,
// elementwise C++ snippet, dimension map (the sharding rule hook) and cost. Passes,
// the interpreter, autodiff and backends read these fields; none of them switches over
// opcodes. The entries live in one file per op family (elementwise_ops.cc, shape_ops.cc,
// ...), each registering its ops with OpTable::add.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/ir/instr.h"

namespace kiln::ops {

class Builder;
struct VjpContext;

enum class AttrKind { kInt, kFloat, kString, kInts };

struct AttrSpec {
  std::string name;
  AttrKind kind = AttrKind::kInt;
  bool required = true;
  std::vector<std::string> choices;  // accepted values of a string attribute (empty: any)
};

// What a shape rule sees: operand shapes, attributes, and the result shape written in the
// IR text or asked for by the builder (null when there is none). Ops whose result cannot be
// derived from operands (parameter, constant, iota, rng, broadcast, reshape, convert)
// require `declared`; the others compute their shape, and check it against `declared`
// when given (dot_general also accepts a declared result dtype: bf16 x bf16 -> f32).
struct InferContext {
  std::span<const ir::Shape> operands;
  const ir::Attrs& attrs;
  const ir::Shape* declared = nullptr;
};

struct Cost {
  double flops = 0;            // arithmetic operations (a multiply-add counts 2)
  double transcendentals = 0;  // exp, log, tanh, ... evaluations
  double bytes_read = 0;
  double bytes_written = 0;
};

// Marks ops that carry no gradient: integer or boolean results, piecewise-constant
// functions (floor), sources (iota, rng, constant) and parameters (leaves).
enum class GradKind {
  kRule,             // `vjp` gives operand gradients
  kNone,             // no gradient flows through this op
  kTupleStructure,   // tuple / get_tuple_element: the autodiff walker routes these
};

using InferFn = std::function<Result<ir::Shape>(const InferContext&)>;
using EvalFn = std::function<ir::Literal(const ir::Instr&, std::span<const ir::Literal* const>)>;
// Scalar function of an elementwise op in double precision; the generic elementwise
// evaluation applies it per element and rounds to the result dtype.
using ScalarFn = std::function<double(const ir::Instr&, const double* args)>;
// One gradient per operand (nullptr: none flows), given the output gradient(s) in ctx.
using VjpFn = std::function<std::vector<ir::Instr*>(VjpContext&)>;
// C++ expression computing one element from the operands' element expressions.
using SnippetFn = std::function<std::string(const ir::Instr&, std::span<const std::string> args)>;
// For each operand, for each of its dimensions, the result dimension it becomes (-1: none;
// for tuple results, the dimension of element 0). Sharding propagation follows these.
using DimMapFn = std::function<std::vector<std::vector<int>>(const ir::Instr&)>;
using CostFn = std::function<Cost(const ir::Instr&)>;
// For a tuple-valued op that treats each row of dimension 0 on its own: per result element,
// whether its dimension 0 is that batch (else it is a sum over the batch). Empty when this
// instruction does not (a rank-1 sort is one row).
using BatchRowsFn = std::function<std::vector<bool>(const ir::Instr&)>;

// A small module exercising the op, whose parameters are the inputs. The op-table test
// runs every example through the verifier, the interpreter, and (for differentiable ops)
// a finite-difference check of the gradient rule in float64; backends are checked against
// the interpreter on the same examples. Parameter values are drawn uniformly from
// ranges[i] (default [-2, 2] for floats, integers in [0, 4)), so an example can keep
// inputs in an op's domain (log of positives, valid gather indices).
struct OpExample {
  std::string ir;
  std::vector<std::pair<double, double>> ranges = {};
};

enum class AsyncRole { kNone, kStart, kDone };
enum class KernelClass { kOther, kGemm, kAttention, kGroupedMatmul };
// How a loop fusion may read the op's operand 0 in its place, at another index (a mapped
// read, passes/fusion.h; backend/cpu/codegen/index_map.h): kBroadcast repeats elements (of
// a non-scalar), kTranspose permutes them, kWindow reads a window of them (a slice; a pad
// without interior padding, whose other elements are its value operand).
enum class MappedRead { kNone, kBroadcast, kTranspose, kWindow };

struct OpDef {
  ir::Opcode opcode = ir::Opcode::kParameter;
  std::string_view name;
  int min_operands = 0;
  int max_operands = 0;  // -1: any number
  std::vector<AttrSpec> attrs;
  bool elementwise = false;  // result element i depends only on operand elements i
  bool source = false;       // produces data without operands (parameter, constant, iota, rng)
  // The result depends on the device that runs it (collectives, shard_slice): passes must
  // never evaluate it at compile time (constant folding).
  bool device_dependent = false;
  // The op's value is one called computation applied to its operands (fusion): verify()
  // checks that it calls exactly one computation whose parameters have the operands' shapes
  // and whose root has the result's. Other ops call nothing.
  bool calls_body = false;
  // A source that can make any block of its result directly (rng: element values depend on
  // the global index only, ops/rng.h). Sharding propagation lets its users choose its split,
  // and the partitioner lowers it to the device's block with a `split` attribute, so a
  // split value is never made whole first.
  bool splittable_source = false;
  // A product (dot_general, grouped matmuls) that accumulates in f32 or wider and rounds
  // once to its result: the result may declare a floating dtype other than the operands'
  // (bf16 x bf16 -> f32), which passes use to drop a widening convert after it.
  bool declared_result_dtype = false;
  // Async collective pairs (async_collective_ops.cc): a start begins its blocking
  // collective `async_of` and returns the buffer it writes; the done waits for it and
  // returns that same buffer. `async_partner` is the pair's other half.
  AsyncRole async_role = AsyncRole::kNone;
  ir::Opcode async_partner = ir::Opcode::kParameter;
  ir::Opcode async_of = ir::Opcode::kParameter;
  // The result is operand 0's storage seen again (reshape, copy, stop_gradient; an async
  // done): buffer assignment gives it no storage of its own. Array results only, except a
  // done, which returns whatever its start wrote.
  bool aliases_operand = false;
  // Program structure, not work: the value is an argument, a literal, or other values
  // grouped or picked out of a group (parameter, constant, tuple, get_tuple_element).
  // Executables hand it on without a kernel; cost models and traces skip it.
  bool plumbing = false;
  // Which library kernel family a backend runs it with (what `kiln compile` counts).
  KernelClass kernel_class = KernelClass::kOther;
  // Every result element is one element of operand 0, at a position the shapes and
  // attributes fix (reshape, transpose, broadcast, slice): no arithmetic, no other operand,
  // no data-dependent index. A value made only by such ops from the state is still state
  // (the regather pass follows them).
  bool rearranges = false;
  MappedRead mapped_read = MappedRead::kNone;

  InferFn infer;
  EvalFn eval;
  ScalarFn scalar;  // elementwise ops only
  GradKind grad = GradKind::kRule;
  VjpFn vjp;
  SnippetFn snippet;  // elementwise ops only
  DimMapFn dim_map;
  // Array ops the partitioner may run per block, unchanged, on operands split along these
  // dims (elementwise ops always may, along dim_map). Null: the op has its own lowering or
  // runs on whole operands. Usually dim_map itself; reshape's differs: a split may also
  // follow the outermost dim of a merged group ([B, T, D] -> [B*T, D] keeps a split batch).
  DimMapFn split_map;
  // Tuple-valued ops whose rows along dimension 0 are independent (attention, sort, topk):
  // the partitioner keeps the batch split instead of gathering it.
  BatchRowsFn batch_rows;
  CostFn cost;
  std::vector<OpExample> examples;  // at least one per op
};

class OpTable {
 public:
  void add(OpDef def);
  const OpDef& get(ir::Opcode opcode) const;
  bool has(ir::Opcode opcode) const;

 private:
  std::vector<OpDef> defs_ = std::vector<OpDef>(ir::kNumOpcodes);
  std::vector<bool> present_ = std::vector<bool>(ir::kNumOpcodes, false);
};

// The registry, built on first use from every family's register function.
const OpTable& registry();
inline const OpDef& op_def(ir::Opcode opcode) { return registry().get(opcode); }

// Checks operand count and attributes against the OpDef, then runs its shape rule.
Result<ir::Shape> infer_shape(ir::Opcode opcode, std::span<const ir::Shape> operands, const ir::Attrs& attrs,
                              const ir::Shape* declared);

// Structural verification (ir::verify_structure) plus, for every instruction, its op's
// operand count, attributes and shape rule against the shape it carries.
Status verify(const ir::Module& module);

// Cost of one instruction / of a whole computation (sum).
Cost cost_of(const ir::Instr& instr);

// Families (one per file). Each adds its ops to the table.
void register_structural_ops(OpTable& table);
void register_elementwise_ops(OpTable& table);
void register_shape_ops(OpTable& table);
void register_reduce_ops(OpTable& table);
void register_dot_ops(OpTable& table);
void register_index_ops(OpTable& table);
void register_sort_ops(OpTable& table);
void register_fusion_ops(OpTable& table);
void register_attention_ops(OpTable& table);
void register_grouped_matmul_ops(OpTable& table);
void register_collective_ops(OpTable& table);
void register_async_collective_ops(OpTable& table);
void register_ragged_all_to_all_op(OpTable& table);

}  // namespace kiln::ops
