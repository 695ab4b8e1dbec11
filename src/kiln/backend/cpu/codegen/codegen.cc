#include "kiln/backend/cpu/codegen/codegen.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <fmt/format.h>

#include "kiln/backend/cpu/codegen/index_map.h"
#include "kiln/backend/cpu/kernels/reduce_plan.h"
#include "kiln/base/check.h"
#include "kiln/base/hash.h"
#include "kiln/ops/registry.h"

namespace kiln::backend::cpu {

namespace {

using ir::DType;
using ir::Instr;
using ir::Opcode;

const char* compute_type(DType d) {
  switch (d) {
    case DType::kPred: return "bool";
    case DType::kS32: return "int32_t";
    case DType::kU32: return "uint32_t";
    case DType::kBF16: return "float";
    case DType::kF32: return "float";
    case DType::kF64: return "double";
  }
  return "float";
}

const char* storage_type(DType d) {
  switch (d) {
    case DType::kPred: return "uint8_t";
    case DType::kBF16: return "uint16_t";
    default: return compute_type(d);
  }
}

std::string load(DType d, const std::string& expr) {
  if (d == DType::kBF16) return "kiln_bf16_load(" + expr + ")";
  if (d == DType::kPred) return "(" + expr + " != 0)";
  return expr;
}

std::string store(DType d, const std::string& expr) {
  if (d == DType::kBF16) return "kiln_bf16_store(" + expr + ")";
  if (d == DType::kPred) return "static_cast<uint8_t>(" + expr + ")";
  return expr;
}

std::string literal(DType d, double v) {
  const char* t = compute_type(d);
  if (std::isnan(v)) return fmt::format("std::numeric_limits<{}>::quiet_NaN()", t);
  if (std::isinf(v)) return fmt::format("{}std::numeric_limits<{}>::infinity()", v < 0 ? "-" : "", t);
  if (d == DType::kPred) return v != 0 ? "true" : "false";
  return fmt::format("static_cast<{}>({:.17g})", t, v);
}

// The elemental body: one statement per instruction, `v<k>` holding its value at index idx.
struct Body {
  std::string hoisted;               // scalar loads, outside the loop
  std::string loop;                  // inside the loop
  std::vector<std::string> results;  // the array outputs' values at idx (a reduction's excluded)
  std::vector<DType> result_types;
  const Instr* reduce = nullptr;     // an input fusion's reduction (its first output)
  std::string reduced;               // the value it reduces
  std::vector<IndexMap> maps;  // per mapped read `map<n>`
};

bool is_reduce(const Instr* i) {
  return i->opcode() == Opcode::kReduceSum || i->opcode() == Opcode::kReduceMax || i->opcode() == Opcode::kReduceMin;
}

// The body's outputs: the root, or the elements of a root tuple (multi-output fusions).
std::vector<const Instr*> outputs_of(const ir::Computation& body) {
  const Instr* root = body.root();
  if (root->opcode() != Opcode::kTuple) return {root};
  return {root->operands().begin(), root->operands().end()};
}

const Instr* reduction_of(const ir::Computation& body) {
  const Instr* first = outputs_of(body).front();
  return is_reduce(first) ? first : nullptr;
}

// Statements for every instruction but the root tuple and the reduction (which the caller's
// loop nest performs on `reduced`). Loads index with `idx`.
Body elemental(const ir::Computation& body) {
  Body out;
  std::unordered_map<const Instr*, std::string> var;
  std::unordered_map<const Instr*, std::string> unrounded;  // bf16 outputs' values before rounding
  const std::vector<const Instr*> outputs = outputs_of(body);
  int next = 0;
  auto fresh = [&] { return "v" + std::to_string(next++); };
  const Instr* root = body.root();
  out.reduce = reduction_of(body);
  const auto& loop_dims = out.reduce ? out.reduce->operand(0)->shape().dims() : outputs_of(body).front()->shape().dims();
  for (const auto& owned : body.instructions()) {
    const Instr* i = owned.get();
    if (i == out.reduce || (i == root && root->opcode() == Opcode::kTuple)) continue;
    KILN_CHECK(!is_reduce(i)) << "a reduction that is not the fusion's first output: " << i->to_string();
    DType d = i->shape().dtype();
    std::string v = fresh();
    var[i] = v;
    if (i->opcode() == Opcode::kParameter) {
      int64_t index = i->attrs().get_int("index");
      std::string ptr = fmt::format("static_cast<const {}*>(in[{}])", storage_type(d), index);
      if (i->shape().rank() == 0 && !loop_dims.empty()) {
        out.hoisted += fmt::format("  const {} {} = {};\n", compute_type(d), v, load(d, ptr + "[0]"));
      } else if (i->shape().dims() != loop_dims) {
        // Read only through index maps (transposes, broadcasts, slices, pads): `map<n>` below.
        for (const Instr* u : i->users()) {
          KILN_CHECK(passes::is_mapped_read(*u)) << "loop fusion parameter " << i->to_string() << " read by " << u->to_string();
        }
        out.hoisted += fmt::format("  const {}* const in{} = {};\n", storage_type(d), index, ptr);
      } else {
        // The pointer outside the loop: read as in[k][idx] inside it, GCC vectorizes f32 loads
        // but leaves bf16 (uint16_t) loops scalar.
        out.hoisted += fmt::format("  const {}* const in{} = {};\n", storage_type(d), index, ptr);
        out.loop += fmt::format("    const {} {} = {};\n", compute_type(d), v, load(d, fmt::format("in{}[idx]", index)));
      }
    } else if (i->opcode() == Opcode::kConstant) {
      KILN_CHECK_EQ(i->shape().num_elements(), 1) << "non-scalar constant in a loop fusion";
      out.hoisted += fmt::format("  const {} {} = {};\n", compute_type(d), v, literal(d, i->literal().at(0)));
    } else if (passes::is_mapped_read(*i)) {
      // A transpose, broadcast, slice or pad of a parameter: a load at another index, which
      // the loop plan computes as `map<n>`.
      const Instr* p = i->operand(0);
      KILN_CHECK(p->opcode() == Opcode::kParameter && i->shape().dims() == loop_dims)
          << "a fused transpose, broadcast, slice or pad reads a parameter over the loop dims: " << i->to_string();
      const size_t n = out.maps.size();
      out.maps.push_back(mapped_read_map(*i));
      std::string value = load(d, fmt::format("in{}[map{}]", p->attrs().get_int("index"), n));
      // A pad's window: outside it the value is the pad's (a scalar, hoisted), and the offset
      // is not read (it may lie outside the parameter).
      if (out.maps.back().has_window()) value = fmt::format("win{} ? {} : {}", n, value, var.at(i->operand(1)));
      out.loop += fmt::format("    const {} {} = {};\n", compute_type(d), v, value);
    } else if (i->opcode() == Opcode::kIota) {
      // Its value is the loop index along its dim: a map's offset (index_map.h).
      KILN_CHECK(passes::is_fusible_iota(*i) && i->shape().dims() == loop_dims)
          << "a fused iota is an integer over the loop dims: " << i->to_string();
      out.loop += fmt::format("    const {0} {1} = static_cast<{0}>(map{2});\n", compute_type(d), v, out.maps.size());
      out.maps.push_back(iota_map(*i));
    } else if (i->opcode() == Opcode::kBroadcast) {
      KILN_CHECK_EQ(i->operand(0)->shape().rank(), 0) << "only scalar broadcasts fuse: " << i->to_string();
      var[i] = var.at(i->operand(0));
    } else {
      const ops::OpDef& def = ops::op_def(i->opcode());
      KILN_CHECK(def.elementwise && def.snippet) << "cannot generate code for " << i->to_string();
      std::vector<std::string> args;
      for (const Instr* o : i->operands()) args.push_back(var.at(o));
      std::string expr = def.snippet(*i, args);
      // Round bf16 intermediates as the interpreter does, so results agree op by op.
      if (d == DType::kBF16 && std::count(outputs.begin(), outputs.end(), i)) {
        // A bf16 output is stored from its unrounded value: kiln_bf16_store rounds it the same
        // way, and storing the rounded value rounded twice (the same bits; AdamW's kernel with
        // the weight copy and the norm took 2.2 instead of 1.7 ms CPU per [8,512,512] parameter).
        out.loop += fmt::format("    const float {}u = {};\n", v, expr);
        unrounded[i] = v + "u";
        expr = "kiln_bf16_round(" + v + "u)";
      } else if (d == DType::kBF16) {
        expr = "kiln_bf16_round(" + expr + ")";
      }
      out.loop += fmt::format("    const {} {} = {};\n", compute_type(d), v, expr);
    }
  }
  for (const Instr* o : outputs_of(body)) {
    if (o == out.reduce) continue;
    KILN_CHECK(o->shape().dims() == loop_dims) << "fusion output over other dims: " << o->to_string();
    out.results.push_back(unrounded.count(o) ? unrounded.at(o) : var.at(o));
    out.result_types.push_back(o->shape().dtype());
  }
  if (out.reduce) out.reduced = var.at(out.reduce->operand(0));
  return out;
}

// Output pointers: `out` is the one result, or for several an array of pointers to them.
// The reduction of an input fusion is output 0 (named `o`), the arrays written at idx follow.
std::string output_pointers(const Body& b, bool multi) {
  std::string text;
  if (multi) text += "  void* const* outs = static_cast<void* const*>(out);\n";
  const size_t first = b.reduce ? 1 : 0;
  if (b.reduce) {
    const char* st = storage_type(b.reduce->shape().dtype());
    text += fmt::format("  {0}* o = static_cast<{0}*>({1});\n", st, multi ? "outs[0]" : "out");
  }
  for (size_t k = 0; k < b.results.size(); ++k) {
    const char* st = storage_type(b.result_types[k]);
    text += fmt::format("  {0}* o{1} = static_cast<{0}*>({2});\n", st, first + k,
                        multi ? fmt::format("outs[{}]", first + k) : std::string("out"));
  }
  return text;
}

// The stores of the array outputs at idx, indented by `pad` spaces.
std::string array_stores(const Body& b, int pad) {
  std::string text;
  const size_t first = b.reduce ? 1 : 0;
  for (size_t k = 0; k < b.results.size(); ++k) {
    text += fmt::format("{}o{}[idx] = {};\n", std::string(pad, ' '), first + k, store(b.result_types[k], b.results[k]));
  }
  return text;
}

}  // namespace

const std::string& kernel_prelude() {
  static const std::string prelude = R"(// Generated by Kiln: loop kernels for fused elementwise ops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

// Reduction steps: a sum accumulates (in double); max and min keep the first NaN they see.
template <typename A, typename X>
static inline void kiln_reduce_sum(A& a, X x) { a += static_cast<A>(x); }
template <typename A, typename X>
static inline void kiln_reduce_max(A& a, X x) { const A v = static_cast<A>(x); a = (v > a || v != v) ? v : a; }
template <typename A, typename X>
static inline void kiln_reduce_min(A& a, X x) { const A v = static_cast<A>(x); a = (v < a || v != v) ? v : a; }

static inline float kiln_bf16_load(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}
static inline uint16_t kiln_bf16_store(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
static inline float kiln_bf16_round(float value) { return kiln_bf16_load(kiln_bf16_store(value)); }
// min and max by value, with std::min and std::max's results: std::min/max return a reference,
// which inside an `omp simd` loop turns a hoisted operand into a per-lane array read by a
// masked gather that GCC cannot vectorize (the whole loop then ran scalar).
template <typename T>
static inline T kiln_min(T a, T b) { return b < a ? b : a; }
template <typename T>
static inline T kiln_max(T a, T b) { return a < b ? b : a; }
// exp in float arithmetic that GCC vectorizes (std::exp is a scalar libm call that keeps the
// loop scalar): exp(x) = 2^n e^r, n = x log2(e) rounded to nearest (the 1.5 * 2^23 trick, as
// floor does not vectorize without -ffast-math), r = x - n ln 2 in two parts and e^r by Cephes'
// expf polynomial (within 1 ulp of exp in double on [-104, 89]); 2^n is applied in two halves
// so that results underflow through denormals to 0 and overflow to inf as exp does; NaN stays NaN.
static inline float kiln_exp(float x) {
  const float c = kiln_min(kiln_max(x, -104.0f), 89.0f);
  const float n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (c - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t ni = n == n ? static_cast<int32_t>(n) : 0, n1 = ni / 2, n2 = ni - n1;
  const uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23, b2 = static_cast<uint32_t>(n2 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return y * s1 * s2;
}
static inline double kiln_exp(double x) { return std::exp(x); }
template <typename T, typename F>
static inline T kiln_saturate(F x) {
  if (std::isnan(x)) return 0;
  F lo = static_cast<F>(std::numeric_limits<T>::min()), hi = static_cast<F>(std::numeric_limits<T>::max());
  return x <= lo ? std::numeric_limits<T>::min() : x >= hi ? std::numeric_limits<T>::max() : static_cast<T>(x);
}
)";
  return prelude;
}

std::string loop_kernel_source(const ir::Computation& body, const std::string& name) {
  Body b = elemental(body);
  KILN_CHECK(b.reduce == nullptr) << "loop fusion with a reduction: " << body.root()->to_string();
  if (!b.maps.empty()) {
    return row_loop_kernel(name, b.hoisted, output_pointers(b, b.results.size() > 1), b.loop, array_stores(b, 4),
                           outputs_of(body).front()->shape().dims(), b.maps);
  }
  return fmt::format(
      "extern \"C\" void {}(const void* const* in, void* out, int64_t count) {{\n"
      "{}"
      "{}"
      "#pragma omp parallel for simd schedule(static) if (count > 16384)\n"
      "  for (int64_t idx = 0; idx < count; ++idx) {{\n"
      "{}"
      "{}"
      "  }}\n"
      "}}\n",
      name, b.hoisted, output_pointers(b, b.results.size() > 1), b.loop, array_stores(b, 4));
}

// A row reduction with a bf16 array output runs blocks of this many elements as one flat loop.
constexpr int64_t kStoreBlock = 1024;
static_assert(kStoreBlock % kReduceLanes == 0, "the lanes take whole blocks");

std::string input_kernel_source(const ir::Computation& body, const std::string& name) {
  Body b = elemental(body);
  const Instr* root = b.reduce;
  KILN_CHECK(root != nullptr) << "input fusion without a reduction: " << body.root()->to_string();
  KILN_CHECK(b.maps.empty()) << "an input fusion reads its operands at the loop index only: " << body.root()->to_string();
  const bool multi = !b.results.empty();
  const auto& in_dims = root->operand(0)->shape().dims();
  std::vector<int64_t> reduced = root->attrs().get_ints("dims");
  std::sort(reduced.begin(), reduced.end());
  int64_t outer = 1, red = 1, inner = 1;
  for (int64_t d = 0; d < reduced.front(); ++d) outer *= in_dims[d];
  for (int64_t d : reduced) red *= in_dims[d];
  for (size_t d = reduced.back() + 1; d < in_dims.size(); ++d) inner *= in_dims[d];
  const ReducePlan plan = plan_reduction(outer, red, inner);
  DType out = root->shape().dtype();
  // Sums accumulate in double (as the native reduction); max/min are exact in the dtype and
  // keep a NaN once seen.
  const char* acc = root->opcode() == Opcode::kReduceSum ? "double" : compute_type(out);
  std::string init = root->opcode() == Opcode::kReduceSum ? "0.0"
                     : root->opcode() == Opcode::kReduceMax
                         ? fmt::format("-std::numeric_limits<{}>::infinity()", acc)
                         : fmt::format("std::numeric_limits<{}>::infinity()", acc);
  const char* combine = root->opcode() == Opcode::kReduceSum   ? "kiln_reduce_sum"
                        : root->opcode() == Opcode::kReduceMax ? "kiln_reduce_max"
                                                               : "kiln_reduce_min";
  // The body's statements, indented for the loop nest they go into.
  auto indent = [](const std::string& text, int extra) {
    std::string pad(extra, ' '), outv;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      outv += pad + text.substr(pos, nl - pos + 1);
      pos = nl + 1;
    }
    return outv;
  };
  std::string finish = fmt::format(
      "if (splits > 1) partial[(oi * splits + s) * inner + i] = {{a}}; else o[oi * inner + i] = {};",
      store(out, fmt::format("static_cast<{}>({{a}})", compute_type(out))));
  auto finish_with = [&](const std::string& a) { return fmt::format(fmt::runtime(finish), fmt::arg("a", a)); };
  std::string nest;
  if (inner == 1) {
    // Rows: kReduceLanes independent accumulators the compiler keeps in vector registers.
    // With a bf16 array output (AdamW's update writing the bf16 weight copy, with the parameter
    // norm), whole blocks of the row first run as one flat loop that stores the outputs and
    // keeps the reduced values, then the lanes take those in the same order (the same sums, bit
    // for bit): inside the 16-lane loop GCC vectorized that body poorly (1.74 ms CPU per
    // [8,512,512] parameter, 1.02 ms blocked, 1 thread). Without a bf16 output the 16-lane loop
    // stays: blocked, the f32 AdamW kernel took 10% longer.
    std::string blocks_first;
    if (std::count(b.result_types.begin(), b.result_types.end(), DType::kBF16)) {
      blocks_first = fmt::format(
          "    for (; r + {block} <= r1; r += {block}) {{\n"
          "      {rtype} reduced[{block}];\n"
          "#pragma omp simd\n"
          "      for (int64_t k = 0; k < {block}; ++k) {{\n"
          "        const int64_t idx = oi * red + r + k;\n"
          "{loop2}"
          "{stores2}"
          "        reduced[k] = {result};\n"
          "      }}\n"
          "      for (int64_t k = 0; k < {block}; k += {lanes}) {{\n"
          "#pragma omp simd\n"
          "        for (int64_t j = 0; j < {lanes}; ++j) {combine}(lane[j], reduced[k + j]);\n"
          "      }}\n"
          "    }}\n",
          fmt::arg("block", kStoreBlock), fmt::arg("rtype", compute_type(root->operand(0)->shape().dtype())),
          fmt::arg("loop2", indent(b.loop, 4)), fmt::arg("stores2", array_stores(b, 8)),
          fmt::arg("result", b.reduced), fmt::arg("lanes", kReduceLanes), fmt::arg("combine", combine));
    }
    nest = fmt::format(
        "    {acc} lane[{lanes}];\n"
        "    for (int64_t j = 0; j < {lanes}; ++j) lane[j] = {init};\n"
        "    int64_t r = r0;\n"
        "{blocks_first}"
        "    for (; r + {lanes} <= r1; r += {lanes}) {{\n"
        "#pragma omp simd\n"
        "      for (int64_t j = 0; j < {lanes}; ++j) {{\n"
        "        const int64_t idx = oi * red + r + j;\n"
        "{loop2}"
        "{stores2}"
        "        {combine}(lane[j], {result});\n"
        "      }}\n"
        "    }}\n"
        "    for (; r < r1; ++r) {{\n"
        "      const int64_t idx = oi * red + r;\n"
        "{loop1}"
        "{stores1}"
        "      {combine}(lane[0], {result});\n"
        "    }}\n"
        "    for (int64_t j = 1; j < {lanes}; ++j) {combine}(lane[0], lane[j]);\n"
        "    const int64_t i = 0;\n"
        "    {finish}\n",
        fmt::arg("acc", acc), fmt::arg("lanes", kReduceLanes), fmt::arg("init", init),
        fmt::arg("loop2", indent(b.loop, 4)), fmt::arg("loop1", indent(b.loop, 2)), fmt::arg("combine", combine),
        fmt::arg("result", b.reduced), fmt::arg("finish", finish_with("lane[0]")),
        fmt::arg("stores2", array_stores(b, 8)), fmt::arg("stores1", array_stores(b, 6)),
        fmt::arg("blocks_first", blocks_first));
  } else {
    // Columns: a block of inner positions accumulates whole rows at a time (vectorized over i).
    nest = fmt::format(
        "    {acc} acc[block];\n"
        "    for (int64_t i = i0; i < i1; ++i) acc[i - i0] = {init};\n"
        "    for (int64_t r = r0; r < r1; ++r) {{\n"
        "#pragma omp simd\n"
        "      for (int64_t i = i0; i < i1; ++i) {{\n"
        "        const int64_t idx = (oi * red + r) * inner + i;\n"
        "{loop2}"
        "{stores2}"
        "        {combine}(acc[i - i0], {result});\n"
        "      }}\n"
        "    }}\n"
        "    for (int64_t i = i0; i < i1; ++i) {finish}\n",
        fmt::arg("acc", acc), fmt::arg("init", init), fmt::arg("loop2", indent(b.loop, 4)),
        fmt::arg("combine", combine), fmt::arg("result", b.reduced), fmt::arg("finish", finish_with("acc[i - i0]")),
        fmt::arg("stores2", array_stores(b, 8)));
  }
  return fmt::format(
      "extern \"C\" void {name}(const void* const* in, void* out, int64_t) {{\n"
      "{hoisted}"
      "{pointers}"
      "  constexpr int64_t outer = {outer}, red = {red}, inner = {inner}, block = {block}, blocks = {blocks};\n"
      "  constexpr int64_t splits = {splits}, chunk = {chunk};\n"
      "  std::vector<{acc}> partial(splits > 1 ? outer * splits * inner : 0);\n"
      "#pragma omp parallel for schedule(static) if (outer * red * inner > 16384)\n"
      "  for (int64_t w = 0; w < outer * blocks * splits; ++w) {{\n"
      "    const int64_t s = w % splits, ob = w / splits, oi = ob / blocks;\n"
      "    const int64_t i0 = (ob % blocks) * block, i1 = std::min(inner, i0 + block);\n"
      "    const int64_t r0 = s * chunk, r1 = std::min(red, r0 + chunk);\n"
      "    (void)i0; (void)i1;\n"
      "{nest}"
      "  }}\n"
      "  if (splits > 1) {{\n"
      "#pragma omp parallel for schedule(static) if (outer * inner > 16384)\n"
      "    for (int64_t k = 0; k < outer * inner; ++k) {{\n"
      "      const int64_t oi = k / inner, i = k % inner;\n"
      "      {acc} a = partial[oi * splits * inner + i];\n"
      "      for (int64_t s = 1; s < splits; ++s) {combine}(a, partial[(oi * splits + s) * inner + i]);\n"
      "      o[k] = {store};\n"
      "    }}\n"
      "  }}\n"
      "}}\n",
      fmt::arg("name", name), fmt::arg("hoisted", b.hoisted), fmt::arg("pointers", output_pointers(b, multi)),
      fmt::arg("outer", outer), fmt::arg("red", red), fmt::arg("inner", inner), fmt::arg("block", plan.block),
      fmt::arg("blocks", plan.blocks), fmt::arg("splits", plan.splits), fmt::arg("chunk", plan.chunk),
      fmt::arg("acc", acc), fmt::arg("nest", nest), fmt::arg("combine", combine),
      fmt::arg("store", store(out, fmt::format("static_cast<{}>(a)", compute_type(out)))));
}

std::string fusion_kernel_source(const ir::Computation& body, const std::string& name) {
  return reduction_of(body) ? input_kernel_source(body, name) : loop_kernel_source(body, name);
}

std::string kernel_name_for(const ir::Computation& body) {
  std::string source = fusion_kernel_source(body, "kernel");
  return "kiln_fused_" + hex64(fnv1a64(source));
}

}  // namespace kiln::backend::cpu
