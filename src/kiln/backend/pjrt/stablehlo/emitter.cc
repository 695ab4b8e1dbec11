#include "kiln/backend/pjrt/stablehlo/emitter.h"

#include <bit>
#include <cstring>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kiln/backend/pjrt/stablehlo/lowering_table.h"
#include "kiln/base/check.h"
#include "kiln/ir/opcode.h"
#include "kiln/ops/registry.h"

namespace kiln::backend::pjrt {

std::string_view element_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kPred: return "i1";
    case ir::DType::kS32: return "i32";
    case ir::DType::kU32: return "ui32";
    case ir::DType::kBF16: return "bf16";
    case ir::DType::kF32: return "f32";
    case ir::DType::kF64: return "f64";
  }
  KILN_CHECK(false) << "unknown dtype";
  return "";
}

std::string tensor_type(ir::DType dtype, std::span<const int64_t> dims) {
  std::string text = "tensor<";
  for (int64_t d : dims) text += fmt::format("{}x", d);
  text += element_type(dtype);
  return text + ">";
}

std::string tensor_type(const ir::Shape& shape) {
  KILN_CHECK(!shape.is_tuple()) << "tensor_type of a tuple " << shape.to_string();
  return tensor_type(shape.dtype(), shape.dims());
}

std::string i64_array(std::span<const int64_t> values) {
  return values.empty() ? "array<i64>" : fmt::format("array<i64: {}>", fmt::join(values, ", "));
}

std::string i64_dense_2d(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<std::string> parts;
  for (const auto& row : rows) parts.push_back(fmt::format("[{}]", fmt::join(row, ", ")));
  const int64_t cols = rows.empty() ? 0 : static_cast<int64_t>(rows[0].size());
  return fmt::format("dense<[{}]> : tensor<{}x{}xi64>", fmt::join(parts, ", "), rows.size(), cols);
}

std::string join_types(std::span<const Val> values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i > 0 ? ", " : "") + values[i].type;
  return text;
}

namespace {

std::string join_ssa(std::span<const Val> values) {
  std::string text;
  for (size_t i = 0; i < values.size(); ++i) text += (i > 0 ? ", " : "") + values[i].ssa;
  return text;
}

// Little-endian bytes of one element of `dtype` with value `v` (already representable).
void append_element_bytes(ir::DType dtype, double v, std::string& bytes) {
  auto put = [&](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  switch (dtype) {
    case ir::DType::kPred: { uint8_t b = v != 0; put(&b, 1); break; }
    case ir::DType::kS32: { int32_t x = static_cast<int32_t>(v); put(&x, 4); break; }
    case ir::DType::kU32: { uint32_t x = static_cast<uint32_t>(v); put(&x, 4); break; }
    case ir::DType::kBF16: { uint16_t x = ir::float_to_bf16_bits(static_cast<float>(v)); put(&x, 2); break; }
    case ir::DType::kF32: { float x = static_cast<float>(v); put(&x, 4); break; }
    case ir::DType::kF64: put(&v, 8); break;
  }
}

// One element as an MLIR attribute literal: floats as their bit pattern in hex (exact for
// every value, NaN and infinities included), integers in decimal, pred as true/false.
std::string element_literal(ir::DType dtype, double v) {
  switch (dtype) {
    case ir::DType::kPred: return v != 0 ? "true" : "false";
    case ir::DType::kS32: return fmt::format("{}", static_cast<int32_t>(v));
    case ir::DType::kU32: return fmt::format("{}", static_cast<uint32_t>(v));
    case ir::DType::kBF16: return fmt::format("0x{:04X}", ir::float_to_bf16_bits(static_cast<float>(v)));
    case ir::DType::kF32: return fmt::format("0x{:08X}", std::bit_cast<uint32_t>(static_cast<float>(v)));
    case ir::DType::kF64: return fmt::format("0x{:016X}", std::bit_cast<uint64_t>(v));
  }
  return "";
}

}  // namespace

std::string Writer::fresh() { return fmt::format("%v{}", (*counter_)++); }

void Writer::line(const std::string& text) {
  text_.append(indent_, ' ');
  text_ += text;
  text_ += '\n';
}

namespace {
std::string op_suffix(const std::string& properties, std::span<const std::string> regions) {
  std::string text;
  if (!properties.empty()) text += " <{" + properties + "}>";
  if (!regions.empty()) {
    text += " (";
    for (size_t i = 0; i < regions.size(); ++i) text += (i > 0 ? ", " : "") + regions[i];
    text += ")";
  }
  return text;
}
}  // namespace

Val Writer::op(std::string_view name, std::span<const Val> operands, const std::string& result_type,
               const std::string& properties, std::span<const std::string> regions) {
  Val result{fresh(), result_type};
  line(fmt::format("{} = \"{}\"({}){} : ({}) -> {}", result.ssa, name, join_ssa(operands), op_suffix(properties, regions),
                   join_types(operands), result_type));
  return result;
}

std::vector<Val> Writer::op_multi(std::string_view name, std::span<const Val> operands,
                                  const std::vector<std::string>& result_types, const std::string& properties,
                                  std::span<const std::string> regions) {
  KILN_CHECK(!result_types.empty());
  const std::string base = fresh();
  std::vector<Val> results;
  for (size_t i = 0; i < result_types.size(); ++i) results.push_back({fmt::format("{}#{}", base, i), result_types[i]});
  line(fmt::format("{}:{} = \"{}\"({}){} : ({}) -> ({})", base, result_types.size(), name, join_ssa(operands),
                   op_suffix(properties, regions), join_types(operands), fmt::join(result_types, ", ")));
  return results;
}

void Writer::op_void(std::string_view name, std::span<const Val> operands) {
  line(fmt::format("\"{}\"({}) : ({}) -> ()", name, join_ssa(operands), join_types(operands)));
}

std::string Writer::region(const std::vector<std::string>& arg_types, const RegionBody& body) {
  Writer inner(counter_, indent_ + 4);
  std::vector<Val> args;
  std::string header = "^bb0(";
  for (size_t i = 0; i < arg_types.size(); ++i) {
    args.push_back({inner.fresh(), arg_types[i]});
    header += fmt::format("{}{}: {}", i > 0 ? ", " : "", args.back().ssa, arg_types[i]);
  }
  header += "):";
  std::vector<Val> yielded = body(inner, args);
  inner.op_void("stablehlo.return", yielded);
  return fmt::format("{{\n{}{}\n{}{}}}", std::string(indent_ + 2, ' '), header, inner.text(), std::string(indent_, ' '));
}

Val Writer::splat(ir::DType dtype, std::span<const int64_t> dims, double value) {
  const std::string type = tensor_type(dtype, dims);
  return op("stablehlo.constant", {}, type, fmt::format("value = dense<{}> : {}", element_literal(dtype, value), type));
}

Val Writer::literal(const ir::Literal& literal) {
  const ir::Shape& shape = literal.shape();
  const std::string type = tensor_type(shape);
  const int64_t n = shape.num_elements();
  bool same = true;
  for (int64_t i = 1; i < n && same; ++i) same = std::bit_cast<uint64_t>(literal.at(i)) == std::bit_cast<uint64_t>(literal.at(0));
  if (n == 0 || same) return splat(shape.dtype(), shape.dims(), n == 0 ? 0.0 : literal.at(0));
  std::string dense;
  if (shape.dtype() == ir::DType::kPred) {
    // MLIR reads i1 hex data bit-packed in some versions and byte-per-element in others: a
    // nested list of true/false means one thing everywhere.
    std::vector<int64_t> strides = ir::row_major_strides(shape.dims());
    std::function<std::string(int, int64_t)> nest = [&](int d, int64_t base) {
      if (d == shape.rank()) return element_literal(shape.dtype(), literal.at(base));
      std::vector<std::string> parts;
      for (int64_t i = 0; i < shape.dim(d); ++i) parts.push_back(nest(d + 1, base + i * strides[d]));
      return fmt::format("[{}]", fmt::join(parts, ", "));
    };
    dense = nest(0, 0);
  } else {
    std::string bytes;
    for (int64_t i = 0; i < n; ++i) append_element_bytes(shape.dtype(), literal.at(i), bytes);
    dense = "\"0x";
    for (unsigned char c : bytes) dense += fmt::format("{:02X}", c);
    dense += "\"";
  }
  return op("stablehlo.constant", {}, type, fmt::format("value = dense<{}> : {}", dense, type));
}

Val Writer::i64_constant(std::span<const int64_t> values) {
  const std::string type = fmt::format("tensor<{}xi64>", values.size());
  return op("stablehlo.constant", {}, type, fmt::format("value = dense<[{}]> : {}", fmt::join(values, ", "), type));
}

Val Writer::broadcast(const Val& x, const std::string& result_type, std::span<const int64_t> dims) {
  if (x.type == result_type) return x;
  return op("stablehlo.broadcast_in_dim", {x}, result_type, "broadcast_dimensions = " + i64_array(dims));
}

namespace {
// "tensor<2x3xf32>" -> "tensor<i1>"-style element swaps: the same dims with another element type.
std::string with_element(const std::string& type, std::string_view element) {
  const size_t cut = type.rfind('x') == std::string::npos || type.rfind('x') < type.find('<')
                         ? type.find('<') + 1
                         : type.rfind('x') + 1;
  return type.substr(0, cut) + std::string(element) + ">";
}
std::string scalar_of(const std::string& type) {
  const size_t cut = type.rfind('x');
  const std::string element = cut == std::string::npos || cut < type.find('<') ? type.substr(type.find('<') + 1)
                                                                                : type.substr(cut + 1);
  return "tensor<" + element;
}
}  // namespace

Val Writer::compare(const Val& a, const Val& b, std::string_view direction) {
  const std::string element = scalar_of(a.type);
  const bool is_float = element.find('f') != std::string::npos;  // f32, bf16, f64 (not i1, i32, ui32)
  return op("stablehlo.compare", {a, b}, with_element(a.type, "i1"),
            fmt::format("comparison_direction = #stablehlo<comparison_direction {}>{}", direction,
                        is_float ? ", compare_type = #stablehlo<comparison_type FLOAT>" : ""));
}

Val Writer::reduce(const Val& x, const Val& init, std::span<const int64_t> dims, std::string_view combiner,
                   const std::string& result_type) {
  const std::string scalar = init.type;
  const std::string body = region({scalar, scalar}, [&](Writer& w, std::span<const Val> args) {
    return std::vector<Val>{w.binary(combiner, args[0], args[1])};
  });
  const std::vector<std::string> regions = {body};
  return op("stablehlo.reduce", std::vector<Val>{x, init}, result_type, "dimensions = " + i64_array(dims), regions);
}

// ---- the module ----

namespace {

std::string where(const ir::Instr& instr) {
  std::string text = fmt::format("{} %{}", ir::opcode_name(instr.opcode()), instr.id());
  if (!instr.meta().loc.empty()) text += fmt::format(" ({})", instr.meta().loc);
  else if (!instr.meta().name.empty()) text += fmt::format(" ({})", instr.meta().name);
  return text;
}

std::vector<std::string> result_types(const ir::Shape& shape) {
  if (!shape.is_tuple()) return {tensor_type(shape)};
  std::vector<std::string> types;
  for (const ir::Shape& e : shape.elements()) {
    KILN_CHECK(!e.is_tuple()) << "nested tuple " << shape.to_string();
    types.push_back(tensor_type(e));
  }
  return types;
}

class ModuleEmitter {
 public:
  ModuleEmitter(const EmitOptions& options) : options_(options) {}

  // Emits `computation`'s instructions with `w`, its parameters bound to `args`.
  Result<Vals> emit_computation(Writer& w, const ir::Computation& computation, std::span<const Vals> args) {
    std::unordered_map<const ir::Instr*, Vals> values;
    for (int i = 0; i < computation.num_params(); ++i) values[computation.param(i)] = args[i];
    LowerContext ctx{w, options_, [this, &w](const ir::Computation& c, std::span<const Vals> a) {
                       return emit_computation(w, c, a);
                     }};
    for (const auto& instr : computation.instructions()) {
      if (instr->opcode() == ir::Opcode::kParameter) continue;
      const Lowering* lowering = lowerings().find(instr->opcode());
      if (lowering == nullptr || !lowering->lower) {
        return unimplemented("backend=pjrt cannot run {}: {}", where(*instr),
                             lowering == nullptr ? "no lowering registered" : lowering->no_lowering_reason);
      }
      std::vector<Vals> operands;
      operands.reserve(instr->num_operands());
      for (const ir::Instr* o : instr->operands()) operands.push_back(values.at(o));
      Result<Vals> lowered = lowering->lower(ctx, *instr, operands);
      if (!lowered.ok()) return unimplemented("backend=pjrt cannot run {}: {}", where(*instr), lowered.status().message());
      // Kiln checks what it emits before XLA sees it: a mismatch here is a lowering bug.
      const std::vector<std::string> want = result_types(instr->shape());
      KILN_CHECK(lowered->size() == want.size()) << "lowering of " << where(*instr) << " gave " << lowered->size()
                                                 << " values for " << instr->shape().to_string();
      for (size_t i = 0; i < want.size(); ++i) {
        KILN_CHECK((*lowered)[i].type == want[i]) << "lowering of " << where(*instr) << " result " << i << " has type "
                                                  << (*lowered)[i].type << ", the instruction " << want[i];
      }
      values[instr.get()] = std::move(*lowered);
    }
    return values.at(computation.root());
  }

  Result<std::string> emit(const ir::Module& module) {
    const ir::Computation& entry = *module.entry();
    int64_t counter = 0;
    Writer w(&counter, 4);
    std::vector<Vals> args;
    std::string signature;
    for (int i = 0; i < entry.num_params(); ++i) {
      const ir::Shape& shape = entry.param(i)->shape();
      if (shape.is_tuple()) return unimplemented("backend=pjrt: entry parameter {} is a tuple", i);
      args.push_back({Val{fmt::format("%arg{}", i), tensor_type(shape)}});
      signature += fmt::format("{}%arg{}: {}", i > 0 ? ", " : "", i, tensor_type(shape));
      for (const auto& [output, argument] : options_.donated) {
        if (argument == i) signature += fmt::format(" {{tf.aliasing_output = {} : i32}}", output);
      }
    }
    KILN_ASSIGN_OR_RETURN(Vals results, emit_computation(w, entry, args));
    w.op_void("func.return", results);
    const int64_t replicas = options_.mesh.num_devices();
    return fmt::format(
        "module @{} attributes {{mhlo.num_replicas = {} : i32, mhlo.num_partitions = 1 : i32}} {{\n"
        "  func.func public @main({}) -> ({}) {{\n{}  }}\n}}\n",
        "kiln", replicas, signature, join_types(results), w.text());
  }

 private:
  const EmitOptions& options_;
};

}  // namespace

Result<std::string> emit_stablehlo(const ir::Module& module, const EmitOptions& options) {
  return ModuleEmitter(options).emit(module);
}

}  // namespace kiln::backend::pjrt
