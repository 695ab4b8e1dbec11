// MXFP4 import: Kiln's dequantizer against the spec's table (§1.8) and bit for bit against an
// independent numpy dequantizer (tests/reference/mxfp4_ref.py); `kiln convert --from hf`
// dequantizes *_blocks/*_scales expert weights on import.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/mxfp4.h"
#include "kiln/checkpoint/safetensors.h"
#include "tests/testing/hf_fixture.h"
#include "tests/testing/temp_path.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;

bool numpy_available() { return std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") == 0; }

std::string temp_dir(const std::string& name) {
  fs::path p = ::kiln::testing::temp_path("kiln_mxfp4_test_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Seeded blocks (any byte) and scales near the bias (values of magnitude 2^-8 .. 2^8).
std::pair<std::string, std::string> random_mxfp4(int64_t blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string b(static_cast<size_t>(blocks * 16), '\0'), s(static_cast<size_t>(blocks), '\0');
  for (char& c : b) c = static_cast<char>(rng() & 0xFF);
  for (char& c : s) c = static_cast<char>(119 + rng() % 17);
  return {b, s};
}

TEST(Mxfp4, DecodesTheSpecTable) {
  // One row of one block: byte m holds codes (2m, 2m+1) = (m, 15 - m) in (low, high) nibbles.
  std::string blocks(16, '\0');
  for (int m = 0; m < 16; ++m) blocks[m] = static_cast<char>(m | ((15 - m) << 4));
  const std::string scales(1, static_cast<char>(128));  // 2^(128 - 127) = 2
  auto v = dequantize_mxfp4("w_blocks", {1, 1, 16}, blocks, {1, 1}, scales, ir::DType::kF32);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->shape().dims(), (std::vector<int64_t>{32, 1}));
  const double lut[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int m = 0; m < 16; ++m) {
    EXPECT_EQ(v->at(2 * m), 2 * lut[m]) << m;
    EXPECT_EQ(v->at(2 * m + 1), 2 * lut[15 - m]) << m;
  }
  EXPECT_TRUE(std::signbit(v->at(2 * 8)));  // code 8 is -0
  auto bad = dequantize_mxfp4("w_blocks", {1, 1, 8}, blocks, {1, 1}, scales, ir::DType::kF32);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("w_blocks"), std::string::npos);
}

TEST(Mxfp4, MatchesTheNumpyReferenceBitForBit) {
  if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) is not installed";
  const std::string dir = temp_dir("ref");
  // [E=2, R=6, G=3, 16] -> [2, 96, 6].
  auto [blocks, scales] = random_mxfp4(2 * 6 * 3, 5);
  ASSERT_TRUE(write_safetensors_raw(dir + "/in.safetensors", {{"w_blocks", "U8", {2, 6, 3, 16}, &blocks},
                                                             {"w_scales", "U8", {2, 6, 3}, &scales}})
                  .ok());
  const std::string cmd = "/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) + "/tests/reference/mxfp4_ref.py " + dir +
                          "/in.safetensors " + dir + "/ref.safetensors";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto ref = read_safetensors(dir + "/ref.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto kiln = dequantize_mxfp4("w_blocks", {2, 6, 3, 16}, blocks, {2, 6, 3}, scales, ir::DType::kF32);
  ASSERT_TRUE(kiln.ok()) << kiln.status().to_string();
  EXPECT_EQ(kiln->shape().dims(), (std::vector<int64_t>{2, 96, 6}));
  EXPECT_TRUE(*kiln == ref->tensors.at("w")) << "Kiln and numpy dequantize differently";
}

TEST(Mxfp4, ConvertFromHfDequantizesExpertBlocks) {
  if (!numpy_available()) GTEST_SKIP() << "/usr/bin/python3 with numpy (Debian python3-numpy) is not installed";
  const std::string dir = temp_dir("convert");
  // A small GPT-OSS (D=32, I=32, E=2, 2 layers) in the HF layout, its layer-0 experts as MXFP4.
  const TensorMap kiln = kiln::testing::small_gpt_oss_params(3);
  auto hf = gpt_oss_to_hf(kiln);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const std::string e = "model.layers.0.mlp.experts.";
  hf->erase(e + "gate_up_proj");
  hf->erase(e + "down_proj");
  // OpenAI layout: gate_up [E, 2I, D/32, 16], down [E, D, I/32, 16].
  auto [gu_b, gu_s] = random_mxfp4(2 * 64 * 1, 7);
  auto [dn_b, dn_s] = random_mxfp4(2 * 32 * 1, 8);
  std::vector<std::string> payloads;
  payloads.reserve(hf->size());
  std::vector<RawTensor> raw = {{e + "gate_up_proj_blocks", "U8", {2, 64, 1, 16}, &gu_b},
                                {e + "gate_up_proj_scales", "U8", {2, 64, 1}, &gu_s},
                                {e + "down_proj_blocks", "U8", {2, 32, 1, 16}, &dn_b},
                                {e + "down_proj_scales", "U8", {2, 32, 1}, &dn_s}};
  ASSERT_TRUE(write_safetensors_raw(dir + "/experts.safetensors", raw).ok());
  for (const auto& [name, t] : *hf) {
    payloads.push_back(literal_bytes(t));
    raw.push_back({name, safetensors_dtype(t.shape().dtype()), t.shape().dims(), &payloads.back()});
  }
  fs::create_directories(dir + "/hf");
  ASSERT_TRUE(write_safetensors_raw(dir + "/hf/model.safetensors", raw).ok());
  std::ofstream(dir + "/hf/config.json") << R"({"model_type": "gpt_oss", "num_attention_heads": 2})";
  const std::string convert = std::string(KILN_BINARY) + " convert --from hf --to kiln " + dir + "/hf " + dir +
                              "/kiln > /dev/null";
  ASSERT_EQ(std::system(convert.c_str()), 0) << convert;
  const std::string ref_cmd = "/usr/bin/python3 " + std::string(KILN_SOURCE_DIR) + "/tests/reference/mxfp4_ref.py " +
                              dir + "/experts.safetensors " + dir + "/ref.safetensors";
  ASSERT_EQ(std::system(ref_cmd.c_str()), 0) << ref_cmd;
  auto ref = read_safetensors(dir + "/ref.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto ckpt = load(dir + "/kiln/0");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  auto param = [&](const std::string& name) {
    const StateTensor* t = ckpt->find("params/" + name);
    KILN_CHECK(t != nullptr) << name;
    auto l = literal_from_bytes(t->shape, t->shards.at(0));
    KILN_CHECK(l.ok());
    return *l;
  };
  // gate_up_proj [E, D, 2I]: wi_0 the even columns, wi_1 the odd ones; down_proj = wo [E, I, D].
  const ir::Literal& gu = ref->tensors.at(e + "gate_up_proj");
  ASSERT_EQ(gu.shape().dims(), (std::vector<int64_t>{2, 32, 64}));
  ir::Literal wi0 = param("layers.0.mlp.wi_0"), wi1 = param("layers.0.mlp.wi_1"), wo = param("layers.0.mlp.wo");
  EXPECT_EQ(wi0.shape(), ir::Shape(ir::DType::kBF16, {2, 32, 32}));
  for (int64_t row = 0; row < 2 * 32; ++row)
    for (int64_t i = 0; i < 32; ++i) {
      ASSERT_EQ(wi0.at(row * 32 + i), gu.at(row * 64 + 2 * i)) << row << "," << i;
      ASSERT_EQ(wi1.at(row * 32 + i), gu.at(row * 64 + 2 * i + 1)) << row << "," << i;
    }
  EXPECT_EQ(wo.values(), ref->tensors.at(e + "down_proj").values());
  EXPECT_EQ(wo.shape().dims(), (std::vector<int64_t>{2, 32, 32}));
}

}  // namespace
}  // namespace kiln::checkpoint
