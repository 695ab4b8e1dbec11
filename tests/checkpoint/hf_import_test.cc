// The streaming `kiln convert --from hf` (hf_import.h, checkpoint_writer.h): byte for byte the
// checkpoint the in-memory converter wrote (read every file into float64 literals,
// gpt_oss_from_hf, checkpoint::save; kept below as the reference), on a GPT-OSS in two
// files with an index, mixed f32/bf16 and MXFP4 experts; a missing file or tensor is one
// line naming it and writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/base/check.h"
#include "kiln/checkpoint/checkpoint.h"
#include "kiln/checkpoint/hf_gpt_oss.h"
#include "kiln/checkpoint/hf_import.h"
#include "kiln/checkpoint/mxfp4.h"
#include "kiln/checkpoint/safetensors.h"
#include "kiln/checkpoint/shard_layout.h"
#include "kiln/config/config.h"
#include "kiln/models/model.h"
#include "tests/testing/cli.h"
#include "tests/testing/hf_fixture.h"

namespace kiln::checkpoint {
namespace {

namespace fs = std::filesystem;
using kiln::testing::write_hf_fixture;

fs::path fresh_dir(const std::string& name) { return kiln::testing::fresh_temp_dir("kiln_hf_import_" + name); }

std::string file_bytes(const fs::path& path) { return kiln::testing::read_text_file(path.string()); }

// The converter as it was before streaming: every file into one TensorMap of float64
// literals (MXFP4 dequantized), gpt_oss_from_hf, then checkpoint::save of the whole state.
Status reference_convert(const fs::path& in, const fs::path& out) {
  std::ifstream cfg_in(in / "config.json");
  const nlohmann::json config = nlohmann::json::parse(cfg_in);
  TensorMap hf;
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    KILN_ASSIGN_OR_RETURN(TensorMap part, read_hf_tensors({(in / f).string()}));
    for (auto& [name, t] : part) hf.emplace(name, std::move(t));
  }
  KILN_ASSIGN_OR_RETURN(TensorMap kiln, gpt_oss_from_hf(hf, config["num_attention_heads"].get<int64_t>()));
  CheckpointState state;
  for (auto& [name, t] : kiln) state.tensors.push_back(StateTensor::global("params/" + name, t));
  state.data_iterator = {{"type", "none"}};
  state.rng = {{"imported_from", "huggingface"}, {"hf_config", config}};
  KILN_ASSIGN_OR_RETURN(state.config_yaml, gpt_oss_kiln_config(kiln, config));
  SaveOptions options;
  options.progress = false;
  return save(out.string(), state, options);
}

kiln::testing::CliRun convert(const fs::path& in, const fs::path& out) {
  return kiln::testing::run_command("KILN_PROGRESS=off " + std::string(KILN_BINARY),
                                    "convert --from hf --to kiln " + in.string() + " " + out.string());
}

TEST(HfImport, ABlockOfEveryTensorIsThatBlockOfTheWholeTensor) {
  // What a device of a sharded run reads (load_parameters_path=HF_DIR): blocks along each
  // dimension, a middle block, an empty one and the whole tensor, for every planned tensor
  // (copies, transposes, gate/up columns, MXFP4).
  const fs::path dir = fresh_dir("blocks");
  write_hf_fixture(dir / "hf");
  auto plan = plan_hf_import((dir / "hf").string());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  int64_t checked = 0;
  for (const KilnFromHf& t : plan->tensors) {
    auto whole = plan->checkpoint.produce(t);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    const std::vector<int64_t>& dims = t.shape.dims();
    const Region all{std::vector<int64_t>(dims.size(), 0), dims};
    std::vector<Region> blocks = {all};
    for (size_t d = 0; d < dims.size(); ++d) {
      for (int64_t part = 0; part < 2 && dims[d] >= 2; ++part) {
        Region r = all;
        r.dims[d] = dims[d] / 2;
        r.offset[d] = part * (dims[d] - dims[d] / 2);
        blocks.push_back(r);
      }
    }
    Region middle = all, empty = all;
    for (size_t d = 0; d < dims.size(); ++d) {
      middle.offset[d] = dims[d] / 3;
      middle.dims[d] = std::max<int64_t>(1, dims[d] / 2);
      if (middle.offset[d] + middle.dims[d] > dims[d]) middle.dims[d] = dims[d] - middle.offset[d];
    }
    if (!dims.empty()) empty.dims[0] = 0;
    blocks.push_back(middle);
    blocks.push_back(empty);
    const int elem = ir::dtype_size(t.shape.dtype());
    for (const Region& b : blocks) {
      std::string want(static_cast<size_t>(b.num_elements() * elem), '\0');
      copy_overlap(*whole, all, want, b, elem);
      auto got = plan->checkpoint.produce_block(t, b);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_TRUE(*got == want) << t.name << " block at [" << ir::dims_to_string(b.offset) << "] of ["
                                << ir::dims_to_string(b.dims) << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  Region outside{{0, 0}, {1000, 1}};
  EXPECT_FALSE(plan->checkpoint.produce_block(plan->tensors.front(), outside).ok());
}

// A device's block of a transposed tensor split along the source's columns (Kiln dim 0 of
// [cols, rows]) reads only its band of each source row: half the tensor's bytes for half of
// dim 0, not all of them.
TEST(HfImport, AColumnBlockOfATransposedTensorReadsOnlyItsBand) {
  const fs::path dir = fresh_dir("band");
  write_hf_fixture(dir / "hf");
  auto plan = plan_hf_import((dir / "hf").string());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  int64_t checked = 0;
  for (const KilnFromHf& t : plan->tensors) {
    if (t.transform != HfTransform::kTranspose || t.shape.rank() != 2 || t.shape.dim(0) < 2) continue;
    const int64_t bytes = t.shape.byte_size();
    const std::vector<int64_t>& dims = t.shape.dims();
    for (int64_t part = 0; part < 2; ++part) {
      Region half{{part * (dims[0] - dims[0] / 2), 0}, {dims[0] / 2, dims[1]}};
      const int64_t before = plan->checkpoint.block_bytes_read();
      auto got = plan->checkpoint.produce_block(t, half);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      const int64_t read = plan->checkpoint.block_bytes_read() - before;
      EXPECT_EQ(read, static_cast<int64_t>(got->size())) << t.name << ": read " << read << " of " << bytes << " bytes";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "the fixture has no transposed tensor";
}

TEST(HfImport, StreamingImportMatchesTheInMemoryConverterByteForByte) {
  const fs::path dir = fresh_dir("identity");
  write_hf_fixture(dir / "hf");
  ASSERT_TRUE(reference_convert(dir / "hf", dir / "reference").ok());
  kiln::testing::CliRun run = convert(dir / "hf", dir / "streamed");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* f : {"shard-0.safetensors", "manifest.json"}) {
    const std::string want = file_bytes(dir / "reference" / "0" / f), got = file_bytes(dir / "streamed" / "0" / f);
    ASSERT_FALSE(want.empty()) << f;
    EXPECT_TRUE(want == got) << f << " differs (" << want.size() << " vs " << got.size() << " bytes)";
  }
  // The MXFP4 experts became bf16 (the reference's dequantization), the rest kept its dtype.
  auto reader = CheckpointReader::open((dir / "streamed" / "0").string());
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  EXPECT_EQ(reader->find("params/layers.0.mlp.wi_0")->shape, ir::Shape(ir::DType::kBF16, {2, 32, 32}));
  EXPECT_EQ(reader->find("params/layers.1.mlp.wi_1")->shape, ir::Shape(ir::DType::kBF16, {2, 32, 32}));
  EXPECT_EQ(reader->find("params/layers.1.mlp.wo")->shape.dtype(), ir::DType::kF32);
}

// The plan is made from the headers alone, so a missing file or tensor fails before a byte
// is written: one line naming it, and no output directory at all.
TEST(HfImport, MissingShardFileIsNamedAndNothingIsWritten) {
  const fs::path dir = fresh_dir("missing_file");
  write_hf_fixture(dir / "hf");
  fs::remove(dir / "hf" / "model-00002-of-00002.safetensors");
  kiln::testing::CliRun run = convert(dir / "hf", dir / "out");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("model-00002-of-00002.safetensors"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("missing"), std::string::npos) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(HfImport, MissingTensorIsNamedAndThePreviousCheckpointIsKept) {
  const fs::path dir = fresh_dir("missing_tensor");
  write_hf_fixture(dir / "hf");
  ASSERT_EQ(convert(dir / "hf", dir / "out").exit_code, 0);
  const std::string good = file_bytes(dir / "out" / "0" / "manifest.json");
  // Rewrite the second file without one tensor (the index still names it).
  const fs::path second = dir / "hf" / "model-00002-of-00002.safetensors";
  auto file = read_safetensors(second.string());
  ASSERT_TRUE(file.ok());
  std::vector<NamedTensor> kept;
  for (const std::string& name : file->names) {
    if (name != "model.layers.1.mlp.experts.down_proj") kept.emplace_back(name, &file->tensors.at(name));
  }
  ASSERT_TRUE(write_safetensors(second.string(), kept).ok());
  kiln::testing::CliRun run = convert(dir / "hf", dir / "out");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("model.layers.1.mlp.experts.down_proj"), std::string::npos) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  // With the index agreeing (no entry either) the tensor is simply absent: the plan names it.
  nlohmann::json index = nlohmann::json::parse(file_bytes(dir / "hf" / "model.safetensors.index.json"));
  index["weight_map"].erase("model.layers.1.mlp.experts.down_proj");
  std::ofstream(dir / "hf" / "model.safetensors.index.json") << index.dump();
  run = convert(dir / "hf", dir / "fresh");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.err.find("Hugging Face tensor model.layers.1.mlp.experts.down_proj is missing"), std::string::npos)
      << run.err;
  EXPECT_FALSE(fs::exists(dir / "fresh"));
  EXPECT_EQ(file_bytes(dir / "out" / "0" / "manifest.json"), good);
  EXPECT_EQ(list_steps((dir / "out").string()), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace kiln::checkpoint
