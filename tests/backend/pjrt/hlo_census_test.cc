// XLA's census of an optimized program (hlo_census.h), from serialized xla.HloModuleProto bytes
// written here field by field: fusions and what they hold, collectives sync and async (start/
// done pairs, async wrappers), control flow, custom calls, and the errors on bytes that are
// not such a module.
#include "kiln/backend/pjrt/hlo_census.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln::backend::pjrt {
namespace {

// Protobuf wire format, enough to write the fields the census reads.
std::string varint(uint64_t v) {
  std::string out;
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    if (v != 0) byte |= 0x80;
    out.push_back(static_cast<char>(byte));
  } while (v != 0);
  return out;
}
std::string bytes_field(int field, const std::string& value) { return varint(field << 3 | 2) + varint(value.size()) + value; }
std::string varint_field(int field, uint64_t value) { return varint(field << 3) + varint(value); }

std::string instruction(const std::string& opcode, std::vector<int64_t> called = {}, const std::string& fusion_kind = "",
                        const std::string& target = "") {
  std::string s = bytes_field(1, opcode + ".1") + bytes_field(2, opcode);
  if (!fusion_kind.empty()) s += bytes_field(11, fusion_kind);
  if (!target.empty()) s += bytes_field(28, target);
  std::string packed;
  for (int64_t id : called) packed += varint(id);
  if (!packed.empty()) s += bytes_field(38, packed);
  s += varint_field(7, 0);  // a field the census skips (metadata's number, as a varint)
  return s;
}

std::string computation(int64_t id, const std::string& name, const std::vector<std::string>& instructions,
                        bool is_fusion = false) {
  std::string s = bytes_field(1, name);
  for (const std::string& i : instructions) s += bytes_field(2, i);
  s += varint_field(5, id);
  if (is_fusion) s += varint_field(7, 1);
  return s;
}

std::string module(const std::vector<std::string>& computations, int64_t entry) {
  std::string s = bytes_field(1, "jit_step");
  for (const std::string& c : computations) s += bytes_field(3, c);
  s += varint_field(6, entry);
  return s;
}

std::string example() {
  return module(
      {
          computation(1, "gemm_body", {instruction("parameter"), instruction("dot")}, /*is_fusion=*/true),
          computation(2, "loop_body", {instruction("parameter"), instruction("add"), instruction("multiply")}, true),
          computation(3, "ragged_body", {instruction("ragged-dot")}, true),
          computation(4, "add_reducer", {instruction("add")}),
          computation(5, "a2a_wrapped", {instruction("parameter"), instruction("all-to-all")}),
          computation(6, "while_body",
                      {instruction("parameter"), instruction("fusion", {2}, "kLoop"), instruction("all-reduce", {4})}),
          computation(7, "while_cond", {instruction("parameter"), instruction("compare")}),
          computation(8, "main",
                      {instruction("parameter"), instruction("fusion", {1}, "kCustom"),
                       instruction("fusion", {2}, "kLoop"), instruction("fusion", {3}, "kCustom"),
                       instruction("all-gather-start"), instruction("all-gather-done"),
                       instruction("reduce-scatter", {4}), instruction("async-start", {5}),
                       instruction("async-done", {5}), instruction("while", {7, 6}),
                       instruction("custom-call", {}, "", "__cublas$gemm"),
                       instruction("custom-call", {}, "", "__cudnn$fmhaSoftmax"), instruction("tuple")}),
      },
      8);
}

TEST(HloCensus, CountsWhatRuns) {
  Result<HloCensus> c = hlo_census(example());
  ASSERT_TRUE(c.ok()) << c.status().message();
  // main: 3 fusions, all-gather-start, reduce-scatter, async-start, while, 2 custom calls; the
  // while body: a fusion and an all-reduce; the condition: compare. Parameters, tuples and
  // -done halves are bookkeeping.
  EXPECT_EQ(c->fusions, 4);
  EXPECT_EQ(c->fusion_kinds.at("kCustom"), 2);
  EXPECT_EQ(c->fusion_kinds.at("kLoop"), 2);
  EXPECT_EQ(c->gemms, 2);            // the dot fusion and the cuBLAS call
  EXPECT_EQ(c->grouped_matmuls, 1);  // the ragged-dot fusion
  EXPECT_EQ(c->attention, 1);
  EXPECT_EQ(c->while_loops, 1);
  EXPECT_EQ(c->collectives.at("all-gather"), 1);
  EXPECT_EQ(c->collectives.at("reduce-scatter"), 1);
  EXPECT_EQ(c->collectives.at("all-to-all"), 1);
  EXPECT_EQ(c->collectives.at("all-reduce"), 1);
  EXPECT_EQ(c->async_collectives.at("all-gather"), 1);
  EXPECT_EQ(c->async_collectives.at("all-to-all"), 1);
  EXPECT_FALSE(c->async_collectives.contains("reduce-scatter"));
  EXPECT_EQ(c->custom_calls.at("__cublas$gemm"), 1);
  EXPECT_EQ(c->instructions, 12);  // 9 in main (the while included), 2 in its body, 1 in its condition
}

TEST(HloCensus, ReadsTheModuleInsideAModuleWithConfig) {
  const std::string with_config = bytes_field(1, example()) + bytes_field(2, varint_field(1, 4));
  Result<std::string> inner = hlo_module_of(with_config);
  ASSERT_TRUE(inner.ok()) << inner.status().message();
  EXPECT_EQ(*inner, example());
  EXPECT_FALSE(hlo_module_of(bytes_field(2, "x")).ok());
}

TEST(HloCensus, RefusesBytesThatAreNotAModule) {
  Result<HloCensus> truncated = hlo_census(example().substr(0, 40));
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("hlo module"), std::string::npos) << truncated.status().message();
  Result<HloCensus> no_entry = hlo_census(module({computation(1, "f", {instruction("add")})}, 9));
  ASSERT_FALSE(no_entry.ok());
  EXPECT_NE(no_entry.status().message().find("no entry computation"), std::string::npos);
  EXPECT_FALSE(hlo_census(std::string("\x07\x01", 2)).ok());  // wire type 7 does not exist
}

}  // namespace
}  // namespace kiln::backend::pjrt
